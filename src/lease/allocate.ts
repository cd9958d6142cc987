// Subnet allocation: which /SubnetLen blocks in [SubnetMin, SubnetMax] are
// free, and a random pick among them (random so that many nodes acquiring at
// once rarely race for the same key). Pure; the caller supplies randomness.
import type { NetConfig } from '../config/netconf.ts';
import { blockSize, overlaps, type Cidr } from '../net/ipv4.ts';

/** Every subnet of the config's range that overlaps none of `taken`. */
export function freeSubnets(config: NetConfig, taken: readonly Cidr[]): Cidr[] {
  const step = blockSize(config.subnetLen);
  const free: Cidr[] = [];
  for (let base = config.subnetMin; base <= config.subnetMax; base += step) {
    const candidate = { base, prefix: config.subnetLen };
    if (!taken.some((t) => overlaps(t, candidate))) free.push(candidate);
  }
  return free;
}

/** Ranges up to this many subnets are listed in full; larger ones are probed. */
const MAX_LISTED = 65_536;

/** A random free subnet, or undefined when the range is full. `random` returns [0, 1). */
export function pickFreeSubnet(config: NetConfig, taken: readonly Cidr[], random: () => number): Cidr | undefined {
  const step = blockSize(config.subnetLen);
  const count = (config.subnetMax - config.subnetMin) / step + 1;
  if (count <= MAX_LISTED) {
    const free = freeSubnets(config, taken);
    return free.length === 0 ? undefined : free[Math.floor(random() * free.length)];
  }
  // A huge range (e.g. 10.0.0.0/8 in /30s): never materialise it. Scan
  // cyclically from a random start; each check is a set lookup.
  const sameSize = new Set(taken.filter((t) => t.prefix === config.subnetLen).map((t) => t.base));
  const others = taken.filter((t) => t.prefix !== config.subnetLen);
  const start = Math.floor(random() * count);
  for (let i = 0; i < count; i++) {
    const candidate = { base: config.subnetMin + ((start + i) % count) * step, prefix: config.subnetLen };
    if (!sameSize.has(candidate.base) && !others.some((o) => overlaps(o, candidate))) return candidate;
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
