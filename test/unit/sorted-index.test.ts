// SortedIndex (src/util/sorted-index.ts) against a Map of lists, over random builds, adds and
// removals with keys that collide: every lookup must agree, values under one key in the order
// they were added.
import { describe, expect, it } from 'vitest';
import { SortedIndex } from '../../src/util/sorted-index.ts';
import { random } from '../helpers/random.ts';

interface Item {
  readonly key: string;
  readonly n: number;
}

describe('SortedIndex', () => {
  it('answers as a Map of lists would, through builds, adds and removals', () => {
    const next = random(17);
    const below = (k: number): number => Math.floor(next() * k);
    // few keys, so that many values share one; "10.1.2.0" and "10.1.10.0" order by code unit
    const keyAt = (): string => `10.1.${below(12)}.0${next() < 0.2 ? '/24' : ''}`;
    let n = 0;
    for (let round = 0; round < 20; round++) {
      const start = Array.from({ length: below(40) }, () => ({ key: keyAt(), n: n++ }));
      const index = new SortedIndex<Item>(start, (t) => t.key);
      const model = new Map<string, Item[]>();
      for (const t of start) model.set(t.key, [...(model.get(t.key) ?? []), t]);
      for (let op = 0; op < 200; op++) {
        const all = [...model.values()].flat();
        if (next() < 0.5 || all.length === 0) {
          const t = { key: keyAt(), n: n++ };
          index.add(t);
          model.set(t.key, [...(model.get(t.key) ?? []), t]);
        } else {
          // removing a value itself, or one that was never added under an existing key
          const t = next() < 0.9 ? (all[below(all.length)] as Item) : { key: keyAt(), n: -1 };
          index.remove(t);
          const left = (model.get(t.key) ?? []).filter((x) => x !== t);
          if (left.length === 0) model.delete(t.key);
          else model.set(t.key, left);
        }
        const key = keyAt();
        expect(index.all(key)).toEqual(model.get(key));
        expect(index.get(key)).toBe(model.get(key)?.[0]);
      }
      const keys = index.values().map((t) => t.key);
      expect(keys).toEqual([...keys].sort());
      expect(index.size).toBe([...model.values()].flat().length);
      // stable: values under one key keep the order they came in
      for (const [key, values] of model) expect(index.all(key)).toEqual(values);
    }
  });

  it('finds nothing in an empty index', () => {
    const index = new SortedIndex<Item>([], (t) => t.key);
    expect(index.get('a')).toBeUndefined();
    expect(index.all('a')).toBeUndefined();
    index.remove({ key: 'a', n: 0 });
    expect(index.size).toBe(0);
  });
});
