// IPv6 addresses and CIDR blocks as plain data (bigints), with strict
// parsing, the counterpart of ipv4.ts. Text comes from other nodes, so
// parsing takes only hexadecimal groups (no zone, no embedded dotted quad),
// and `formatIpv6` writes the one canonical form (RFC 5952, as Go's
// net.IP.String() and so flannel write it): lower case, no leading zeros,
// the longest run of two or more zero groups (the first of equals) as "::".

import { blockText } from './ipv4.ts';

export interface Cidr6 {
  /** network address as an unsigned 128-bit number */
  readonly base: bigint;
  readonly prefix: number;
}

const MAX = (1n << 128n) - 1n;

// Text and numbers convert in one pass over the characters, with one bigint made (or read) at the
// edge: splitting, a regular expression per group and bigint arithmetic per group cost 3.5 us an
// address in the interpreter twill runs in (--max-opt=1); a profiled cold start of 5,000
// dual-stack leases spent about 150 ms of its JavaScript thread, and most of its garbage, in them.

/** The value of a hexadecimal digit's character code; -1 for any other character. */
function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  const lower = c | 32;
  return lower >= 97 && lower <= 102 ? lower - 87 : -1;
}

/**
 * The eight groups of an address in any valid hexadecimal form (one to four digits a group, at
 * most one "::" for a run of zero groups); undefined for anything else.
 */
function parseGroups(text: string): number[] | undefined {
  const n = text.length;
  if (n < 2 || n > 39) return undefined;
  const got: number[] = [];
  /** how many groups came before the "::"; -1 without one */
  let gap = -1;
  let group = 0;
  let digits = 0;
  let i = 0;
  if (text.charCodeAt(0) === 58 /* : */) {
    // only a "::" may start an address
    if (text.charCodeAt(1) !== 58) return undefined;
    gap = 0;
    i = 2;
  }
  for (; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 58) {
      if (digits === 0) {
        // a colon right after a colon: the one "::"
        if (gap >= 0) return undefined;
        gap = got.length;
      } else {
        if (got.length === 8) return undefined;
        got.push(group);
        group = 0;
        digits = 0;
      }
    } else {
      const v = hexValue(c);
      if (v < 0 || digits === 4) return undefined;
      group = group * 16 + v;
      digits++;
    }
  }
  if (digits > 0) {
    if (got.length === 8) return undefined;
    got.push(group);
  } else if (gap !== got.length) {
    // the text ends in a colon that is not a "::"
    return undefined;
  }
  if (gap < 0) return got.length === 8 ? got : undefined;
  if (got.length > 7) return undefined;
  const g = [0, 0, 0, 0, 0, 0, 0, 0];
  const tail = got.length - gap;
  for (let k = 0; k < gap; k++) g[k] = got[k] ?? 0;
  for (let k = 0; k < tail; k++) g[8 - tail + k] = got[gap + k] ?? 0;
  return g;
}

/** The canonical text of eight groups (RFC 5952). */
function formatGroups(g: readonly number[]): string {
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  // the run as empty parts joined by colons: "a::b" is [a, '', b], "::b" ['', '', b], "::" three
  // empty parts. join, not a template or +: one flat string (formatCidr6 says why)
  const parts: string[] = [];
  for (let i = 0; i < 8; i++) {
    if (i === best) {
      parts.push('');
      if (i === 0) parts.push('');
      if (i + bestLen === 8) parts.push('');
      i += bestLen - 1;
    } else parts.push((g[i] ?? 0).toString(16));
  }
  return parts.join(':');
}

/**
 * The address of eight groups, made from three numbers of at most 48 bits (indexed: a
 * destructuring runs an iterator in the interpreter, and a helper closure is named by the bundle's
 * keepNames on every call).
 */
function groupsValue(g: readonly number[]): bigint {
  const high = ((g[0] ?? 0) * 65536 + (g[1] ?? 0)) * 65536 + (g[2] ?? 0);
  const mid = ((g[3] ?? 0) * 65536 + (g[4] ?? 0)) * 65536 + (g[5] ?? 0);
  const low = (g[6] ?? 0) * 65536 + (g[7] ?? 0);
  return (BigInt(high) << 80n) | (BigInt(mid) << 32n) | BigInt(low);
}

/** The eight groups of an address, from its hexadecimal text 32 bits at a time. */
function valueGroups(addr: bigint): number[] {
  const hex = (addr & MAX).toString(16).padStart(32, '0');
  const g: number[] = [];
  for (let i = 0; i < 32; i += 8) {
    const word = parseInt(hex.slice(i, i + 8), 16);
    g.push(word >>> 16, word & 0xffff);
  }
  return g;
}

/** Parses an IPv6 address in any valid hexadecimal form; undefined for anything else. */
export function parseIpv6(text: string): bigint | undefined {
  const g = parseGroups(text);
  return g === undefined ? undefined : groupsValue(g);
}

export function isIpv6(text: string): boolean {
  return parseGroups(text) !== undefined;
}

/** The canonical text of an address (RFC 5952). */
export function formatIpv6(addr: bigint): string {
  return formatGroups(valueGroups(addr));
}

/** The canonical form of an address's text, or undefined when it is not one. */
export function canonicalIpv6(text: string): string | undefined {
  const g = parseGroups(text);
  return g === undefined ? undefined : formatGroups(g);
}

/** Size of a block of the given prefix length, in addresses. */
export function blockSize6(prefix: number): bigint {
  return 1n << BigInt(128 - prefix);
}

/**
 * Parses "addr/len". With `strict`, host bits must be zero (a network address); otherwise they
 * are masked off. With `canonical`, the address must be written in its canonical form (a lease
 * key's, so that one lease has one key). Returns undefined when malformed.
 */
export function parseCidr6(
  text: string,
  opts: { strict: boolean; canonical?: boolean },
): Cidr6 | undefined {
  const slash = text.indexOf('/');
  const prefix = prefixLength(text, slash + 1);
  if (slash < 2 || prefix === undefined) return undefined;
  const addrText = text.slice(0, slash);
  const g = parseGroups(addrText);
  if (g === undefined || (opts.canonical === true && formatGroups(g) !== addrText))
    return undefined;
  const addr = groupsValue(g);
  const hostBits = BigInt(128 - prefix);
  const base = (addr >> hostBits) << hostBits;
  if (opts.strict && base !== addr) return undefined;
  return { base, prefix };
}

/** The decimal 0-128 from `from` to the end of `text`, without leading zeros; else undefined. */
function prefixLength(text: string, from: number): number | undefined {
  const n = text.length - from;
  if (n < 1 || n > 3) return undefined;
  let value = 0;
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 48 || c > 57 || (i > from && value === 0)) return undefined;
    value = value * 10 + (c - 48);
  }
  return value <= 128 ? value : undefined;
}

export function formatCidr6(c: Cidr6): string {
  // A template or + of 13 characters or more makes V8 keep a tree of its parts (a cons string, 32
  // bytes plus each part's own); join makes one flat string. Each peer's entries keep theirs for
  // as long as its lease lives: at 5,000 dual-stack peers the trees were 0.8 MiB of the heap.
  return blockText(formatIpv6(c.base), c.prefix);
}

export function lastAddress6(c: Cidr6): bigint {
  return c.base + blockSize6(c.prefix) - 1n;
}

export function containsAddr6(c: Cidr6, addr: bigint): boolean {
  return addr >= c.base && addr <= lastAddress6(c);
}

/** True when `inner` lies entirely inside `outer`. */
export function containsCidr6(outer: Cidr6, inner: Cidr6): boolean {
  return inner.prefix >= outer.prefix && containsAddr6(outer, inner.base);
}

export function overlaps6(a: Cidr6, b: Cidr6): boolean {
  return containsAddr6(a, b.base) || containsAddr6(b, a.base);
}

export function sameCidr6(a: Cidr6, b: Cidr6): boolean {
  return a.base === b.base && a.prefix === b.prefix;
}

/** Both absent (an IPv4-only lease or file), or the same IPv6 block. */
export function sameOptionalCidr6(
  a: Cidr6 | null | undefined,
  b: Cidr6 | null | undefined,
): boolean {
  return a && b ? sameCidr6(a, b) : !a && !b;
}

/** First usable host address of a subnet (network address + 1), as flannel's gateway. */
export function firstHost6(c: Cidr6): bigint {
  return c.base + 1n;
}

/**
 * True for an address that may be a node's public IPv6 address: not unspecified, loopback,
 * multicast, link-local or IPv4-mapped.
 */
export function isUnicastHost6(addr: bigint): boolean {
  if (addr === 0n || addr === 1n || addr > MAX) return false;
  const top16 = Number(addr >> 112n);
  if (top16 >> 8 === 0xff) return false; // multicast ff00::/8
  if ((top16 & 0xffc0) === 0xfe80) return false; // link-local fe80::/10
  if (addr >> 32n === 0xffffn) return false; // ::ffff:0:0/96
  return true;
}
