// Unit tests of subnet allocation: the free list honours SubnetMin/SubnetMax
// and taken subnets, and the pick is a pure function of `random`; the IPv6
// pick does the same over bigints without listing a range (a /32 in /64s is
// four billion subnets).
import { describe, expect, it } from 'vitest';
import {
  parseNetConfig,
  type Ipv4NetConfig,
  type Ipv6NetConfig,
} from '../../src/config/netconf.ts';
import {
  fitsConfig,
  fitsConfig6,
  fitsConfigPair,
  freeSubnets,
  pickFreeSubnet,
  pickFreeSubnet6,
} from '../../src/lease/allocate.ts';
import { formatCidr, parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { formatCidr6, parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text} is not a network CIDR`);
  return c;
}

const texts = (list: readonly Cidr[]): string[] => list.map(formatCidr);
const cidrs = (...list: string[]): Cidr[] => list.map(cidr);

/** The IPv4 half of a net-conf.json: what IPv4 allocation works on. */
function ipv4Of(text: string): Ipv4NetConfig {
  const cfg = parseNetConfig(text);
  if (!cfg.ipv4) throw new Error('test setup: no IPv4 in the config');
  return cfg.ipv4;
}

// 10.1.0.0/28 in /30s: subnets .0 .4 .8 .12; defaults SubnetMin .4, SubnetMax .12
const TINY = ipv4Of('{"Network":"10.1.0.0/28"}');
// 10.244.0.0/16 in /24s restricted to 10.244.10.0 .. 10.244.14.0
const RANGE = ipv4Of(
  '{"Network":"10.244.0.0/16","SubnetMin":"10.244.10.0","SubnetMax":"10.244.14.0"}',
);
const DEFAULT16 = ipv4Of('{"Network":"10.244.0.0/16"}');

describe('freeSubnets', () => {
  it('lists the default range, skipping the first subnet', () => {
    expect(texts(freeSubnets(TINY, []))).toStrictEqual([
      '10.1.0.4/30',
      '10.1.0.8/30',
      '10.1.0.12/30',
    ]);
  });

  it('lists SubnetMin to SubnetMax inclusive', () => {
    expect(texts(freeSubnets(RANGE, []))).toStrictEqual([
      '10.244.10.0/24',
      '10.244.11.0/24',
      '10.244.12.0/24',
      '10.244.13.0/24',
      '10.244.14.0/24',
    ]);
  });

  it('has 255 subnets in a default /16', () => {
    const free = freeSubnets(DEFAULT16, []);
    expect(free).toHaveLength(255);
    expect(formatCidr(free[0] ?? cidr('0.0.0.0/32'))).toBe('10.244.1.0/24');
    expect(formatCidr(free[254] ?? cidr('0.0.0.0/32'))).toBe('10.244.255.0/24');
  });

  it('excludes taken subnets', () => {
    const taken = cidrs('10.244.11.0/24', '10.244.13.0/24');
    expect(texts(freeSubnets(RANGE, taken))).toStrictEqual([
      '10.244.10.0/24',
      '10.244.12.0/24',
      '10.244.14.0/24',
    ]);
  });

  it('ignores taken subnets outside the range', () => {
    const taken = cidrs('10.244.9.0/24', '10.244.15.0/24', '10.245.10.0/24');
    expect(freeSubnets(RANGE, taken)).toHaveLength(5);
  });

  it('excludes every subnet that overlaps a wider or narrower taken block', () => {
    const taken = cidrs('10.244.12.0/23', '10.244.10.128/25');
    expect(texts(freeSubnets(RANGE, taken))).toStrictEqual(['10.244.11.0/24', '10.244.14.0/24']);
  });

  it('is empty when everything is taken', () => {
    expect(freeSubnets(TINY, cidrs('10.1.0.0/28'))).toStrictEqual([]);
  });
});

describe('pickFreeSubnet', () => {
  it.each([
    [0, '10.244.10.0/24'],
    [0.2, '10.244.11.0/24'],
    [0.5, '10.244.12.0/24'],
    [0.79, '10.244.13.0/24'],
    [0.999999, '10.244.14.0/24'],
  ])('random() = %d picks %s', (r, expected) => {
    const pick = pickFreeSubnet(RANGE, [], () => r);
    expect(pick && formatCidr(pick)).toBe(expected);
  });

  it('picks among the free subnets only', () => {
    const taken = cidrs('10.244.10.0/24', '10.244.11.0/24', '10.244.12.0/24');
    const low = pickFreeSubnet(RANGE, taken, () => 0);
    const high = pickFreeSubnet(RANGE, taken, () => 0.99);
    expect(low && formatCidr(low)).toBe('10.244.13.0/24');
    expect(high && formatCidr(high)).toBe('10.244.14.0/24');
  });

  it('calls random once', () => {
    let calls = 0;
    pickFreeSubnet(RANGE, [], () => {
      calls += 1;
      return 0.3;
    });
    expect(calls).toBe(1);
  });

  it('returns undefined when the range is full', () => {
    const taken = cidrs('10.1.0.4/30', '10.1.0.8/30', '10.1.0.12/30');
    expect(pickFreeSubnet(TINY, taken, () => 0)).toBeUndefined();
  });
});

describe('fitsConfig', () => {
  it.each([
    ['10.244.10.0/24', true],
    ['10.244.12.0/24', true],
    ['10.244.14.0/24', true],
    ['10.244.9.0/24', false],
    ['10.244.15.0/24', false],
    ['10.244.12.0/25', false],
    ['10.244.12.128/25', false],
    ['10.244.12.0/23', false],
    ['10.245.12.0/24', false],
    ['0.0.0.0/0', false],
  ])('%s is %s for 10.244.10.0..10.244.14.0', (text, expected) => {
    expect(fitsConfig(RANGE, cidr(text))).toBe(expected);
  });

  it('refuses the first subnet by default and accepts the last', () => {
    expect(fitsConfig(DEFAULT16, cidr('10.244.0.0/24'))).toBe(false);
    expect(fitsConfig(DEFAULT16, cidr('10.244.1.0/24'))).toBe(true);
    expect(fitsConfig(DEFAULT16, cidr('10.244.255.0/24'))).toBe(true);
  });

  it('refuses a subnet not aligned to SubnetLen, even inside the range', () => {
    expect(fitsConfig(RANGE, { base: cidr('10.244.12.0/24').base + 4, prefix: 24 })).toBe(false);
  });
});

describe('pickFreeSubnet on a huge range', () => {
  const HUGE = ipv4Of('{"Network":"10.0.0.0/8","SubnetLen":30}');

  it('finds a free /30 in 10.0.0.0/8 without listing four million subnets', () => {
    const first = pickFreeSubnet(HUGE, [], () => 0);
    expect(first && formatCidr(first)).toBe('10.0.0.4/30');
    const next = pickFreeSubnet(HUGE, first ? [first] : [], () => 0);
    expect(next && formatCidr(next)).toBe('10.0.0.8/30');
  });

  it('skips subnets covered by a larger taken block', () => {
    const taken = [parseCidr('10.0.0.0/24', { strict: true })].filter((c) => c !== undefined);
    const pick = pickFreeSubnet(HUGE, taken, () => 0);
    expect(pick && formatCidr(pick)).toBe('10.0.1.0/30');
  });
});

function cidr6(text: string): Cidr6 {
  const c = parseCidr6(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text} is not an IPv6 network CIDR`);
  return c;
}

function ipv6Of(text: string): Ipv6NetConfig {
  const cfg = parseNetConfig(text);
  if (!cfg.ipv6) throw new Error('test setup: no IPv6 in the config');
  return cfg.ipv6;
}

const DUAL = (v6: string): string =>
  `{"Network":"10.244.0.0/16","EnableIPv6":true,${v6},"Backend":{"Type":"vxlan"}}`;
// fd00::/62 in /64s: subnets fd00::, fd00:0:0:1::, :2::, :3::; defaults Min :1::, Max :3::
const TINY6 = ipv6Of(DUAL('"IPv6Network":"fd00::/62"'));
const RANGE6 = ipv6Of(
  DUAL(
    '"IPv6Network":"fd00:10:244::/56","IPv6SubnetMin":"fd00:10:244:10::","IPv6SubnetMax":"fd00:10:244:14::"',
  ),
);
// 65,536 /64s
const P48 = ipv6Of(DUAL('"IPv6Network":"2001:db8:42::/48"'));
// four billion /64s
const P32 = ipv6Of(DUAL('"IPv6Network":"2001:db8::/32"'));
// 2^56 /64s: more than a double counts exactly
const P8 = ipv6Of(DUAL('"IPv6Network":"fd00::/8"'));

/** A deterministic [0, 1) sequence. */
function seq(...values: number[]): () => number {
  let i = 0;
  return () => values[i++ % values.length] ?? 0;
}

describe('pickFreeSubnet6', () => {
  it('starts at the random position and scans forward, wrapping around', () => {
    // 3 candidates (:1, :2, :3); random 0 is the first, just under 1 the last
    expect(formatCidr6(pickFreeSubnet6(TINY6, [], seq(0)) as Cidr6)).toBe('fd00:0:0:1::/64');
    expect(formatCidr6(pickFreeSubnet6(TINY6, [], seq(0.99)) as Cidr6)).toBe('fd00:0:0:3::/64');
    const taken = [cidr6('fd00:0:0:3::/64')];
    expect(formatCidr6(pickFreeSubnet6(TINY6, taken, seq(0.99)) as Cidr6)).toBe('fd00:0:0:1::/64');
  });

  it('stays inside IPv6SubnetMin..IPv6SubnetMax, never the skipped first subnet', () => {
    const seen = new Set<string>();
    const random = seq(0, 0.1, 0.3, 0.5, 0.7, 0.9, 0.999, 0.25, 0.6);
    for (let i = 0; i < 50; i++) {
      const pick = pickFreeSubnet6(RANGE6, [], random);
      if (!pick) throw new Error('no pick');
      seen.add(formatCidr6(pick));
    }
    for (const s of seen) {
      const c = cidr6(s);
      expect(c.prefix).toBe(64);
      expect(c.base >= RANGE6.subnetMin && c.base <= RANGE6.subnetMax).toBe(true);
    }
    expect(seen.size).toBe(5);
    expect(pickFreeSubnet6(TINY6, [], seq(0))?.base).not.toBe(TINY6.network.base);
  });

  it('skips taken subnets of its size and any that overlap a taken subnet of another size', () => {
    const taken = [cidr6('fd00:10:244:10::/64'), cidr6('fd00:10:244:12::/63')];
    // from :10 forward: :10 taken, :11 free
    expect(formatCidr6(pickFreeSubnet6(RANGE6, taken, seq(0)) as Cidr6)).toBe(
      'fd00:10:244:11::/64',
    );
    // from :12 forward: :12 and :13 inside the /63, :14 free
    expect(formatCidr6(pickFreeSubnet6(RANGE6, taken, seq(0.5)) as Cidr6)).toBe(
      'fd00:10:244:14::/64',
    );
  });

  it('is undefined when the range is full', () => {
    const all = ['fd00:0:0:1::/64', 'fd00:0:0:2::/64', 'fd00:0:0:3::/64'].map(cidr6);
    expect(pickFreeSubnet6(TINY6, all, Math.random)).toBeUndefined();
    expect(pickFreeSubnet6(TINY6, [cidr6('fd00::/62')], Math.random)).toBeUndefined();
  });

  it('finds the one free /64 of a /48 (65,536 candidates) from any start', () => {
    const free = cidr6('2001:db8:42:beef::/64');
    const taken: Cidr6[] = [];
    for (let i = 1n; i <= 0xffffn; i++) {
      const base = P48.network.base + (i << 64n);
      if (base !== free.base) taken.push({ base, prefix: 64 });
    }
    for (const r of [0, 0.3, 0.999999]) {
      expect(formatCidr6(pickFreeSubnet6(P48, taken, seq(r)) as Cidr6)).toBe(formatCidr6(free));
    }
  });

  it('is cheap on a /32 in /64s (four billion candidates): nothing is listed', () => {
    const taken = Array.from({ length: 1000 }, (_, i) => ({
      base: P32.subnetMin + (BigInt(i) << 64n),
      prefix: 64,
    }));
    const started = performance.now();
    for (let i = 0; i < 200; i++) {
      const pick = pickFreeSubnet6(P32, taken, Math.random);
      if (!pick) throw new Error('no pick');
      expect(pick.base >= P32.subnetMin && pick.base <= P32.subnetMax).toBe(true);
      expect(taken.some((t) => t.base === pick.base)).toBe(false);
    }
    expect(performance.now() - started).toBeLessThan(2000);
  });

  it('reaches the whole of a range larger than 2^53 candidates', () => {
    // the start draws enough random bits: the last /64 of fd00::/8 is reachable
    const last = pickFreeSubnet6(P8, [], seq(0.999999999999, 0.999999999999));
    if (!last) throw new Error('no pick');
    expect(last.base > P8.network.base + (1n << 118n)).toBe(true);
    const first = pickFreeSubnet6(P8, [], seq(0, 0));
    expect(first?.base).toBe(P8.subnetMin);
  });

  it('gives up after maxScan candidates', () => {
    const taken = [cidr6('fd00:10:244:10::/64'), cidr6('fd00:10:244:11::/64')];
    expect(pickFreeSubnet6(RANGE6, taken, seq(0), 2)).toBeUndefined();
    expect(formatCidr6(pickFreeSubnet6(RANGE6, taken, seq(0), 3) as Cidr6)).toBe(
      'fd00:10:244:12::/64',
    );
  });
});

describe('fitsConfig6 and fitsConfigPair', () => {
  it('fitsConfig6: the right length, inside the bounds, aligned', () => {
    expect(fitsConfig6(RANGE6, cidr6('fd00:10:244:10::/64'))).toBe(true);
    expect(fitsConfig6(RANGE6, cidr6('fd00:10:244:14::/64'))).toBe(true);
    expect(fitsConfig6(RANGE6, cidr6('fd00:10:244:f::/64'))).toBe(false);
    expect(fitsConfig6(RANGE6, cidr6('fd00:10:244:15::/64'))).toBe(false);
    expect(fitsConfig6(RANGE6, cidr6('fd00:10:244:10::/63'))).toBe(false);
    expect(fitsConfig6(RANGE6, cidr6('fd00:10:244:10::/65'))).toBe(false);
  });

  it("fitsConfigPair: both families suit the config (flannel's isIPv6SubnetConfigCompat)", () => {
    const dual = parseNetConfig(DUAL('"IPv6Network":"fd00::/56"'));
    const v4only = parseNetConfig('{"Network":"10.244.0.0/16"}');
    const s4 = cidr('10.244.3.0/24');
    const s6 = cidr6('fd00:0:0:3::/64');
    expect(fitsConfigPair(dual, s4, s6)).toBe(true);
    expect(fitsConfigPair(dual, s4, null)).toBe(false);
    expect(fitsConfigPair(dual, cidr('10.245.3.0/24'), s6)).toBe(false);
    expect(fitsConfigPair(dual, s4, cidr6('fd01::/64'))).toBe(false);
    expect(fitsConfigPair(v4only, s4, null)).toBe(true);
    expect(fitsConfigPair(v4only, s4, undefined)).toBe(true);
    expect(fitsConfigPair(v4only, s4, s6)).toBe(false);
  });

  it('fitsConfigPair: an IPv6-only config takes no IPv4 subnet, and an IPv4 one needs its subnet', () => {
    const v6only = parseNetConfig(
      '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/56"}',
    );
    const s6 = cidr6('fd00:0:0:3::/64');
    expect(fitsConfigPair(v6only, null, s6)).toBe(true);
    expect(fitsConfigPair(v6only, cidr('10.244.3.0/24'), s6)).toBe(false);
    expect(fitsConfigPair(v6only, null, null)).toBe(false);
    expect(fitsConfigPair(parseNetConfig(DUAL('"IPv6Network":"fd00::/56"')), null, s6)).toBe(false);
    expect(fitsConfigPair(parseNetConfig('{"Network":"10.244.0.0/16"}'), null, null)).toBe(false);
  });
});
