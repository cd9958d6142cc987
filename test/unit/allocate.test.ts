// Unit tests of subnet allocation: the free list honours SubnetMin/SubnetMax
// and taken subnets, and the pick is a pure function of `random`.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { fitsConfig, freeSubnets, pickFreeSubnet } from '../../src/lease/allocate.ts';
import { formatCidr, parseCidr, type Cidr } from '../../src/net/ipv4.ts';

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text} is not a network CIDR`);
  return c;
}

const texts = (list: readonly Cidr[]): string[] => list.map(formatCidr);
const cidrs = (...list: string[]): Cidr[] => list.map(cidr);

// 10.1.0.0/28 in /30s: subnets .0 .4 .8 .12; defaults SubnetMin .4, SubnetMax .12
const TINY = parseNetConfig('{"Network":"10.1.0.0/28"}');
// 10.244.0.0/16 in /24s restricted to 10.244.10.0 .. 10.244.14.0
const RANGE = parseNetConfig(
  '{"Network":"10.244.0.0/16","SubnetMin":"10.244.10.0","SubnetMax":"10.244.14.0"}',
);
const DEFAULT16 = parseNetConfig('{"Network":"10.244.0.0/16"}');

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
  const HUGE = parseNetConfig('{"Network":"10.0.0.0/8","SubnetLen":30}');

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
