// The address pool of one node and the choice of the next address, pure:
// every host of the subnet except the gateway (its first host), the network
// and the broadcast address, handed out round-robin after the last one
// reserved, as host-local does. The IPv6 pool (dual-stack) is the same with
// bigints and, as host-local has it, no broadcast address to leave out: the
// subnet's last address is handed out too. Also the text of host-local's
// store files.
import { firstHost, lastAddress, type Cidr } from '../../src/net/ipv4.ts';
import { firstHost6, lastAddress6, type Cidr6 } from '../../src/net/ipv6.ts';

export interface Pool {
  readonly subnet: Cidr;
  readonly gateway: number;
}

export function poolOf(subnet: Cidr): Pool {
  return { subnet, gateway: firstHost(subnet) };
}

/** Number of addresses the pool can hand out. */
export function poolSize(pool: Pool): number {
  const hosts = lastAddress(pool.subnet) - pool.subnet.base - 1;
  return Math.max(0, hosts - 1);
}

/** Every address of the pool once, starting after `last` (wrapping), or at the start. */
export function* candidates(pool: Pool, last?: number): Generator<number> {
  const first = pool.gateway + 1;
  const end = lastAddress(pool.subnet) - 1;
  if (first > end) return;
  const start = last !== undefined && last >= first && last < end ? last + 1 : first;
  for (let a = start; a <= end; a++) yield a;
  for (let a = first; a < start; a++) yield a;
}

/** The first candidate not in `used`, or undefined when the pool is full. */
export function pickAddress(
  pool: Pool,
  used: ReadonlySet<number>,
  last?: number,
): number | undefined {
  for (const a of candidates(pool, last)) if (!used.has(a)) return a;
  return undefined;
}

export interface Pool6 {
  readonly subnet: Cidr6;
  readonly gateway: bigint;
}

export function poolOf6(subnet: Cidr6): Pool6 {
  return { subnet, gateway: firstHost6(subnet) };
}

/** Number of addresses the IPv6 pool can hand out (2^64 - 2 for a /64). */
export function poolSize6(pool: Pool6): bigint {
  const n = lastAddress6(pool.subnet) - pool.gateway;
  return n > 0n ? n : 0n;
}

/**
 * Every address of the IPv6 pool once, starting after `last` (wrapping), or at the start. Lazy: a
 * /64 is never walked, callers stop at the first free address.
 */
export function* candidates6(pool: Pool6, last?: bigint): Generator<bigint> {
  const first = pool.gateway + 1n;
  const end = lastAddress6(pool.subnet);
  if (first > end) return;
  const start = last !== undefined && last >= first && last < end ? last + 1n : first;
  for (let a = start; a <= end; a++) yield a;
  for (let a = first; a < start; a++) yield a;
}

/** The first IPv6 candidate not in `used`, or undefined when the pool is full. */
export function pickAddress6(
  pool: Pool6,
  used: ReadonlySet<bigint>,
  last?: bigint,
): bigint | undefined {
  for (const a of candidates6(pool, last)) if (!used.has(a)) return a;
  return undefined;
}

/** host-local's file content: `<containerID>\r\n<ifname>`. */
export function formatOwner(containerId: string, ifname: string): string {
  return `${containerId}\r\n${ifname}`;
}

/** Reads a store file's content; an old-style file holds only the id. */
export function parseOwner(text: string): { containerId: string; ifname: string } {
  const [containerId = '', ifname = ''] = text.trim().split('\r\n');
  return { containerId: containerId.trim(), ifname: ifname.trim() };
}
