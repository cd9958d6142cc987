// The address pool of one node and the choice of the next address, pure:
// every host of the subnet except the gateway (its first host), the network
// and the broadcast address, handed out round-robin after the last one
// reserved, as host-local does. Also the text of host-local's store files.
import { firstHost, lastAddress, type Cidr } from '../../src/net/ipv4.ts';

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

/** host-local's file content: `<containerID>\r\n<ifname>`. */
export function formatOwner(containerId: string, ifname: string): string {
  return `${containerId}\r\n${ifname}`;
}

/** Reads a store file's content; an old-style file holds only the id. */
export function parseOwner(text: string): { containerId: string; ifname: string } {
  const [containerId = '', ifname = ''] = text.trim().split('\r\n');
  return { containerId: containerId.trim(), ifname: ifname.trim() };
}
