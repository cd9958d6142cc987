// What the plugin asks of `ip`, as pure text: the host-side batch of an ADD
// (bridge, veth pair with its peer created straight in the pod's netns,
// bridge port, hairpin), the pod-side batch (lo, address, routes), and the
// parsing of what `ip -json -batch` prints (which line failed:
// src/exec/batch-errors.ts). Every value put into batch text goes through
// `batchWord`.
import { formatCidr, formatIpv4, type Cidr } from '../src/net/ipv4.ts';

export interface HostWiring {
  readonly bridge: string;
  /** set when the bridge is created (see bridgeMac) */
  readonly bridgeMac: string;
  readonly hostVeth: string;
  readonly ifname: string;
  readonly netns: string;
  readonly mtu: number;
  /** gateway address and prefix to hold on the bridge (isGateway) */
  readonly gateway: { readonly addr: number; readonly prefix: number } | undefined;
  readonly hairpin: boolean;
}

/** A locally administered MAC made from the gateway address: 0a:58 + its four bytes. */
export function bridgeMac(gateway: number): string {
  const bytes = [
    0x0a,
    0x58,
    gateway >>> 24,
    (gateway >>> 16) & 0xff,
    (gateway >>> 8) & 0xff,
    gateway & 0xff,
  ];
  return bytes.map((b) => b.toString(16).padStart(2, '0')).join(':');
}

export interface HostBatch {
  readonly lines: readonly string[];
  /** 1-based line that creates the veth pair: a failure there created nothing */
  readonly vethLine: number;
}

/**
 * `value` as one word of `ip -batch` text. The parser splits lines on white
 * space, cuts them at `#`, gives leading quotes and trailing backslashes a
 * meaning: a value with any of those (or a control character) would change
 * the command, so it is refused here whatever checked it before.
 */
export function batchWord(value: string): string {
  if (value === '' || /[\p{Cc}\s#"'\\]/u.test(value))
    throw new Error(`refusing to put ${JSON.stringify(value)} into ip -batch text`);
  return value;
}

/**
 * The host batch; with `createBridge` it starts by creating the bridge. The
 * bridge (already checked to be one) is touched only after the veth pair
 * exists and is its port, so a failure creating the pair (it exists, the
 * netns is gone) changes nothing on it.
 */
export function hostAddBatch(w: HostWiring, createBridge: boolean): HostBatch {
  const [bridge, veth, ifname, netns] = [w.bridge, w.hostVeth, w.ifname, w.netns].map(batchWord);
  const lines: string[] = [];
  // a fixed MAC: otherwise the bridge takes its lowest port's, and the pods'
  // gateway MAC changes whenever ports come and go
  if (createBridge)
    lines.push(`link add name ${bridge} address ${w.bridgeMac} mtu ${w.mtu} type bridge`);
  lines.push(
    `link add name ${veth} mtu ${w.mtu} type veth peer name ${ifname} mtu ${w.mtu} netns ${netns}`,
  );
  const vethLine = lines.length;
  lines.push(`link set dev ${veth} master ${bridge} up`);
  if (w.hairpin) lines.push(`link set dev ${veth} type bridge_slave hairpin on`);
  lines.push(`link set dev ${bridge} up`);
  if (w.gateway)
    lines.push(
      `addr replace ${formatIpv4(w.gateway.addr)}/${w.gateway.prefix} broadcast + dev ${bridge}`,
    );
  lines.push(`link show dev ${bridge}`, `link show dev ${veth}`);
  return { lines, vethLine };
}

export interface PodWiring {
  readonly ifname: string;
  readonly address: number;
  readonly subnet: Cidr;
  readonly gateway: number;
  readonly network: Cidr;
  readonly defaultRoute: boolean;
}

/** The batch run inside the pod's netns (through nsenter). */
export function podAddBatch(p: PodWiring): string[] {
  const gw = formatIpv4(p.gateway);
  batchWord(p.ifname);
  const lines = [
    'link set dev lo up',
    `addr add ${formatIpv4(p.address)}/${p.subnet.prefix} broadcast + dev ${p.ifname}`,
    `link set dev ${p.ifname} up`,
    `route add ${formatCidr(p.network)} via ${gw} dev ${p.ifname}`,
  ];
  if (p.defaultRoute) lines.push(`route add default via ${gw} dev ${p.ifname}`);
  lines.push(`link show dev ${p.ifname}`);
  return lines;
}

/** The batch CHECK runs inside the pod's netns. */
export function podCheckBatch(ifname: string): string[] {
  return [`addr show dev ${batchWord(ifname)}`, `route show dev ${ifname}`];
}

/** Each JSON array `ip -json -batch` printed, in order (one per show command). */
export function jsonOutputs(stdout: string): unknown[][] {
  return stdout
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.startsWith('['))
    .map((l) => JSON.parse(l) as unknown[]);
}

export interface IpLink {
  readonly ifname: string;
  readonly address: string;
  readonly mtu: number;
  readonly flags: readonly string[];
  readonly master?: string;
}

/** The single link a `link show dev X` printed. */
export function linkOf(output: unknown[] | undefined, dev: string): IpLink {
  const link = output?.[0] as Partial<IpLink> | undefined;
  if (!link || link.ifname !== dev || typeof link.address !== 'string') {
    throw new Error(`ip printed no link named ${dev}: ${JSON.stringify(output)}`);
  }
  return {
    ifname: dev,
    address: link.address,
    mtu: Number(link.mtu),
    flags: link.flags ?? [],
    ...(link.master ? { master: link.master } : {}),
  };
}
