// Subnet allocation: which /SubnetLen blocks in [SubnetMin, SubnetMax] are
// free, and a pick among them that starts at a random place (so that many
// nodes acquiring at once rarely race for the same key). Pure; the caller
// supplies randomness. Nothing is materialised: a 10.0.0.0/8 range in /30s
// is four million candidates, checked one set lookup each; IPv6 ranges
// (bigints) are billions and more, scanned the same way from a random start.
// IPv4 allocation takes the config's IPv4 half (`config.ipv4`), so it cannot
// run for an IPv6-only config, which has none.
import type { Ipv4NetConfig, Ipv6NetConfig, NetConfig } from '../config/netconf.ts';
import { blockSize, overlaps, type Cidr } from '../net/ipv4.ts';
import { blockSize6, overlaps6, type Cidr6 } from '../net/ipv6.ts';

interface Range {
  readonly first: number;
  readonly step: number;
  readonly count: number;
  readonly prefix: number;
}

function rangeOf(config: Ipv4NetConfig): Range {
  const step = blockSize(config.subnetLen);
  return {
    first: config.subnetMin,
    step,
    count: (config.subnetMax - config.subnetMin) / step + 1,
    prefix: config.subnetLen,
  };
}

/**
 * A predicate for "overlaps nothing taken": leases of our size by set lookup, any others by
 * overlap.
 */
function freeTest(range: Range, taken: readonly Cidr[]): (c: Cidr) => boolean {
  const sameSize = new Set(taken.filter((t) => t.prefix === range.prefix).map((t) => t.base));
  const others = taken.filter((t) => t.prefix !== range.prefix);
  return (c) => !sameSize.has(c.base) && !others.some((o) => overlaps(o, c));
}

/** Every subnet of the IPv4 config's range that overlaps none of `taken`. */
export function freeSubnets(config: Ipv4NetConfig, taken: readonly Cidr[]): Cidr[] {
  const range = rangeOf(config);
  const isFree = freeTest(range, taken);
  const free: Cidr[] = [];
  for (let i = 0; i < range.count; i++) {
    const candidate = { base: range.first + i * range.step, prefix: range.prefix };
    if (isFree(candidate)) free.push(candidate);
  }
  return free;
}

/**
 * The first free subnet at or after a random position in the range (wrapping
 * around), or undefined when the range is full. `random` returns [0, 1).
 */
export function pickFreeSubnet(
  config: Ipv4NetConfig,
  taken: readonly Cidr[],
  random: () => number,
): Cidr | undefined {
  const range = rangeOf(config);
  const isFree = freeTest(range, taken);
  const start = Math.floor(random() * range.count);
  for (let i = 0; i < range.count; i++) {
    const candidate = {
      base: range.first + ((start + i) % range.count) * range.step,
      prefix: range.prefix,
    };
    if (isFree(candidate)) return candidate;
  }
  return undefined;
}

/** True when `subnet` is one the IPv4 config could hand out. */
export function fitsConfig(config: Ipv4NetConfig, subnet: Cidr): boolean {
  return (
    subnet.prefix === config.subnetLen &&
    subnet.base >= config.subnetMin &&
    subnet.base <= config.subnetMax &&
    (subnet.base - config.network.base) % blockSize(config.subnetLen) === 0
  );
}

/**
 * The IPv6 counterpart of `pickFreeSubnet`, over [IPv6SubnetMin, IPv6SubnetMax] (bigints): a
 * /32 in /64s is four billion candidates and a /8 in /64s 2^56, so nothing is listed up front;
 * each candidate costs one set lookup (plus an overlap check against taken subnets of other
 * sizes), the scan starts at a random place and gives up after `maxScan` candidates (each lease
 * takes one subnet, so only a million leases could fill that many in a row). Undefined when the
 * range is full (or no free subnet was found within `maxScan`).
 */
export function pickFreeSubnet6(
  ipv6: Ipv6NetConfig,
  taken: readonly Cidr6[],
  random: () => number,
  maxScan = 1_000_000,
): Cidr6 | undefined {
  const step = blockSize6(ipv6.subnetLen);
  const count = (ipv6.subnetMax - ipv6.subnetMin) / step + 1n;
  // keyed by text: V8 hashes a bigint by its low bits, and subnet bases share all of them (a set of
  // /64 bases as bigints degrades to a list: 65,536 lookups took a minute)
  const sameSize = new Set(
    taken.filter((t) => t.prefix === ipv6.subnetLen).map((t) => t.base.toString(16)),
  );
  const others = taken.filter((t) => t.prefix !== ipv6.subnetLen);
  const start = randomBelow(count, random);
  const limit = count < BigInt(maxScan) ? count : BigInt(maxScan);
  for (let i = 0n; i < limit; i++) {
    const base = ipv6.subnetMin + ((start + i) % count) * step;
    const candidate = { base, prefix: ipv6.subnetLen };
    if (!sameSize.has(base.toString(16)) && !others.some((o) => overlaps6(o, candidate)))
      return candidate;
  }
  return undefined;
}

/**
 * floor(random() · n) for a bigint n of any size, as `pickFreeSubnet` does with numbers: 48 random
 * bits per call, enough calls to cover n's bits (so every subnet of a 2^56-subnet range can be the
 * start).
 */
function randomBelow(n: bigint, random: () => number): bigint {
  let r = 0n;
  let bits = 0n;
  do {
    r = (r << 48n) | BigInt(Math.floor(random() * 2 ** 48));
    bits += 48n;
  } while (1n << bits < n);
  return (r * n) >> bits;
}

/** True when `subnet6` is one the IPv6 config could hand out (flannel's compatibility rule). */
export function fitsConfig6(ipv6: Ipv6NetConfig, subnet6: Cidr6): boolean {
  return (
    subnet6.prefix === ipv6.subnetLen &&
    subnet6.base >= ipv6.subnetMin &&
    subnet6.base <= ipv6.subnetMax &&
    (subnet6.base - ipv6.network.base) % blockSize6(ipv6.subnetLen) === 0n
  );
}

/**
 * True when a lease's pair of subnets suits the config in both families: without IPv6 in the config
 * a lease must have no IPv6 subnet, with it one that `fitsConfig6` (as flannel's
 * isSubnetConfigCompat && isIPv6SubnetConfigCompat); the same for IPv4.
 */
export function fitsConfigPair(
  config: NetConfig,
  subnet: Cidr | null,
  subnet6: Cidr6 | null | undefined,
): boolean {
  const fits4 = config.ipv4 ? !!subnet && fitsConfig(config.ipv4, subnet) : !subnet;
  const fits6 = config.ipv6 ? !!subnet6 && fitsConfig6(config.ipv6, subnet6) : !subnet6;
  return fits4 && fits6;
}
