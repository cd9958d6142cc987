// The keys-created-between contract every Kv must pass: the keys under a
// prefix created strictly between two revisions, in key order, as of now
// (rewritten keys keep their create revision, deleted ones are gone), with
// nothing from other prefixes. The dual-stack acquisition's check for an
// earlier claim (kv-store.ts claimedEarlier) reads only these.
import { describe, expect, it } from 'vitest';
import type { Kv } from '../../src/lease/kv.ts';

export function keysCreatedContract(name: string, kv: () => Promise<Kv>, prefix: string): void {
  describe(`Kv keysCreatedBetween (${name})`, () => {
    it('lists the keys created strictly between two revisions, in key order, as of now', async () => {
      const signal = AbortSignal.timeout(20_000);
      const s = await kv();
      const create = async (key: string): Promise<bigint> => {
        const w = await s.create(`${prefix}/${key}`, `{"v":"${key}"}`, 60, signal);
        if (!w) throw new Error(`test setup: ${key} exists`);
        return BigInt(w.entry.modRevision);
      };
      const a = await create('a');
      const listed = (await s.list(`${prefix}/`, signal)).revision;
      // beside the prefix, created in the window: never listed
      const other = await s.create(`${prefix}-other/x`, '{}', 60, signal);
      await create('c');
      const b = await create('b');
      const gone = await create('gone');
      // a key rewritten since keeps the revision that created it
      const first = await s.get(`${prefix}/a`, signal);
      if (!first || !other) throw new Error('test setup: a or the other prefix missing');
      const rewritten = await s.replace({
        key: first.key,
        value: '{"v":"a2"}',
        expected: first.modRevision,
        ttlSeconds: 60,
        signal,
      });
      expect(rewritten).toBeDefined();
      expect(await s.deleteIf(`${prefix}/gone`, String(gone), signal)).toBe(true);
      const d = await create('d');
      const between = (after: bigint, before: bigint): Promise<string[]> =>
        s.keysCreatedBetween(`${prefix}/`, { after, before }, signal);

      expect(await between(listed, d)).toEqual([`${prefix}/b`, `${prefix}/c`]);
      expect(await between(listed, d + 1n)).toEqual([`${prefix}/b`, `${prefix}/c`, `${prefix}/d`]);
      expect(await between(b, d + 1n)).toEqual([`${prefix}/d`]);
      // the bounds are exclusive at both ends
      expect(await between(0n, a)).toEqual([]);
      expect(await between(0n, a + 1n)).toEqual([`${prefix}/a`]);
      expect(await between(a, a + 1n)).toEqual([]);
      expect(await between(d, d + 1n)).toEqual([]);
      expect(await between(0n, 1n)).toEqual([]);
    });
  });
}
