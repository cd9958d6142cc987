// The big-prefix contract every Kv must pass (issue 14): a lease prefix far
// larger than one gRPC reply (gRPC's default receive limit is 4 MiB) is
// listed whole at one revision, in key order; oversized and undecodable
// values become invalid records rather than a failed list; a store over it
// still acquires a subnet and its watch starts after the listing.
import { beforeAll, describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { encodeLeaseValue } from '../../src/lease/codec.ts';
import type { Kv, KvListing } from '../../src/lease/kv.ts';
import type { KvLeaseStore } from '../../src/lease/kv-store.ts';
import type { LeaseAttrs, LeaseEvent } from '../../src/lease/types.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { vxlanAttrs } from './lease-store.ts';

export const BIG_NETCONF =
  '{"Network":"10.0.0.0/8","SubnetLen":24,"Backend":{"Type":"vxlan","VNI":1}}';
/** keys of ~2.5 KB values */
export const SMALL_KEYS = 3000;
/** of which this many are valid vxlan leases (the rest are host-gw ones) */
export const VALID_KEYS = 40;
/** adjacent 1.5 MB values: 10.5 MB in one key range */
export const BIG_KEYS = 7;
export const BIG_VALUE_BYTES = 1_500_000;
export const BAD_KEY = '10.201.0.0-24';
export const bigKey = (i: number): string => `10.200.${i}.0-24`;
const PAD = 'p'.repeat(2_400);

function padded(attrs: LeaseAttrs): string {
  return `${encodeLeaseValue(attrs).slice(0, -1)},"Pad":"${PAD}"}`;
}

/** The whole prefix: [key under subnets/, value], about 18 MB. */
export function bigPrefixEntries(): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i < SMALL_KEYS; i++) {
    const key = `10.${1 + (i >> 8)}.${i & 255}.0-24`;
    const attrs: LeaseAttrs =
      i < VALID_KEYS
        ? vxlanAttrs(i + 1)
        : {
            publicIp: `198.51.100.${(i % 250) + 1}`,
            publicIpv6: null,
            backendType: 'host-gw',
            backendData: null,
          };
    out.push([key, padded(attrs)]);
  }
  for (let i = 0; i < BIG_KEYS; i++)
    out.push([bigKey(i), `{"PublicIP":"192.0.2.200","Pad":"${'B'.repeat(BIG_VALUE_BYTES)}"}`]);
  out.push([BAD_KEY, `not json ${'N'.repeat(5_000)}`]);
  return out;
}

export interface BigPrefixHarness {
  /** the prefix (flannel layout: <prefix>/config, <prefix>/subnets/…) */
  readonly prefix: string;
  /** writes raw keys (full paths), in whatever batches the store likes */
  putAll(entries: readonly [string, string][]): Promise<void>;
  /** a Kv to list with (closed by the harness) */
  kv(): Promise<Kv>;
  /** a lease store over a fresh Kv at `prefix` */
  store(): Promise<KvLeaseStore>;
}

const signal = new AbortController().signal;
const allKeys = (listing: KvListing): string[] => [
  ...listing.entries.map((e) => e.key),
  ...listing.skipped.map((s) => s.key),
];

export function bigPrefixContract(name: string, harness: () => BigPrefixHarness): void {
  describe(`${name}: a lease prefix larger than one gRPC reply`, () => {
    let h: BigPrefixHarness;
    const entries = bigPrefixEntries();
    const subnets = (p: string): string => `${p}/subnets/`;

    beforeAll(async () => {
      h = harness();
      await h.putAll([
        [`${h.prefix}/config`, BIG_NETCONF],
        ...entries.map(([k, v]): [string, string] => [subnets(h.prefix) + k, v]),
      ]);
    }, 120_000);

    it('lists every key once, in key order, at one revision', async () => {
      const kv = await h.kv();
      const started = performance.now();
      const listing = await kv.list(subnets(h.prefix), signal);
      const ms = Math.round(performance.now() - started);
      console.log(
        `${name}: listed ${allKeys(listing).length} keys (${listing.skipped.length} skipped) in ${ms} ms`,
      );
      const keys = allKeys(listing);
      expect(keys).toHaveLength(entries.length);
      expect(new Set(keys)).toEqual(new Set(entries.map(([k]) => subnets(h.prefix) + k)));
      const listed = listing.entries.map((e) => e.key);
      expect(listed).toEqual(
        [...listed].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))),
      );
      // one snapshot: nothing listed is newer than its revision, and the next write is
      for (const e of listing.entries)
        expect(BigInt(e.modRevision)).toBeLessThanOrEqual(listing.revision);
      const byKey = new Map(entries.map(([k, v]) => [subnets(h.prefix) + k, v]));
      for (const e of listing.entries) expect(e.value === byKey.get(e.key)).toBe(true);
    });

    it('turns the oversized and undecodable values into invalid records, never logging them whole', async () => {
      const store = await h.store();
      const events: LeaseEvent[] = [];
      const ctl = new AbortController();
      const watching = store.watchLeases({ signal: ctl.signal, onEvent: (e) => events.push(e) });
      try {
        await waitFor(() => events.some((e) => e.type === 'snapshot'), {
          timeoutMs: 30_000,
          what: 'snapshot',
        });
        const snap = events.find((e) => e.type === 'snapshot');
        const records = snap?.type === 'snapshot' ? snap.records : [];
        expect(records).toHaveLength(entries.length);
        const invalid = records.filter((r) => !r.ok);
        expect(invalid.map((r) => r.key).sort()).toEqual(
          [...Array.from({ length: BIG_KEYS }, (_, i) => bigKey(i)), BAD_KEY].sort(),
        );
        for (const r of invalid) {
          expect(r.ok === false && r.reason.length).toBeLessThanOrEqual(300);
          expect(r.ok === false && r.reason).toMatch(/bytes|not JSON/);
        }
        expect(records.filter((r) => r.ok)).toHaveLength(SMALL_KEYS);
      } finally {
        ctl.abort();
        await watching;
        await store.close();
      }
    });

    it('acquires a free subnet, and the watch starts after the listing', async () => {
      const store = await h.store();
      const events: LeaseEvent[] = [];
      const ctl = new AbortController();
      let watching: Promise<void> | undefined;
      try {
        const config = parseNetConfig(BIG_NETCONF);
        const lease = await store.acquireLease(
          { config, attrs: vxlanAttrs(250), previous: undefined },
          signal,
        );
        expect(entries.map(([k]) => k)).not.toContain(lease.key);
        watching = store.watchLeases({ signal: ctl.signal, onEvent: (e) => events.push(e) });
        await waitFor(() => events.some((e) => e.type === 'snapshot'), {
          timeoutMs: 30_000,
          what: 'snapshot',
        });
        const snap = events.find((e) => e.type === 'snapshot');
        expect(snap?.type === 'snapshot' && snap.records.some((r) => r.key === lease.key)).toBe(
          true,
        );
        await h.putAll([[subnets(h.prefix) + '10.250.0.0-24', encodeLeaseValue(vxlanAttrs(77))]]);
        await waitFor(
          () => events.some((e) => e.type === 'put' && e.record.key === '10.250.0.0-24'),
          { timeoutMs: 10_000, what: 'put after the listing' },
        );
        expect(events.filter((e) => e.type === 'snapshot')).toHaveLength(1);
      } finally {
        ctl.abort();
        await watching;
        await store.close();
      }
    });
  });
}
