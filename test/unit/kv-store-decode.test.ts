// The etcd-layout lease store's decoding of one stored entry (KvLeaseStore.decode): a value too
// large to read is refused unread by its UTF-8 size, which is counted only when its length in
// UTF-16 units could reach the limit.
import { describe, expect, it } from 'vitest';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';

describe('a lease value too large to read', () => {
  const MAX = 64 * 1024;
  const record = (value: string) =>
    new KvLeaseStore({ kv: new MemoryKv(), prefix: '/v' }).decode({
      key: '/v/subnets/10.244.1.0-24',
      value,
      modRevision: '2',
    });
  const sized = (value: string) => {
    const r = record(value);
    return r.ok
      ? undefined
      : /^value is \d+ bytes, more than the 65536 a lease may hold/.test(r.reason);
  };

  it('is refused by its UTF-8 bytes, counted past a third of the limit in characters', () => {
    // JSON of exactly MAX bytes is read (and refused for what it says), one byte more is not
    const json = (bytes: number, unit: string, width: number): string => {
      const pad = bytes - '{"PublicIP":"192.0.2.1","Pad":""}'.length;
      const units = unit.repeat(Math.floor(pad / width));
      return `{"PublicIP":"192.0.2.1","Pad":"${units}${'p'.repeat(pad % width)}"}`;
    };
    for (const [unit, width] of [
      ['p', 1],
      ['\u20ac', 3],
    ] as const) {
      expect(Buffer.byteLength(json(MAX, unit, width))).toBe(MAX);
      expect(sized(json(MAX, unit, width))).toBe(false);
      expect(sized(json(MAX + 1, unit, width))).toBe(true);
    }
    // a third of the limit in 3-byte characters is under it, one more is over
    expect(sized(`"${'\u20ac'.repeat(Math.floor(MAX / 3) - 1)}"`)).toBe(false);
    expect(sized(`"${'\u20ac'.repeat(Math.floor(MAX / 3) + 1)}"`)).toBe(true);
  });
});
