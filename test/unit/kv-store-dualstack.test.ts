// The etcd-layout lease store's dual-stack acquisition on MemoryKv: a lease
// is one key naming both subnets, so create-if-absent alone cannot stop two
// keys claiming one subnet; the store settles it by first claim (createDual,
// reclaimLease). Hostile and non-canonical keys must neither block every
// acquisition nor free the subnets they name.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { encodeLeaseValue, parseLeaseKey, subnetKey } from '../../src/lease/codec.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import type { KvListing, KvWritten } from '../../src/lease/kv.ts';
import type { LeaseAttrs } from '../../src/lease/types.ts';
import { overlaps } from '../../src/net/ipv4.ts';
import { overlaps6 } from '../../src/net/ipv6.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';

const PREFIX = '/ds';
const SUBNETS = `${PREFIX}/subnets/`;
/** three IPv4 subnets (10.244.1-3.0/24) and three IPv6 ones (fd00:0:0:1-3::/64) */
const CONFIG = parseNetConfig(
  '{"Network":"10.244.0.0/22","EnableIPv6":true,"IPv6Network":"fd00::/62","Backend":{"Type":"vxlan"}}',
);
const signal = AbortSignal.timeout(10_000);

function attrs(n: number): LeaseAttrs {
  return {
    publicIp: `192.0.2.${n}`,
    publicIpv6: `fd00:56::${n}`,
    backendType: 'vxlan',
    backendData: { vni: 1, vtepMac: `02:00:00:00:04:0${n}` },
    backendData6: { vni: 1, vtepMac: `02:00:00:00:06:0${n}` },
  };
}

/** random 0: picks start at the first subnet of the range, and retries do not wait */
function store(kv: MemoryKv): KvLeaseStore {
  return new KvLeaseStore({ kv, prefix: PREFIX, random: () => 0 });
}

async function keys(kv: MemoryKv): Promise<string[]> {
  return (await kv.list(SUBNETS)).entries.map((e) => e.key.slice(SUBNETS.length)).sort();
}

/** A MemoryKv that runs `beforeCreate` once, just before the next create, and records creates. */
class InterposedKv extends MemoryKv {
  beforeCreate: (() => void) | undefined;
  readonly created: string[] = [];

  override async create(
    key: string,
    value: string,
    ttlSeconds: number,
    signal?: AbortSignal,
  ): Promise<KvWritten | undefined> {
    const hook = this.beforeCreate;
    this.beforeCreate = undefined;
    hook?.();
    this.created.push(key.slice(SUBNETS.length));
    return super.create(key, value, ttlSeconds, signal);
  }
}

/**
 * A MemoryKv whose next `gate` lists wait for each other (each returns what it saw on arrival): so
 * many acquisitions see the same empty store and then race to create.
 */
class RaceKv extends MemoryKv {
  gate = 0;
  private readonly waiting: (() => void)[] = [];

  override async list(prefix: string, signal?: AbortSignal): Promise<KvListing> {
    const listing = await super.list(prefix, signal);
    if (this.gate > 0) {
      this.gate--;
      await new Promise<void>((resolve) => {
        this.waiting.push(resolve);
        if (this.gate === 0) for (const w of this.waiting.splice(0)) w();
      });
    }
    return listing;
  }
}

describe('dual-stack acquisition against hostile and odd keys', () => {
  it('a hostile key overlapping every subnet does not make every dual acquisition lose', async () => {
    const kv = new MemoryKv();
    // created first, each overlaps any lease in one family; neither fits the config
    kv.putRaw(`${SUBNETS}0.0.0.0-0`, encodeLeaseValue(attrs(8)));
    kv.putRaw(`${SUBNETS}10.244.200.0-24&::-0`, encodeLeaseValue(attrs(9)));
    const lease = await store(kv).acquireLease(
      { config: CONFIG, attrs: attrs(1), previous: undefined },
      signal,
    );
    expect(lease.key).toBe('10.244.1.0-24&fd00:0:0:1::-64');
    expect(await keys(kv)).toEqual([
      '0.0.0.0-0',
      '10.244.1.0-24&fd00:0:0:1::-64',
      '10.244.200.0-24&::-0',
    ]);
  });

  it('a key whose IPv6 half is not canonical still holds its IPv4 subnet (and its IPv6 one)', async () => {
    const kv = new MemoryKv();
    // flannel reads these keys; twill's peers refuse them, but their subnets stay taken
    kv.putRaw(`${SUBNETS}10.244.1.0-24&FD00:0:0:1::-64`, encodeLeaseValue(attrs(8)));
    kv.putRaw(`${SUBNETS}10.244.2.0-24&fd00:0000:0:2::-64`, encodeLeaseValue(attrs(9)));
    const lease = await store(kv).acquireLease(
      { config: CONFIG, attrs: attrs(1), previous: undefined },
      signal,
    );
    expect(lease.key).toBe('10.244.3.0-24&fd00:0:0:3::-64');
    // an IPv4-only node too
    const kv4 = new MemoryKv();
    kv4.putRaw(`${SUBNETS}10.244.1.0-24&FD00:0:0:1::-64`, encodeLeaseValue(attrs(8)));
    const v4 = await store(kv4).acquireLease(
      {
        config: parseNetConfig('{"Network":"10.244.0.0/22"}'),
        attrs: { ...attrs(1), publicIpv6: null, backendData6: null },
        previous: undefined,
      },
      signal,
    );
    expect(v4.key).toBe('10.244.2.0-24');
  });
});

describe('dual-stack races settled by first claim', () => {
  it('two nodes with one previous IPv4 subnet and different previous IPv6 ones: one wins, the loser takes another pair', async () => {
    const kv = new RaceKv();
    kv.gate = 2;
    const previous = parseLeaseKey('10.244.2.0-24').subnet;
    const six = (k: string) => parseLeaseKey(`10.244.2.0-24&${k}`).subnet6 ?? undefined;
    const [a, b] = await Promise.all([
      store(kv).acquireLease(
        { config: CONFIG, attrs: attrs(1), previous, previous6: six('fd00:0:0:1::-64') },
        signal,
      ),
      store(kv).acquireLease(
        { config: CONFIG, attrs: attrs(2), previous, previous6: six('fd00:0:0:2::-64') },
        signal,
      ),
    ]);
    if (!a?.subnet || !b?.subnet || !a.subnet6 || !b.subnet6)
      throw new Error('expected two dual leases');
    const winners = [a, b].filter((l) => l.key.startsWith('10.244.2.0-24&'));
    expect(winners).toHaveLength(1);
    const loser = winners[0] === a ? b : a;
    expect(overlaps(a.subnet, b.subnet)).toBe(false);
    expect(overlaps6(a.subnet6, b.subnet6)).toBe(false);
    expect(loser.key).not.toBe(subnetKey(previous, loser.subnet6));
    // only the two leases remain: the loser's first key was deleted
    expect(await keys(kv)).toEqual([a.key, b.key].sort());
  });

  it('after losing the race for its previous pair, the next try takes other subnets, not the same pair', async () => {
    const kv = new InterposedKv();
    const previous = parseLeaseKey('10.244.2.0-24&fd00:0:0:2::-64');
    // between our listing and our create, another node claims our previous IPv4 subnet
    kv.beforeCreate = () =>
      kv.putRaw(`${SUBNETS}10.244.2.0-24&fd00:0:0:3::-64`, encodeLeaseValue(attrs(9)));
    const lease = await store(kv).acquireLease(
      {
        config: CONFIG,
        attrs: attrs(1),
        previous: previous.subnet,
        previous6: previous.subnet6 ?? undefined,
      },
      signal,
    );
    expect(kv.created[0]).toBe('10.244.2.0-24&fd00:0:0:2::-64');
    // the second create is a fresh pick (random 0: the first free subnets), never the lost pair
    expect(kv.created[1]).toBe('10.244.1.0-24&fd00:0:0:1::-64');
    expect(lease.key).toBe('10.244.1.0-24&fd00:0:0:1::-64');
    expect(await keys(kv)).toEqual([lease.key, '10.244.2.0-24&fd00:0:0:3::-64']);
  });
});

describe('dual-stack reclaim', () => {
  it.each([
    ['IPv4', '10.244.1.0-24&fd00:0:0:3::-64'],
    ['IPv6', '10.244.3.0-24&fd00:0:0:1::-64'],
  ])(
    'refuses (LEASE_TAKEN) to reclaim a pair whose %s subnet another key now holds, and deletes its own key',
    async (_family, thief) => {
      const kv = new MemoryKv();
      const s = store(kv);
      const lease = await s.acquireLease(
        { config: CONFIG, attrs: attrs(1), previous: undefined },
        signal,
      );
      expect(lease.key).toBe('10.244.1.0-24&fd00:0:0:1::-64');
      kv.deleteRaw(`${SUBNETS}${lease.key}`);
      kv.putRaw(`${SUBNETS}${thief}`, encodeLeaseValue(attrs(2)));
      await expect(s.reclaimLease(lease, signal)).rejects.toMatchObject({
        code: 'LEASE_TAKEN',
        message: expect.stringContaining(thief),
      });
      expect(await keys(kv)).toEqual([thief]);
    },
  );

  it('reclaims its pair despite hostile keys that overlap everything', async () => {
    const kv = new MemoryKv();
    const s = store(kv);
    const lease = await s.acquireLease(
      { config: CONFIG, attrs: attrs(1), previous: undefined },
      signal,
    );
    kv.deleteRaw(`${SUBNETS}${lease.key}`);
    kv.putRaw(`${SUBNETS}0.0.0.0-0`, encodeLeaseValue(attrs(8)));
    kv.putRaw(`${SUBNETS}10.244.200.0-24&::-0`, encodeLeaseValue(attrs(9)));
    const back = await s.reclaimLease(lease, signal);
    expect(back.key).toBe(lease.key);
    expect(await keys(kv)).toContain(lease.key);
  });
});
