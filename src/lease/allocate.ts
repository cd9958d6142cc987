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

/** A random free subnet, or undefined when the range is full. `random` returns [0, 1). */
export function pickFreeSubnet(config: NetConfig, taken: readonly Cidr[], random: () => number): Cidr | undefined {
  const free = freeSubnets(config, taken);
  if (free.length === 0) return undefined;
  return free[Math.floor(random() * free.length)];
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
