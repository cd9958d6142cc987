// The etcd-layout store's side of the early routes (AcquireRequest.early): the first try's listing
// is handed over whole (every key first, then every record in chunks, then the end), a later try
// streams nothing, and no try picks a subnet the early writer routed to a peer; and the listing
// prefetched while the daemon picks its interface is the first try's.
import { describe, expect, it } from 'vitest';
import { TwillError } from '../../src/errors.ts';
import { encodeLeaseValue, parseSubnetKey } from '../../src/lease/codec.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import type { Kv, KvListing, KvPage } from '../../src/lease/kv.ts';
import { MemoryKv, shared } from '../../src/lease/memory-kv.ts';
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

/** A MemoryKv with a /8 host-gw config and `count` peers' leases, /24 each, in key order. */
function wideStore(count: number): MemoryKv {
  const kv = new MemoryKv();
  kv.putRaw('/n/config', '{"Network":"10.0.0.0/8","Backend":{"Type":"host-gw"}}');
  for (let i = 0; i < count; i++)
    kv.putRaw(
      `/n/subnets/10.${1 + Math.floor(i / 250)}.${i % 250}.0-24`,
      encodeLeaseValue(attrs(2 + (i % 200))),
    );
  return kv;
}

/**
 * `kv` whose listing is told page by page as `tell` says (it is handed the whole listing and
 * onPage, and may throw), then returned whole.
 */
function tellingKv(
  kv: MemoryKv,
  tell: (whole: KvListing, onPage: ((page: KvPage) => void) | undefined) => Promise<void>,
): Kv {
  return {
    ...shared(kv),
    list: async (prefix, signal, onPage) => {
      const whole = await kv.list(prefix, signal);
      await tell(whole, onPage);
      return whole;
    },
  };
}

/**
 * An early listing that records what it is told, and claims `written` were routed; `paged`: it
 * takes the records page by page (begin(undefined)), else only a whole listing with its keys.
 */
function recorder(
  written: Lease[] = [],
  o: { paged?: boolean } = {},
): EarlyListing & {
  keys: string[][];
  /** begin(undefined) calls that were taken */
  pagedBegins: number;
  chunks: LeaseRecord[][];
  lasts: number[];
  ends: number;
  failed: boolean[];
} {
  let ended = false;
  const seen = {
    keys: [] as string[][],
    pagedBegins: 0,
    chunks: [] as LeaseRecord[][],
    lasts: [] as number[],
    ends: 0,
    failed: [] as boolean[],
    written,
    begin(keys: readonly string[] | undefined): boolean {
      if (ended) return false;
      if (keys === undefined) {
        if (o.paged === true) seen.pagedBegins++;
        return o.paged === true;
      }
      seen.keys.push([...keys]);
      return true;
    },
    take(chunk: readonly LeaseRecord[], t: { last?: boolean } = {}): void {
      seen.chunks.push([...chunk]);
      if (t.last === true) seen.lasts.push(seen.chunks.length - 1);
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
    const kv = wideStore(1_234);
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
    expect(early.chunks.map((c) => c.length)).toEqual([50, 500, 500, 185, 0]);
    expect(early.lasts).toEqual([4]);
    expect(early.ends).toBe(1);
    expect(early.failed).toEqual([false]);
    const told = early.chunks.flat();
    expect(new Set(told.map((r) => r.key))).toEqual(new Set(early.keys[0]));
    expect(told.filter((r) => !r.ok).map((r) => r.key)).toEqual(['10.200.0.0-24']);
    expect(early.keys[0]).not.toContain(lease.key);
    // a second acquisition (the daemon's retry while the store is unreachable) streams nothing
    await store.acquireLease({ config, attrs: attrs(1), previous: undefined, early }, signal);
    expect(early.keys).toHaveLength(1);
    expect(early.chunks).toHaveLength(5);
    await store.close();
  });

  it('hands the records over page by page while the listing is read, when the writer takes them so', async () => {
    const kv = wideStore(700);
    // pages of 300, each a turn of the event loop after the last; the listing settles after all
    let settled = false;
    const early = recorder([], { paged: true });
    /** how many chunks the writer had when each page came, and when the listing settled */
    const seenAt: number[] = [];
    const paged = tellingKv(kv, async (whole, onPage) => {
      for (let at = 0; at < whole.entries.length; at += 300) {
        await new Promise((resolve) => setImmediate(resolve));
        seenAt.push(early.chunks.length);
        onPage?.({ entries: whole.entries.slice(at, at + 300), first: at === 0 });
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
      seenAt.push(early.chunks.length);
      settled = true;
    });
    const store = new KvLeaseStore({ kv: paged, prefix: '/n' });
    const signal = new AbortController().signal;
    const config = await store.getNetworkConfig(signal);
    store.prefetchListing(signal);
    const lease = await store.acquireLease(
      { config, attrs: attrs(1), previous: undefined, early },
      signal,
    );
    expect(settled).toBe(true);
    expect(early.keys).toEqual([]);
    expect(early.pagedBegins).toBe(1);
    // 50 first, then up to 500 within each page; the last chunk (the skipped keys) says so
    expect(early.chunks.map((c) => c.length)).toEqual([50, 250, 300, 100, 0]);
    expect(early.lasts).toEqual([4]);
    // every page's chunks went to the writer before the listing settled
    expect(seenAt.at(-1)).toBe(4);
    expect(early.chunks.flat().map((r) => r.key)).not.toContain(lease.key);
    expect(early.chunks.flat()).toHaveLength(700);
    await store.close();
  });

  it('begins again when the list starts over, and takes a store that tells no pages whole', async () => {
    for (const tells of ['restart', 'nothing'] as const) {
      const kv = new MemoryKv();
      kv.putRaw('/n/config', TINY);
      kv.putRaw('/n/subnets/10.50.1.0-24', encodeLeaseValue(attrs(5)));
      kv.putRaw('/n/subnets/10.50.2.0-24', encodeLeaseValue(attrs(6)));
      const early = recorder([], { paged: true });
      const store = new KvLeaseStore({
        kv: tellingKv(kv, async (whole, onPage) => {
          if (tells !== 'restart') return;
          // an attempt compacted away after one page, then the whole listing again
          onPage?.({ entries: whole.entries.slice(0, 1), first: true });
          await new Promise((resolve) => setImmediate(resolve));
          onPage?.({ entries: whole.entries, first: true });
        }),
        prefix: '/n',
      });
      const signal = new AbortController().signal;
      const config = await store.getNetworkConfig(signal);
      const lease = await store.acquireLease(
        { config, attrs: attrs(1), previous: undefined, early },
        signal,
      );
      expect(lease.key, tells).toBe('10.50.3.0-24');
      expect(early.pagedBegins, tells).toBe(2);
      const told = early.chunks.map((c) => c.map((r) => r.key));
      expect(told, tells).toEqual(
        tells === 'restart'
          ? [['10.50.1.0-24'], ['10.50.1.0-24', '10.50.2.0-24'], []]
          : [['10.50.1.0-24', '10.50.2.0-24'], []],
      );
      await store.close();
    }
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

  it('tells the early writer a try failed when the list fails after some of its pages', async () => {
    const kv = wideStore(700);
    const early = recorder([], { paged: true });
    const store = new KvLeaseStore({
      kv: tellingKv(kv, async (whole, onPage) => {
        onPage?.({ entries: whole.entries.slice(0, 300), first: true });
        await new Promise((resolve) => setImmediate(resolve));
        throw new TwillError('STORE_UNAVAILABLE', 'etcd went away mid-listing');
      }),
      prefix: '/n',
    });
    const signal = new AbortController().signal;
    const config = await store.getNetworkConfig(signal);
    await expect(
      store.acquireLease({ config, attrs: attrs(1), previous: undefined, early }, signal),
    ).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
    // the page that came was handed over, its end never told, and the try told failed
    expect(early.chunks.flat()).toHaveLength(300);
    expect(early.lasts).toEqual([]);
    expect(early.failed).toEqual([true]);
    await store.close();
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
