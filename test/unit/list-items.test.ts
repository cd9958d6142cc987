// The list splitter: items out one by one whatever the chunking, the rest parsed without them,
// and every malformed or oversized reply an error.
import { describe, expect, it } from 'vitest';
import { ListItemSplitter, ListTooLarge } from '../../src/lease/list-items.ts';
import { random as seeded } from '../helpers/random.ts';

const BOUNDS = { item: 64 * 1024, rest: 4096 };

/** Splits `text` into chunks at the given byte offsets and runs it through a splitter. */
function split(
  text: string,
  cuts: readonly number[] = [],
  bounds = BOUNDS,
): { items: unknown[]; rest: unknown } {
  const bytes = Buffer.from(text, 'utf8');
  const items: unknown[] = [];
  const s = new ListItemSplitter(bounds, (t) => items.push(JSON.parse(t)));
  let from = 0;
  for (const cut of [...cuts, bytes.length]) {
    s.push(bytes.subarray(from, cut));
    from = cut;
  }
  const rest = s.end();
  expect(s.count).toBe(items.length);
  return { items, rest };
}

const NODES = [
  {
    metadata: { name: 'n1', annotations: { 'a/b': 'x}]{["\\"' } },
    spec: { podCIDR: '10.0.1.0/24' },
  },
  { metadata: { name: 'nöde-2 ✓', labels: {} }, status: { addresses: [{ type: 'InternalIP' }] } },
  { metadata: { name: 'items' }, spec: {} },
];
const LIST = {
  kind: 'NodeList',
  apiVersion: 'v1',
  metadata: { resourceVersion: '12345', continue: 'tok"en' },
  items: NODES,
};

describe('ListItemSplitter', () => {
  it('hands on every item and parses the rest with items empty', () => {
    const { items, rest } = split(JSON.stringify(LIST));
    expect(items).toEqual(NODES);
    expect(rest).toEqual({ ...LIST, items: [] });
  });

  it('gives the same result at every chunk boundary (one cut anywhere, and random many)', () => {
    const text = JSON.stringify(LIST, null, 1);
    const size = Buffer.byteLength(text);
    for (let cut = 0; cut <= size; cut++) {
      const { items, rest } = split(text, [cut]);
      expect(items).toEqual(NODES);
      expect(rest).toEqual({ ...LIST, items: [] });
    }
    const random = seeded(7);
    for (let round = 0; round < 200; round++) {
      const cuts = Array.from({ length: 1 + Math.floor(random() * 30) }, () =>
        Math.floor(random() * size),
      ).sort((a, b) => a - b);
      expect(split(text, cuts).items).toEqual(NODES);
    }
  });

  it('finds the items array wherever it is, and only under the key "items" at the top', () => {
    const text = `{"items" : [ {"a":1} , {"b":[2,{"c":3}]} ],"metadata":{"items":[{"no":1}]},"kind":"items"}`;
    const { items, rest } = split(text);
    expect(items).toEqual([{ a: 1 }, { b: [2, { c: 3 }] }]);
    expect(rest).toEqual({ items: [], metadata: { items: [{ no: 1 }] }, kind: 'items' });
  });

  it('skips items that are not objects', () => {
    const { items } = split('{"items":["x",5,[{"in":1}],{"ok":true},null]}');
    expect(items).toEqual([{ ok: true }]);
  });

  it('refuses an item or a remainder over its bound', () => {
    const big = { metadata: { name: 'x'.repeat(2000) } };
    const text = JSON.stringify({ items: [big] });
    expect(() => split(text, [], { item: 1000, rest: 4096 })).toThrow(ListTooLarge);
    const wide = JSON.stringify({ metadata: { pad: 'y'.repeat(5000) }, items: [] });
    expect(() => split(wide, [], BOUNDS)).toThrow(ListTooLarge);
  });

  it('refuses a reply that ends early or is not JSON', () => {
    const text = JSON.stringify(LIST);
    expect(() => split(text.slice(0, text.length - 1))).toThrow(/ended before/);
    expect(() => split(text.slice(0, text.indexOf('"n1"')))).toThrow(/ended before/);
    expect(() => split('{"items":[],"kind":NodeList}')).toThrow(/not a JSON list/);
    expect(() => split('{"items":[]}}')).toThrow(/unbalanced/);
  });
});
