// The early admission (src/lease/early-peers.ts): the peers a cold start may route before its lease
// is ours. Its one promise is to admit a subset of what admission (admit.ts) admits once the lease
// is ours: held over random listings full of overlapping keys and hostile values, against
// `admitPeers` with our subnet picked as the allocator picks it (free of every listed key) and
// with our own old lease renewed.
import { describe, expect, it } from 'vitest';
import { parseNetConfig, type NetConfig } from '../../src/config/netconf.ts';
import { admitPeers, type PeerContext } from '../../src/lease/admit.ts';
import { fitsConfigPair } from '../../src/lease/allocate.ts';
import { encodeLeaseValue, parseLeaseKey } from '../../src/lease/codec.ts';
import { EarlyPeers, overlappingKeys } from '../../src/lease/early-peers.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import type { LeaseAttrs, LeaseRecord } from '../../src/lease/types.ts';
import { overlaps, parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { overlaps6, parseCidr6 } from '../../src/net/ipv6.ts';

const V4 = parseNetConfig('{"Network":"10.50.0.0/16","Backend":{"Type":"host-gw"}}');
const DUAL = parseNetConfig(
  '{"Network":"10.50.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:50::/48","Backend":{"Type":"host-gw"}}',
);
const UNDERLAY = {
  name: 'eth0',
  networks: ['192.168.50.1/24'],
  networks6: ['fd00:192::1/64'],
};
const OURS = '192.168.50.1';
const store = new KvLeaseStore({ kv: new MemoryKv(), prefix: '/n' });

function attrs(host: number, o: Partial<LeaseAttrs> = {}): LeaseAttrs {
  return {
    publicIp: `192.168.50.${host}`,
    publicIpv6: `fd00:192::${host.toString(16)}`,
    backendType: 'host-gw',
    backendData: null,
    ...o,
  };
}

/** A listed entry as the store decodes it (createRevision: its place in the listing). */
function record(key: string, value: string, index: number): LeaseRecord {
  return store.decode({
    key: `/n/subnets/${key}`,
    value,
    modRevision: String(index + 1),
    createRevision: String(index + 1),
  });
}

function earlyCtx(config: NetConfig): PeerContext {
  return {
    config,
    self: null,
    selfPublicIp: OURS,
    ...(config.ipv6 ? { self6: null, selfPublicIpv6: 'fd00:192::1' } : {}),
    underlay: UNDERLAY,
  };
}

function admitted(early: EarlyPeers, keys: string[], records: LeaseRecord[]): string[] {
  early.begin(keys);
  return early.admit(records, true).map((l) => l.key);
}

/** Byte order, as etcd lists. */
function byBytes(a: LeaseRecord, b: LeaseRecord): number {
  return Buffer.compare(Buffer.from(a.key), Buffer.from(b.key));
}

/**
 * The same listing admitted in key order, as it is read: `cuts` chunk sizes (the last chunk
 * takes the rest, told last).
 */
function admittedInOrder(early: EarlyPeers, records: LeaseRecord[], cuts: number[]): string[] {
  expect(early.begin(undefined)).toBe(true);
  const sorted = [...records].sort(byBytes);
  const out: string[] = [];
  let at = 0;
  for (const n of cuts) {
    out.push(...early.admit(sorted.slice(at, (at += n))).map((l) => l.key));
  }
  out.push(...early.admit(sorted.slice(at), true).map((l) => l.key));
  return out;
}

describe('overlappingKeys', () => {
  it('finds keys that nest, repeat a subnet in another key, or share an IPv6 subnet', () => {
    const keys = [
      '10.50.1.0-24',
      '10.50.2.0-24',
      '10.50.0.0-16', // covers every other IPv4 subnet
      '10.60.3.0-24&fd00:50:0:3::-64',
      '10.60.3.0-24', // the same IPv4 subnet in another key
      '10.60.4.0-24&fd00:50:0:9::-64',
      '10.60.5.0-24&fd00:50:0:9::-64', // the same IPv6 subnet
      '10.60.6.0-24',
      'not-a-key',
    ];
    expect([...overlappingKeys(keys, V4)].sort()).toEqual(
      [
        '10.50.0.0-16',
        '10.50.1.0-24',
        '10.50.2.0-24',
        '10.60.3.0-24',
        '10.60.3.0-24&fd00:50:0:3::-64',
      ].sort(),
    );
    // the IPv6 halves count only on a node that runs IPv6
    expect(overlappingKeys(keys, DUAL)).toEqual(
      new Set([
        ...overlappingKeys(keys, V4),
        '10.60.4.0-24&fd00:50:0:9::-64',
        '10.60.5.0-24&fd00:50:0:9::-64',
      ]),
    );
    expect(overlappingKeys(['10.50.1.0-24', '10.50.2.0-24', 'x'], V4).size).toBe(0);
  });
});

describe('EarlyPeers', () => {
  it('admits a clear, valid peer and nothing admission could refuse', () => {
    const entries: [string, string][] = [
      ['10.50.4.0-24', encodeLeaseValue(attrs(4))],
      ['10.50.5.0-24', encodeLeaseValue(attrs(1))], // our PublicIP: our own old lease
      ['10.50.6.0-24', encodeLeaseValue(attrs(6, { backendType: 'vxlan' }))],
      ['10.50.7.0-25', encodeLeaseValue(attrs(7))], // not SubnetLen
      ['10.51.8.0-24', encodeLeaseValue(attrs(8))], // outside the Network
      ['10.50.9.0-24', '{"PublicIP":"192.168.50.9"'], // unreadable
      ['10.50.10.0-24', encodeLeaseValue(attrs(10, { publicIp: '10.99.0.1' }))], // off-link
      ['10.50.11.0-24', encodeLeaseValue(attrs(11))],
      ['10.50.11.0-24&fd00:50:0:b::-64', encodeLeaseValue(attrs(12))], // its IPv4 subnet again
    ];
    const keys = entries.map(([k]) => k);
    const records = entries.map(([k, v], i) => record(k, v, i));
    expect(admitted(new EarlyPeers(earlyCtx(V4)), keys, records)).toEqual(['10.50.4.0-24']);
    for (const cuts of [[], [1], [3, 1, 1], [8]])
      expect(admittedInOrder(new EarlyPeers(earlyCtx(V4)), records, cuts)).toEqual([
        '10.50.4.0-24',
      ]);
  });

  it('in key order, holds a record until the next readable one shows it alone on its subnet', () => {
    const v = (host: number): string => encodeLeaseValue(attrs(host));
    const records = [
      record('10.50.1.0-24', v(11), 0),
      // the same IPv4 subnet twice, with keys that do not parse (or do not read) between them
      record('10.50.2.0-24', v(12), 1),
      record('10.50.2.0-24!x', v(13), 2),
      record('10.50.2.0-24\u0001', v(14), 3),
      record('10.50.2.0-24&fd00:50:0:2::-64', v(15), 4),
      record('10.50.2.0-24&fd00:50:0:3::-64', '{"PublicIP":', 5),
      record('10.50.3.0-24', v(16), 6),
      record('10.50.3.0-240', v(17), 7),
      // a wider key that fails checkPeer does not crowd the one it covers
      record('10.50.4.0-23', v(18), 8),
      record('10.50.4.0-24', v(19), 9),
      record('10.50.6.0-24', v(20), 10),
    ];
    const expected = ['10.50.1.0-24', '10.50.3.0-24', '10.50.4.0-24', '10.50.6.0-24'];
    for (let first = 0; first <= records.length; first++)
      for (const rest of [1, 2, 5])
        expect(
          admittedInOrder(new EarlyPeers(earlyCtx(V4)), records, [
            first,
            ...Array<number>(records.length).fill(rest),
          ]),
          `chunks from ${first} by ${rest}`,
        ).toEqual(expected);
    // our own old lease (its PublicIP ours: refused here, our subnet later) crowds a peer on its
    // subnet, which admission refuses as overlapping ours
    const own = [
      record('10.50.5.0-24', encodeLeaseValue(attrs(1)), 0),
      record('10.50.5.0-24&fd00:50:0:5::-64', v(55), 1),
    ];
    expect(admittedInOrder(new EarlyPeers(earlyCtx(V4)), own, [])).toEqual([]);
    expect(admittedInOrder(new EarlyPeers(earlyCtx(V4)), own, [1])).toEqual([]);
    // held until the listing's end says no more come, and none without it
    const early = new EarlyPeers(earlyCtx(V4));
    early.begin(undefined);
    expect(early.admit([record('10.50.9.0-24', v(9), 0)]).map((l) => l.key)).toEqual([]);
    expect(early.admit([], true).map((l) => l.key)).toEqual(['10.50.9.0-24']);
    // begun again (the list started over): the held record is void
    expect(early.admit([record('10.50.8.0-24', v(8), 0)])).toEqual([]);
    early.begin(undefined);
    expect(early.admit([record('10.50.8.0-24&fd00:50:0:8::-64', v(7), 0)], true)).toHaveLength(1);
  });

  it('takes a dual-stack listing only whole: IPv6 subnets need not be neighbours', () => {
    const early = new EarlyPeers(earlyCtx(DUAL));
    expect(early.begin(undefined)).toBe(false);
    expect(early.begin(['10.50.1.0-24'])).toBe(true);
  });

  it('refuses a context that already has our subnet, or any subnet size', () => {
    expect(() => new EarlyPeers({ ...earlyCtx(V4), self: cidr('10.50.3.0/24') })).toThrow();
    expect(() => new EarlyPeers({ ...earlyCtx(V4), anySubnetSize: true })).toThrow();
  });

  for (const [name, config] of [
    ['IPv4', V4],
    ['dual-stack', DUAL],
  ] as const) {
    it(`admits only what admission admits once the lease is ours, over random listings (${name})`, () => {
      let seed = 17;
      const rand = (n: number): number => {
        seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0;
        return (seed >>> 8) % n;
      };
      let early = 0;
      /** what the key-order admission admits beyond the sweep */
      let ordered = 0;
      for (let round = 0; round < 300; round++) {
        const entries: [string, string][] = [];
        for (let i = 0; i < 12; i++) {
          const third = rand(48);
          const prefix = rand(30) === 0 ? 16 : ([24, 24, 24, 24, 23, 25][rand(6)] ?? 24);
          const base =
            prefix === 16 ? '10.50.0.0' : `10.50.${third - (prefix === 23 ? third % 2 : 0)}.0`;
          const six = rand(3) === 0 ? '' : `&fd00:50:0:${rand(48).toString(16)}::-64`;
          // junk, some of it sorting between two keys of one subnet
          const junk = [`junk-${i}`, `${base}-${prefix}!${i}`, `${base}-${prefix}%`][rand(3)];
          const key = rand(10) === 0 ? (junk as string) : `${base}-${prefix}${six}`;
          const host = [1, 2 + rand(200), 2 + rand(200), 2 + rand(200)][rand(4)] ?? 2;
          const value = [
            encodeLeaseValue(attrs(host)),
            encodeLeaseValue(attrs(host)),
            encodeLeaseValue(attrs(host, { publicIpv6: null })),
            encodeLeaseValue(attrs(host, { backendType: 'vxlan' })),
            '{"PublicIP":',
          ][rand(5)] as string;
          entries.push([key, value]);
        }
        // the allocator's keys are unique: the last write of a key stands
        const unique = [...new Map(entries).entries()];
        const keys = unique.map(([k]) => k);
        const records = unique.map(([k, v], i) => record(k, v, i));
        const got = admitted(new EarlyPeers(earlyCtx(config)), keys, records);
        early += got.length;
        if (!config.ipv6) {
          // in key order, in chunks of any size: never less than the sweep admits
          const cuts = [rand(4), rand(4), rand(4)];
          const inOrder = admittedInOrder(new EarlyPeers(earlyCtx(config)), records, cuts);
          expect(new Set(inOrder), `round ${round}`).toEqual(new Set([...inOrder, ...got]));
          ordered += inOrder.length - got.length;
          got.push(...inOrder.filter((k) => !got.includes(k)));
        }
        for (const self of ourSubnets(config, keys, records)) {
          const peers = records.flatMap((r) => (r.ok && r.key !== self.key ? [r.lease] : []));
          const ctx: PeerContext = {
            ...earlyCtx(config),
            self: self.subnet,
            ...(config.ipv6 ? { self6: self.subnet6 } : {}),
          };
          const later = new Set(admitPeers(peers, ctx).admitted.map((l) => l.key));
          for (const key of got)
            expect(later, `round ${round}: ${key}, ours ${self.key}`).toContain(key);
        }
      }
      // the property is not vacuous: the early admission admits something in most listings, and
      // in key order peers the sweep holds back for a wider or a junk key
      expect(early).toBeGreaterThan(300);
      if (!config.ipv6) expect(ordered).toBeGreaterThan(30);
    });
  }
});

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text}`);
  return c;
}

/**
 * Our subnets as acquisition can end with them: our own old lease's (its PublicIP ours, fitting
 * the config), or each
 * free /24 (and /64) no listed key overlaps, as the allocator picks.
 */
function ourSubnets(
  config: NetConfig,
  keys: string[],
  records: LeaseRecord[],
): { key: string; subnet: Cidr; subnet6: ReturnType<typeof parseCidr6> | null }[] {
  const named = keys.flatMap((k) => {
    try {
      return [parseLeaseKey(k)];
    } catch {
      return [];
    }
  });
  const out: { key: string; subnet: Cidr; subnet6: ReturnType<typeof parseCidr6> | null }[] = [];
  // (the store keeps our old lease only when it fits the config: kv-store.ts)
  for (const r of records)
    if (
      r.ok &&
      r.lease.attrs.publicIp === OURS &&
      r.lease.subnet &&
      fitsConfigPair(config, r.lease.subnet, r.lease.subnet6 ?? null)
    )
      out.push({ key: r.key, subnet: r.lease.subnet, subnet6: r.lease.subnet6 ?? null });
  for (let third = 0; third < 56; third++) {
    const subnet = cidr(`10.50.${third}.0/24`);
    const subnet6 = parseCidr6(`fd00:50:0:${third.toString(16)}::/64`, { strict: true }) ?? null;
    const free =
      named.every((n) => !overlaps(n.subnet, subnet)) &&
      named.every((n) => !n.subnet6 || !subnet6 || !overlaps6(n.subnet6, subnet6));
    if (free) out.push({ key: `ours-${third}`, subnet, subnet6 });
  }
  return out;
}
