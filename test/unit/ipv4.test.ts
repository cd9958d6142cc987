// Unit tests of the IPv4 helpers: strict dotted quads and CIDRs (leases come
// from other nodes), block arithmetic and the unicast-host check.
import { describe, expect, it } from 'vitest';
import { randomBelow } from '../helpers/random.ts';
import {
  blockSize,
  containsCidr,
  firstHost,
  formatCidr,
  formatIpv4,
  isUnicastHost,
  lastAddress,
  overlaps,
  parseCidr,
  parseIpv4,
  type Cidr,
} from '../../src/net/ipv4.ts';

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text} is not a network CIDR`);
  return c;
}

describe('parseIpv4', () => {
  it.each([
    ['0.0.0.0', 0],
    ['1.2.3.4', 0x01020304],
    ['10.244.3.1', 0x0af40301],
    ['192.168.0.255', 0xc0a800ff],
    ['255.255.255.255', 0xffffffff],
  ])('%s is %d', (text, value) => {
    expect(parseIpv4(text)).toBe(value);
    expect(formatIpv4(value)).toBe(text);
  });

  it.each([
    '010.0.0.1',
    '1.02.3.4',
    '00.0.0.0',
    '1.2.3',
    '1.2.3.4.5',
    '256.1.1.1',
    '1.1.1.300',
    ' 1.2.3.4',
    '1.2.3.4 ',
    '1.2.3.4\n',
    '',
    '1..3.4',
    '0x1.2.3.4',
    '+1.2.3.4',
    '1.2.3.4/32',
    '::1',
    '１.2.3.4',
    '٣.2.3.4',
    '1.2.3.',
    '.1.2.3',
    '1.2.3.4.',
    '1000.1.1.1',
    '1.2.3.-4',
    '1.2.3.4a',
    '1.2.3.0004',
    '1.2.3.04',
    '255.255.255.256',
    '1 .2.3.4',
  ])('refuses %j', (text) => {
    expect(parseIpv4(text)).toBeUndefined();
  });

  // the definition, as a regular expression and per-octet arithmetic: the parser must agree with it
  // on every string, near-misses included
  const QUAD = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
  const byDefinition = (text: string): number | undefined =>
    QUAD.test(text) ? text.split('.').reduce((a, o) => a * 256 + Number(o), 0) : undefined;

  it('agrees with the definition on 20,000 random strings of digits and dots', () => {
    // a fixed seed: the same strings every run
    const next = randomBelow(0x2545f491);
    const alphabet = '0123456789...25 x';
    let accepted = 0;
    for (let i = 0; i < 20_000; i++) {
      const text =
        next(2) === 0
          ? Array.from({ length: next(18) }, () => alphabet[next(alphabet.length)]).join('')
          : Array.from({ length: 4 }, () => String(next(300)).padStart(next(3) === 0 ? 2 : 1, '0'))
              .join('.')
              .slice(0, 15 + next(2));
      const got = parseIpv4(text);
      expect(got, JSON.stringify(text)).toBe(byDefinition(text));
      if (got !== undefined) {
        accepted++;
        expect(formatIpv4(got)).toBe(text);
      }
    }
    // both halves were exercised: many strings taken, many refused
    expect(accepted).toBeGreaterThan(1000);
    expect(accepted).toBeLessThan(19_000);
  });
});

describe('parseCidr', () => {
  it.each([
    ['10.244.0.0/16', 0x0af40000, 16],
    ['0.0.0.0/0', 0, 0],
    ['10.244.3.7/32', 0x0af40307, 32],
    ['192.168.1.128/25', 0xc0a80180, 25],
  ])('strict %s', (text, base, prefix) => {
    expect(parseCidr(text, { strict: true })).toStrictEqual({ base, prefix });
    expect(parseCidr(text, { strict: false })).toStrictEqual({ base, prefix });
  });

  it.each([
    ['10.244.3.1/24', '10.244.3.0/24'],
    ['10.244.1.0/16', '10.244.0.0/16'],
    ['192.168.1.200/25', '192.168.1.128/25'],
    ['255.255.255.255/0', '0.0.0.0/0'],
    ['10.0.0.0/0', '0.0.0.0/0'],
  ])('non-strict masks the host bits of %s to %s; strict refuses it', (text, masked) => {
    const c = parseCidr(text, { strict: false });
    expect(c && formatCidr(c)).toBe(masked);
    expect(parseCidr(text, { strict: true })).toBeUndefined();
  });

  it.each([
    '10.244.0.0',
    '10.244.0.0/',
    '10.244.0.0/33',
    '10.244.0.0/99',
    '10.244.0.0/016',
    '10.244.0.0/-1',
    '10.244.0.0/1a',
    '010.244.0.0/16',
    '10.244.0/16',
    ' 10.244.0.0/16',
    '10.244.0.0/16 ',
    '10.244.0.0-16',
    'fd00::/64',
  ])('refuses %j in both modes', (text) => {
    expect(parseCidr(text, { strict: true })).toBeUndefined();
    expect(parseCidr(text, { strict: false })).toBeUndefined();
  });
});

describe('block arithmetic', () => {
  it.each([
    ['10.244.0.0/16', '10.244.255.255', 65536],
    ['10.244.3.0/24', '10.244.3.255', 256],
    ['10.1.0.4/30', '10.1.0.7', 4],
    ['10.1.0.9/32', '10.1.0.9', 1],
    ['0.0.0.0/0', '255.255.255.255', 4294967296],
  ])('lastAddress(%s) is %s', (text, last, size) => {
    const c = cidr(text);
    expect(formatIpv4(lastAddress(c))).toBe(last);
    expect(blockSize(c.prefix)).toBe(size);
  });

  it('firstHost is the network address + 1', () => {
    expect(formatIpv4(firstHost(cidr('10.244.3.0/24')))).toBe('10.244.3.1');
  });

  it.each([
    ['10.244.0.0/16', '10.244.3.0/24', true],
    ['10.244.0.0/16', '10.244.0.0/16', true],
    ['10.244.0.0/16', '10.244.255.252/30', true],
    ['0.0.0.0/0', '203.0.113.0/24', true],
    ['10.244.0.0/16', '10.245.0.0/24', false],
    ['10.244.0.0/16', '10.243.255.0/24', false],
    ['10.244.0.0/16', '10.0.0.0/8', false],
    ['10.244.3.0/24', '10.244.0.0/16', false],
    ['10.244.3.0/24', '0.0.0.0/0', false],
  ])('containsCidr(%s, %s) is %s', (outer, inner, expected) => {
    expect(containsCidr(cidr(outer), cidr(inner))).toBe(expected);
  });

  it.each([
    ['10.244.3.0/24', '10.244.3.0/24', true],
    ['10.244.3.0/24', '10.244.0.0/16', true],
    ['10.244.3.128/25', '10.244.3.0/24', true],
    ['0.0.0.0/0', '10.244.3.0/24', true],
    ['10.244.3.0/24', '10.244.4.0/24', false],
    ['10.244.3.0/24', '10.244.2.0/24', false],
    ['10.244.3.0/25', '10.244.3.128/25', false],
    ['10.244.0.0/16', '10.245.0.0/16', false],
  ])('overlaps(%s, %s) is %s, in either order', (a, b, expected) => {
    expect(overlaps(cidr(a), cidr(b))).toBe(expected);
    expect(overlaps(cidr(b), cidr(a))).toBe(expected);
  });
});

describe('isUnicastHost', () => {
  it.each([
    ['1.0.0.1', true],
    ['10.0.0.5', true],
    ['192.168.56.11', true],
    ['126.255.255.255', true],
    ['128.0.0.1', true],
    ['223.255.255.254', true],
    ['0.0.0.0', false],
    ['0.1.2.3', false],
    ['127.0.0.1', false],
    ['127.255.255.254', false],
    ['224.0.0.1', false],
    ['239.255.255.250', false],
    ['240.0.0.1', false],
    ['255.255.255.255', false],
  ])('%s is %s', (text, expected) => {
    const addr = parseIpv4(text);
    expect(addr).toBeTypeOf('number');
    expect(isUnicastHost(addr ?? -1)).toBe(expected);
  });
});
