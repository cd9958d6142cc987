// IPv4 addresses and CIDR blocks as plain data (numbers), with strict parsing.
// Leases come from other nodes, so parsing refuses anything but canonical
// dotted quads: no octal, no short forms, no host bits in a network address.
// netmask converts between text and numbers once the text has been checked;
// blocks are plain arithmetic on those numbers.
import { ip2long, long2ip } from 'netmask';

export interface Cidr {
  /** network address as an unsigned 32-bit number */
  readonly base: number;
  readonly prefix: number;
}

const QUAD = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

/** Parses a canonical dotted quad; returns undefined for anything else. */
export function parseIpv4(text: string): number | undefined {
  if (!QUAD.test(text)) return undefined;
  return ip2long(text) >>> 0;
}

export function formatIpv4(addr: number): string {
  return long2ip(addr >>> 0);
}

export function isIpv4(text: string): boolean {
  return parseIpv4(text) !== undefined;
}

/** Size of a block of the given prefix length, in addresses. */
export function blockSize(prefix: number): number {
  return 2 ** (32 - prefix);
}

/**
 * Parses "a.b.c.d/len". With `strict`, host bits must be zero (a network
 * address); otherwise they are masked off. Returns undefined when malformed.
 */
export function parseCidr(text: string, opts: { strict: boolean }): Cidr | undefined {
  const m = /^([0-9.]+)\/(\d{1,2})$/.exec(text);
  if (!m) return undefined;
  const addr = parseIpv4(m[1] ?? '');
  const prefix = Number(m[2]);
  if (addr === undefined || prefix > 32 || String(prefix) !== m[2]) return undefined;
  const base = addr - (addr % blockSize(prefix));
  if (opts.strict && base !== addr) return undefined;
  return { base, prefix };
}

export function formatCidr(c: Cidr): string {
  // join, not a template: a flat string (formatCidr6 says why)
  return [formatIpv4(c.base), c.prefix].join('/');
}

/** Last address of a block (its broadcast address for prefix < 31). */
export function lastAddress(c: Cidr): number {
  return c.base + blockSize(c.prefix) - 1;
}

export function containsAddr(c: Cidr, addr: number): boolean {
  return addr >= c.base && addr <= lastAddress(c);
}

/** True when `inner` lies entirely inside `outer`. */
export function containsCidr(outer: Cidr, inner: Cidr): boolean {
  return inner.prefix >= outer.prefix && containsAddr(outer, inner.base);
}

export function overlaps(a: Cidr, b: Cidr): boolean {
  return containsAddr(a, b.base) || containsAddr(b, a.base);
}

export function sameCidr(a: Cidr, b: Cidr): boolean {
  return a.base === b.base && a.prefix === b.prefix;
}

/** First usable host address of a subnet (network address + 1). */
export function firstHost(c: Cidr): number {
  return c.base + 1;
}

/** True for an address that may be a node's public unicast IPv4 address. */
export function isUnicastHost(addr: number): boolean {
  const first = addr >>> 24;
  if (first === 0 || first === 127 || first >= 224) return false;
  return addr !== 0xffffffff;
}
