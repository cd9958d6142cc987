// Unit tests of src/net/ipv6.ts: strict parsing of text from other nodes, the one
// canonical form (RFC 5952, as Go's net.IP.String() and so flannel write it),
// CIDR parsing, containment and the unicast-host test.
import { describe, expect, it } from 'vitest';
import { randomBelow } from '../helpers/random.ts';
import {
  blockSize6,
  canonicalIpv6,
  containsAddr6,
  containsCidr6,
  firstHost6,
  formatCidr6,
  formatIpv6,
  isIpv6,
  isUnicastHost6,
  lastAddress6,
  overlaps6,
  parseCidr6,
  parseIpv6,
  sameCidr6,
  sameOptionalCidr6,
  type Cidr6,
} from '../../src/net/ipv6.ts';

function cidr(text: string): Cidr6 {
  const c = parseCidr6(text, { strict: true });
  if (!c) throw new Error(`bad test CIDR ${text}`);
  return c;
}

describe('parseIpv6 / formatIpv6', () => {
  it.each([
    ['::', 0n],
    ['::1', 1n],
    ['1::', 1n << 112n],
    ['ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', (1n << 128n) - 1n],
    ['2001:db8::1', 0x20010db8000000000000000000000001n],
    ['fd00:10:244:3::', 0xfd000010024400030000000000000000n],
  ])('%s is %s and formats back the same', (text, n) => {
    expect(parseIpv6(text)).toBe(n);
    expect(formatIpv6(n)).toBe(text);
  });

  // RFC 5952 section 4 (and Go's net.IP.String(), which flannel writes keys and values with)
  it.each([
    ['2001:0db8:0000:0000:0000:0000:0000:0001', '2001:db8::1', '4.1: no leading zeros'],
    ['2001:DB8::1', '2001:db8::1', '4.3: lower case'],
    ['2001:db8:0:0:0:0:2:1', '2001:db8::2:1', '4.2.1: the longest run as ::'],
    ['2001:db8:0:1:1:1:1:1', '2001:db8:0:1:1:1:1:1', '4.2.2: one zero group is not ::'],
    ['2001:0:0:1:0:0:0:1', '2001:0:0:1::1', '4.2.3: the longest run, not the first'],
    ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1', '4.2.3: of equal runs, the first'],
    ['0:0:0:0:0:0:0:0', '::', 'all zeros'],
    ['fd00:0:0:3:0:0:0:0', 'fd00:0:0:3::', 'a trailing run'],
    ['0:0:0:1:0:0:0:0', '0:0:0:1::', 'the longer trailing run wins over a leading one'],
    ['1:0:0:0:0:0:0:0', '1::', 'a run to the end'],
    ['1:2:3:4:5:6:7::', '1:2:3:4:5:6:7:0', ':: for one group is written as 0'],
    ['::2:3:4:5:6:7:8', '0:2:3:4:5:6:7:8', 'a leading single zero group'],
  ])('%s is written %s (%s)', (input, canonical) => {
    expect(canonicalIpv6(input)).toBe(canonical);
  });

  it.each([
    '',
    ':',
    ':::',
    '1:2:3:4:5:6:7',
    '1:2:3:4:5:6:7:8:9',
    '1:2:3:4:5:6:7::8',
    '1::2::3',
    ':1::',
    '1::2:',
    '12345::',
    '::g',
    '1.2.3.4',
    '::1.2.3.4',
    '::ffff:10.0.0.1',
    'fe80::1%eth0',
    ' ::1',
    '::1 ',
    '0x1::',
    '+1::',
    '00000::',
    '0000:0000:0000:0000:0000:0000:0000:00001',
  ])('refuses %j', (text) => {
    expect(parseIpv6(text)).toBeUndefined();
    expect(isIpv6(text)).toBe(false);
    expect(canonicalIpv6(text)).toBeUndefined();
  });

  it('formatIpv6 round-trips random addresses through parseIpv6', () => {
    let x = 0x9e3779b97f4a7c15n;
    for (let i = 0; i < 2000; i++) {
      x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 128n) - 1n);
      // zero some groups so that runs of zeros occur
      const n = i % 3 === 0 ? x & 0xffff0000ffff00000000ffffffff0000n : x;
      const text = formatIpv6(n);
      expect(parseIpv6(text)).toBe(n);
      expect(text).toBe(text.toLowerCase());
      expect(text.includes(':::')).toBe(false);
      expect(text.split('::').length).toBeLessThanOrEqual(2);
    }
  });
});

describe('the one-pass parser against the definition', () => {
  // the definition, by splitting and a regular expression per group (the parser twill had before
  // its one pass over the characters): both must agree on every string, near-misses included
  const GROUP = /^[0-9a-fA-F]{1,4}$/;
  const groupsByDefinition = (text: string): number[] | undefined => {
    if (text.length > 39 || text.length < 2) return undefined;
    const halves = text.split('::');
    if (halves.length > 2) return undefined;
    const head = halves[0] === '' ? [] : (halves[0] ?? '').split(':');
    const tail = halves.length < 2 || halves[1] === '' ? [] : (halves[1] ?? '').split(':');
    const given = head.length + tail.length;
    if (halves.length === 2 ? given > 7 : given !== 8) return undefined;
    if (![...head, ...tail].every((part) => GROUP.test(part))) return undefined;
    const zeros = Array.from({ length: 8 - given }, () => 0);
    return [...head, ...zeros, ...tail].map((part) =>
      typeof part === 'number' ? part : parseInt(part, 16),
    );
  };
  const byDefinition = (text: string): bigint | undefined => {
    const g = groupsByDefinition(text);
    return g && BigInt(`0x${g.map((x) => x.toString(16).padStart(4, '0')).join('')}`);
  };

  it('agrees with it on 20,000 generated strings, and formats what it takes canonically', () => {
    // a fixed seed: the same strings every run
    const next = randomBelow(0x6d2b79f5);
    const alphabet = '0123456789abcdefABCDEF::::::g. ';
    const group = (): string =>
      next(4) === 0
        ? ''
        : next(0x10000)
            .toString(16)
            .padStart(next(6), '0')
            .slice(0, 1 + next(5));
    let accepted = 0;
    for (let i = 0; i < 20_000; i++) {
      const text =
        next(3) === 0
          ? Array.from({ length: next(42) }, () => alphabet[next(alphabet.length)]).join('')
          : Array.from({ length: 1 + next(9) }, group).join(':');
      const got = parseIpv6(text);
      expect(got, JSON.stringify(text)).toBe(byDefinition(text));
      expect(isIpv6(text)).toBe(got !== undefined);
      if (got !== undefined) {
        accepted++;
        const canonical = formatIpv6(got);
        expect(canonicalIpv6(text)).toBe(canonical);
        expect(parseIpv6(canonical)).toBe(got);
        // canonical: lower case, no leading zeros, at most one "::"
        expect(canonical).toMatch(
          /^(::)?([0-9a-f]|[1-9a-f][0-9a-f]{1,3})?(:{1,2}([0-9a-f]|[1-9a-f][0-9a-f]{1,3}))*(::)?$/,
        );
      }
    }
    // both halves were exercised: many strings taken, many refused
    expect(accepted).toBeGreaterThan(1000);
    expect(accepted).toBeLessThan(19_000);
  });
});

describe('parseCidr6 / formatCidr6', () => {
  it('parses a network in any valid form', () => {
    expect(parseCidr6('fd00:10:244::/56', { strict: true })).toStrictEqual({
      base: 0xfd000010024400000000000000000000n,
      prefix: 56,
    });
    expect(formatCidr6(cidr('FD00:0010:0244:0000::/56'))).toBe('fd00:10:244::/56');
    expect(formatCidr6(cidr('::/0'))).toBe('::/0');
    expect(formatCidr6(cidr('::1/128'))).toBe('::1/128');
  });

  it('strict refuses host bits; otherwise they are masked off', () => {
    expect(parseCidr6('fd00::1/64', { strict: true })).toBeUndefined();
    expect(parseCidr6('fd00:0:0:3::1/64', { strict: false })).toStrictEqual(
      cidr('fd00:0:0:3::/64'),
    );
    expect(parseCidr6('fd00:0:0:3:8000::/65', { strict: true })).toStrictEqual({
      base: 0xfd000000000000038000000000000000n,
      prefix: 65,
    });
  });

  it('canonical: the address written in its one canonical form only (a lease key)', () => {
    expect(parseCidr6('fd00:10:0:3::/64', { strict: true, canonical: true })).toStrictEqual(
      cidr('fd00:10:0:3::/64'),
    );
    for (const text of [
      'fd00:10:0:3:0::/64',
      'FD00:10:0:3::/64',
      'fd00:0010:0:3::/64',
      'fd00:10:0:3:0:0:0:0/64',
    ])
      expect(parseCidr6(text, { strict: true, canonical: true }), text).toBeUndefined();
  });

  it.each([
    'fd00::',
    'fd00::/',
    'fd00::/129',
    'fd00::/064',
    'fd00::/-1',
    'fd00::/6 4',
    '/64',
    '10.0.0.0/8',
    'fd00::/64/64',
    'fe80::%eth0/64',
    'fd00::/64 ',
  ])('refuses %j', (text) => {
    expect(parseCidr6(text, { strict: false })).toBeUndefined();
  });
});

describe('sizes and containment', () => {
  it('blockSize6, lastAddress6, firstHost6', () => {
    expect(blockSize6(64)).toBe(1n << 64n);
    expect(blockSize6(128)).toBe(1n);
    expect(blockSize6(0)).toBe(1n << 128n);
    expect(formatIpv6(lastAddress6(cidr('fd00:0:0:3::/64')))).toBe('fd00::3:ffff:ffff:ffff:ffff');
    expect(formatIpv6(lastAddress6(cidr('::/0')))).toBe('ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff');
    expect(formatIpv6(firstHost6(cidr('fd00:0:0:3::/64')))).toBe('fd00:0:0:3::1');
  });

  it('containsAddr6 at both edges', () => {
    const c = cidr('fd00:0:0:3::/64');
    expect(containsAddr6(c, c.base)).toBe(true);
    expect(containsAddr6(c, lastAddress6(c))).toBe(true);
    expect(containsAddr6(c, c.base - 1n)).toBe(false);
    expect(containsAddr6(c, lastAddress6(c) + 1n)).toBe(false);
  });

  it('containsCidr6: nested, equal, wider and disjoint', () => {
    const net = cidr('fd00::/56');
    expect(containsCidr6(net, cidr('fd00:0:0:ff::/64'))).toBe(true);
    expect(containsCidr6(net, net)).toBe(true);
    expect(containsCidr6(net, cidr('fd00::/48'))).toBe(false);
    expect(containsCidr6(net, cidr('fd00:0:0:100::/64'))).toBe(false);
  });

  it('overlaps6 and sameCidr6', () => {
    expect(overlaps6(cidr('fd00::/56'), cidr('fd00:0:0:1::/64'))).toBe(true);
    expect(overlaps6(cidr('fd00:0:0:1::/64'), cidr('fd00::/56'))).toBe(true);
    expect(overlaps6(cidr('fd00:0:0:1::/64'), cidr('fd00:0:0:2::/64'))).toBe(false);
    expect(sameCidr6(cidr('fd00::/64'), cidr('fd00::/64'))).toBe(true);
    expect(sameCidr6(cidr('fd00::/64'), cidr('fd00::/63'))).toBe(false);
  });

  it('sameOptionalCidr6: both absent (null or undefined), or the same block', () => {
    expect(sameOptionalCidr6(null, undefined)).toBe(true);
    expect(sameOptionalCidr6(undefined, undefined)).toBe(true);
    expect(sameOptionalCidr6(cidr('fd00::/64'), cidr('fd00::/64'))).toBe(true);
    expect(sameOptionalCidr6(cidr('fd00::/64'), null)).toBe(false);
    expect(sameOptionalCidr6(undefined, cidr('fd00::/64'))).toBe(false);
    expect(sameOptionalCidr6(cidr('fd00::/64'), cidr('fd00::/63'))).toBe(false);
    expect(sameOptionalCidr6(cidr('fd00::/64'), cidr('fd00:0:0:1::/64'))).toBe(false);
  });
});

describe('isUnicastHost6', () => {
  it.each([
    ['2001:db8::1', true],
    ['fd00::2', true],
    ['fec0::1', true],
    ['::', false],
    ['::1', false],
    ['ff02::1', false],
    ['ff00::', false],
    ['fe80::1', false],
    ['febf:ffff::1', false],
    ['::ffff:a00:1', false],
  ])('%s: %s', (text, unicast) => {
    const n = parseIpv6(text);
    expect(n).toBeDefined();
    expect(isUnicastHost6(n ?? 0n)).toBe(unicast);
  });

  it('refuses values outside 128 bits', () => {
    expect(isUnicastHost6(1n << 128n)).toBe(false);
  });
});
