// The deleteIf contract every Kv must pass: a key is deleted only at the
// version asked for; a version that is already gone counts as deleted (a
// delete tried again after its reply was lost must not answer that it
// failed), and a key at another version is left as it is.
import { describe, expect, it } from 'vitest';
import type { Kv } from '../../src/lease/kv.ts';

export function deleteIfContract(name: string, kv: () => Promise<Kv>, prefix: string): void {
  describe(`Kv deleteIf (${name})`, () => {
    it('deletes at the version asked for, answers true for one already gone, keeps another', async () => {
      const signal = AbortSignal.timeout(20_000);
      const s = await kv();
      const put = async (key: string, value: string): Promise<string> => {
        const w = await s.create(`${prefix}/${key}`, value, 60, signal);
        if (!w) throw new Error(`test setup: ${key} exists`);
        return w.entry.modRevision;
      };
      const a = await put('a', '{"v":1}');
      expect(await s.deleteIf(`${prefix}/a`, a, signal)).toBe(true);
      expect(await s.get(`${prefix}/a`, signal)).toBeUndefined();
      // the same delete again (its reply lost, say): the version is gone
      expect(await s.deleteIf(`${prefix}/a`, a, signal)).toBe(true);
      // a key rewritten since the version asked for: false, and kept
      const b = await put('b', '{"v":1}');
      const rewritten = await s.replace({
        key: `${prefix}/b`,
        value: '{"v":2}',
        expected: b,
        ttlSeconds: 60,
        signal,
      });
      expect(rewritten).toBeDefined();
      expect(await s.deleteIf(`${prefix}/b`, b, signal)).toBe(false);
      expect((await s.get(`${prefix}/b`, signal))?.value).toBe('{"v":2}');
      // deleted and made again by another writer since: not the version asked for, kept
      const c = await put('c', '{"v":1}');
      expect(await s.deleteIf(`${prefix}/c`, c, signal)).toBe(true);
      await put('c', '{"v":"again"}');
      expect(await s.deleteIf(`${prefix}/c`, c, signal)).toBe(false);
      expect((await s.get(`${prefix}/c`, signal))?.value).toBe('{"v":"again"}');
    });
  });
}
