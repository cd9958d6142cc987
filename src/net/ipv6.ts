// IPv6 addresses and CIDR blocks as plain data (bigints), with strict
// parsing, the counterpart of ipv4.ts. Text comes from other nodes, so
// parsing takes only hexadecimal groups (no zone, no embedded dotted quad),
// and `formatIpv6` writes the one canonical form (RFC 5952, as Go's
// net.IP.String() and so flannel write it): lower case, no leading zeros,
// the longest run of two or more zero groups (the first of equals) as "::".

export interface Cidr6 {
  /** network address as an unsigned 128-bit number */
  readonly base: bigint;
  readonly prefix: number;
}

const GROUP = /^[0-9a-fA-F]{1,4}$/;
const MAX = (1n << 128n) - 1n;

// Parsing and formatting work on the eight 16-bit groups as numbers, with one bigint made (or
// read) at the edge: bigint arithmetic per group cost 3.5 us an address in the interpreter twill
// runs in (--max-opt=1), a tenth of a second for the 10,000 addresses of 5,000 dual-stack leases.

/** The eight groups of an address in any valid hexadecimal form; undefined for anything else. */
function parseGroups(text: string): number[] | undefined {
  if (text.length > 39 || text.length < 2) return undefined;
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const head = halves[0] === '' ? [] : (halves[0] ?? '').split(':');
  const tail = halves.length < 2 || halves[1] === '' ? [] : (halves[1] ?? '').split(':');
  const given = head.length + tail.length;
  if (halves.length === 2 ? given > 7 : given !== 8) return undefined;
  const g: number[] = [];
  for (const part of head) {
    if (!GROUP.test(part)) return undefined;
    g.push(parseInt(part, 16));
  }
  for (let i = given; i < 8; i++) g.push(0);
  for (const part of tail) {
    if (!GROUP.test(part)) return undefined;
    g.push(parseInt(part, 16));
  }
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
  const hex = g.map((x) => x.toString(16));
  if (best < 0) return hex.join(':');
  // join, not a template: see formatCidr6
  return [hex.slice(0, best).join(':'), hex.slice(best + bestLen).join(':')].join('::');
}

/** Parses an IPv6 address in any valid hexadecimal form; undefined for anything else. */
export function parseIpv6(text: string): bigint | undefined {
  const g = parseGroups(text);
  if (!g) return undefined;
  return BigInt(`0x${g.map((x) => x.toString(16).padStart(4, '0')).join('')}`);
}

export function isIpv6(text: string): boolean {
  return parseGroups(text) !== undefined;
}

/** The canonical text of an address (RFC 5952). */
export function formatIpv6(addr: bigint): string {
  const hex = (addr & MAX).toString(16).padStart(32, '0');
  const g: number[] = [];
  for (let i = 0; i < 32; i += 4) g.push(parseInt(hex.slice(i, i + 4), 16));
  return formatGroups(g);
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
 * are masked off. Returns undefined when malformed.
 */
export function parseCidr6(text: string, opts: { strict: boolean }): Cidr6 | undefined {
  const m = /^([0-9a-fA-F:]+)\/(\d{1,3})$/.exec(text);
  if (!m) return undefined;
  const addr = parseIpv6(m[1] ?? '');
  const prefix = Number(m[2]);
  if (addr === undefined || prefix > 128 || String(prefix) !== m[2]) return undefined;
  const base = addr - (addr % blockSize6(prefix));
  if (opts.strict && base !== addr) return undefined;
  return { base, prefix };
}

export function formatCidr6(c: Cidr6): string {
  // A template or + of 13 characters or more makes V8 keep a tree of its parts (a cons string, 32
  // bytes plus each part's own); join makes one flat string. Each peer's entries keep theirs for
  // as long as its lease lives: at 5,000 dual-stack peers the trees were 0.8 MiB of the heap.
  return [formatIpv6(c.base), c.prefix].join('/');
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
