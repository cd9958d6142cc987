// Subnet allocation: which /SubnetLen blocks in [SubnetMin, SubnetMax] are
// free, and a pick among them that starts at a random place (so that many
// nodes acquiring at once rarely race for the same key). Pure; the caller
// supplies randomness. Nothing is materialised: a 10.0.0.0/8 range in /30s
// is four million candidates, checked one set lookup each.
import type { NetConfig } from '../config/netconf.ts';
import { blockSize, overlaps, type Cidr } from '../net/ipv4.ts';

interface Range {
  readonly first: number;
  readonly step: number;
  readonly count: number;
  readonly prefix: number;
}

function rangeOf(config: NetConfig): Range {
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

/** Every subnet of the config's range that overlaps none of `taken`. */
export function freeSubnets(config: NetConfig, taken: readonly Cidr[]): Cidr[] {
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
  config: NetConfig,
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

/** True when `subnet` is one the config could hand out. */
export function fitsConfig(config: NetConfig, subnet: Cidr): boolean {
  return (
    subnet.prefix === config.subnetLen &&
    subnet.base >= config.subnetMin &&
    subnet.base <= config.subnetMax &&
    (subnet.base - config.network.base) % blockSize(config.subnetLen) === 0
  );
}
