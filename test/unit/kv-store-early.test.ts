// The etcd-layout store's side of the early routes (AcquireRequest.early): the first try's listing
// is handed over whole (every key first, then every record in chunks, then the end), a later try
// streams nothing, and no try picks a subnet the early writer routed to a peer; and the listing
// prefetched while the daemon picks its interface is the first try's.
import { describe, expect, it } from 'vitest';
import { encodeLeaseValue, parseSubnetKey } from '../../src/lease/codec.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import type { EarlyListing, Lease, LeaseAttrs, LeaseRecord } from '../../src/lease/types.ts';
import { formatCidr } from '../../src/net/ipv4.ts';

const attrs = (host: number): LeaseAttrs => ({
  publicIp: `192.168.50.${host}`,
  publicIpv6: null,
  backendType: 'host-gw',
  backendData: null,
});

/** Three subnets: 10.50.1.0/24 to 10.50.3.0/24. */
const TINY =
  '{"Network":"10.50.0.0/22","SubnetLen":24,"SubnetMin":"10.50.1.0","SubnetMax":"10.50.3.0","Backend":{"Type":"host-gw"}}';

/** An early listing that records what it is told, and claims `written` were routed. */
function recorder(written: Lease[] = []): EarlyListing & {
  keys: string[][];
  chunks: LeaseRecord[][];
  ends: number;
  failed: boolean[];
} {
  let ended = false;
  const seen = {
    keys: [] as string[][],
    chunks: [] as LeaseRecord[][],
    ends: 0,
    failed: [] as boolean[],
    written,
    begin(keys: readonly string[]): boolean {
      if (ended) return false;
      seen.keys.push([...keys]);
      return true;
    },
    take(chunk: readonly LeaseRecord[]): void {
      seen.chunks.push([...chunk]);
    },
    end(o?: { failed?: boolean }): void {
      ended = true;
      seen.ends++;
      seen.failed.push(o?.failed === true);
    },
  };
  return seen;
}

describe('the acquisition with an early writer', () => {
  it('hands over the first listing: its keys, then its records in a chunk of 50 and then of 500, then the end', async () => {
    const kv = new MemoryKv();
    kv.putRaw('/n/config', '{"Network":"10.0.0.0/8","Backend":{"Type":"host-gw"}}');
    for (let i = 0; i < 1_234; i++)
      kv.putRaw(
        `/n/subnets/10.${1 + Math.floor(i / 250)}.${i % 250}.0-24`,
        encodeLeaseValue(attrs(2 + (i % 200))),
      );
    kv.putRaw('/n/subnets/10.200.0.0-24', '{"PublicIP":');
    const store = new KvLeaseStore({ kv, prefix: '/n' });
    const signal = new AbortController().signal;
    const config = await store.getNetworkConfig(signal);
    const early = recorder();
    const lease = await store.acquireLease(
      { config, attrs: attrs(1), previous: undefined, early },
      signal,
    );
    expect(early.keys).toHaveLength(1);
    expect(early.keys[0]).toHaveLength(1_235);
    expect(early.chunks.map((c) => c.length)).toEqual([50, 500, 500, 185]);
    expect(early.ends).toBe(1);
    expect(early.failed).toEqual([false]);
    const told = early.chunks.flat();
    expect(new Set(told.map((r) => r.key))).toEqual(new Set(early.keys[0]));
    expect(told.filter((r) => !r.ok).map((r) => r.key)).toEqual(['10.200.0.0-24']);
    expect(early.keys[0]).not.toContain(lease.key);
    // a second acquisition (the daemon's retry while the store is unreachable) streams nothing
    await store.acquireLease({ config, attrs: attrs(1), previous: undefined, early }, signal);
    expect(early.keys).toHaveLength(1);
    expect(early.chunks).toHaveLength(4);
    await store.close();
  });

  it('reads a prefetched listing in its first try, and a subnet taken since still loses to its holder', async () => {
    for (let i = 0; i < 10; i++) {
      const kv = new MemoryKv();
      kv.putRaw('/n/config', TINY);
      kv.putRaw('/n/subnets/10.50.1.0-24', encodeLeaseValue(attrs(5)));
      const store = new KvLeaseStore({ kv, prefix: '/n', random: () => i / 10 });
      const signal = new AbortController().signal;
      const config = await store.getNetworkConfig(signal);
      store.prefetchListing(signal);
      // another node takes a subnet after the prefetch, before our first try
      await Promise.resolve();
      kv.putRaw('/n/subnets/10.50.2.0-24', encodeLeaseValue(attrs(6)));
      const early = recorder();
      const lease = await store.acquireLease(
        { config, attrs: attrs(1), previous: undefined, early },
        signal,
      );
      expect(early.keys[0]).toEqual(['10.50.1.0-24']);
      expect(lease.key).toBe('10.50.3.0-24');
      await store.close();
    }
  });

  it('tells the early writer a try failed: another live node holds our PublicIP', async () => {
    const kv = new MemoryKv();
    kv.putRaw('/n/config', TINY);
    kv.putRaw('/n/subnets/10.50.1.0-24', encodeLeaseValue({ ...attrs(1), node: 'other' }));
    const store = new KvLeaseStore({ kv, prefix: '/n' });
    const signal = new AbortController().signal;
    const config = await store.getNetworkConfig(signal);
    const early = recorder();
    await expect(
      store.acquireLease(
        { config, attrs: attrs(1), previous: undefined, nodeName: 'us', early },
        signal,
      ),
    ).rejects.toMatchObject({ code: 'IDENTITY_CONFLICT' });
    expect(early.chunks.flat().map((r) => r.key)).toEqual(['10.50.1.0-24']);
    expect(early.failed).toEqual([true]);
    await store.close();
  });

  it('never picks a subnet the early writer routed, even one no longer listed', async () => {
    const picked = new Set<string>();
    for (let i = 0; i < 20; i++) {
      const kv = new MemoryKv();
      kv.putRaw('/n/config', TINY);
      kv.putRaw('/n/subnets/10.50.1.0-24', encodeLeaseValue(attrs(5)));
      // routed from an earlier try's listing, deleted from the store since
      const gone: Lease = {
        key: '10.50.2.0-24',
        subnet: parseSubnetKey('10.50.2.0-24'),
        attrs: attrs(6),
        expiresAt: 0,
        version: '3',
      };
      const store = new KvLeaseStore({ kv, prefix: '/n', random: () => i / 20 });
      const signal = new AbortController().signal;
      const config = await store.getNetworkConfig(signal);
      const lease = await store.acquireLease(
        {
          config,
          attrs: attrs(1),
          previous: parseSubnetKey('10.50.2.0-24'),
          early: recorder([gone]),
        },
        signal,
      );
      picked.add(formatCidr(lease.subnet ?? parseSubnetKey('0.0.0.0-0')));
      await store.close();
    }
    expect([...picked]).toEqual(['10.50.3.0/24']);
  });
});
