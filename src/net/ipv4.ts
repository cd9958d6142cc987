// IPv4 addresses and CIDR blocks as plain data (numbers), with strict parsing.
// Leases come from other nodes, so parsing refuses anything but canonical
// dotted quads: no octal, no short forms, no host bits in a network address.
// Text and numbers convert in one pass over the characters: a regular
// expression test and the netmask package's ip2long took 1.7-2.0 us an
// address in the interpreter twill runs in (--max-opt=1), this loop 0.5; a
// profiled cold start with 5,000 leases spent 31 ms of its JavaScript thread
// in the old parser. Blocks are plain arithmetic on those numbers.

export interface Cidr {
  /** network address as an unsigned 32-bit number */
  readonly base: number;
  readonly prefix: number;
}

/**
 * Parses a canonical dotted quad (four decimal octets 0-255 without leading zeros, nothing
 * around them); returns undefined for anything else.
 */
export function parseIpv4(text: string): number | undefined {
  const n = text.length;
  if (n < 7 || n > 15) return undefined;
  let addr = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 46 /* . */) {
      if (digits === 0 || dots === 3) return undefined;
      addr = addr * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
    } else if (c >= 48 && c <= 57) {
      // a leading zero is an octet of its own ("0"), never the start of "01"
      if (digits > 0 && octet === 0) return undefined;
      octet = octet * 10 + (c - 48);
      if (++digits > 3 || octet > 255) return undefined;
    } else return undefined;
  }
  if (dots !== 3 || digits === 0) return undefined;
  return addr * 256 + octet;
}

export function formatIpv4(addr: number): string {
  const a = addr >>> 0;
  // join, not a template: a flat string (formatCidr6 says why)
  return [a >>> 24, (a >>> 16) & 255, (a >>> 8) & 255, a & 255].join('.');
}

export function isIpv4(text: string): boolean {
  return parseIpv4(text) !== undefined;
}

/** Size of a block of the given prefix length, in addresses. */
export function blockSize(prefix: number): number {
  return 2 ** (32 - prefix);
}

/**
 * Parses "a.b.c.d/len" (len 0-32, no leading zero). With `strict`, host bits must be zero (a
 * network address); otherwise they are masked off. `separator` '-' reads a lease key's IPv4 half
 * ("a.b.c.d-len"). Returns undefined when malformed. Read in place, without a regex or a string
 * built: every listed lease key comes through here at a start, twice (the early writer's overlap
 * sweep, then the decoding), with the daemon's JIT held low (its node flags), where a regex and a
 * built string per key cost 15-25 ms of 5,000 keys.
 */
export function parseCidr(
  text: string,
  opts: { strict: boolean; separator?: '/' | '-' },
): Cidr | undefined {
  const cut = text.indexOf(opts.separator ?? '/');
  const digits = text.length - cut - 1;
  if (cut < 0 || digits < 1 || digits > 2) return undefined;
  const d0 = text.charCodeAt(cut + 1) - 48;
  const d1 = digits === 2 ? text.charCodeAt(cut + 2) - 48 : 0;
  if (d0 < 0 || d0 > 9 || d1 < 0 || d1 > 9 || (digits === 2 && d0 === 0)) return undefined;
  const prefix = digits === 2 ? d0 * 10 + d1 : d0;
  const addr = prefix > 32 ? undefined : parseIpv4(text.slice(0, cut));
  if (addr === undefined) return undefined;
  const base = addr - (addr % blockSize(prefix));
  if (opts.strict && base !== addr) return undefined;
  return { base, prefix };
}

export function formatCidr(c: Cidr): string {
  return blockText(formatIpv4(c.base), c.prefix);
}

/**
 * "addr/len" from an address's text, in either family (a caller that has the network address's
 * text, as a vxlan peer's gateway, formats it once). join, not a template: one flat string
 * (formatCidr6 says why).
 */
export function blockText(addr: string, prefix: number): string {
  return [addr, prefix].join('/');
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
