// What the plugin asks of `ip`, as pure text: the host-side batch of an ADD
// (bridge, veth pair with its peer created straight in the pod's netns,
// bridge port, hairpin), the pod-side batch (lo, address, routes), and the
// parsing of what `ip -json -batch` prints (which line failed:
// src/exec/batch-errors.ts). Every value put into batch text goes through
// `batchWord`. On a dual-stack node the IPv6 lines go into the same two
// batches (no process more than IPv4 alone), and the pod batch runs behind a
// few shell lines that prepare the pod's IPv6 settings (POD_IPV6_PRELUDE). An
// IPv6-only node's batches are a dual-stack node's without the IPv4 lines.
import { createHash } from 'node:crypto';
import { formatCidr, formatIpv4, type Cidr } from '../src/net/ipv4.ts';
import { formatCidr6, formatIpv6, type Cidr6 } from '../src/net/ipv6.ts';

export interface HostWiring {
  readonly bridge: string;
  /** set when the bridge is created (see bridgeMac) */
  readonly bridgeMac: string;
  readonly hostVeth: string;
  readonly ifname: string;
  readonly netns: string;
  readonly mtu: number;
  /** gateway address and prefix to hold on the bridge (isGateway; not on an IPv6-only node) */
  readonly gateway: { readonly addr: number; readonly prefix: number } | undefined;
  /** dual-stack, IPv6 only: the IPv6 gateway address and prefix for the bridge (isGateway) */
  readonly gateway6?: { readonly addr: bigint; readonly prefix: number } | undefined;
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

/**
 * An IPv6-only node's bridge MAC: 0a:58 + the first four bytes of the SHA-256 of the IPv6 gateway
 * (its 16 bytes). Stable for the node's subnet like bridgeMac, and unlike the gateway's last four
 * bytes (::1 in every /64) not the same on every node.
 */
export function bridgeMac6(gateway: bigint): string {
  const addr = Buffer.from(gateway.toString(16).padStart(32, '0'), 'hex');
  const digest = createHash('sha256').update(addr).digest();
  return [0x0a, 0x58, ...digest.subarray(0, 4)]
    .map((b) => b.toString(16).padStart(2, '0'))
    .join(':');
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
  // nodad: the gateway is the first host of the node's own IPv6 subnet, unique by construction, and
  // a tentative gateway would leave the first pods without IPv6 for a second or more
  if (w.gateway6)
    lines.push(
      `addr replace ${formatIpv6(w.gateway6.addr)}/${w.gateway6.prefix} dev ${bridge} nodad`,
    );
  lines.push(`link show dev ${bridge}`, `link show dev ${veth}`);
  return { lines, vethLine };
}

export interface PodWiring {
  readonly ifname: string;
  readonly defaultRoute: boolean;
  /** the pod's IPv4 address, the node's subnet, gateway and network; not on an IPv6-only node */
  readonly v4?: PodWiring4 | undefined;
  /** dual-stack, IPv6 only: the pod's IPv6 address, the node's IPv6 subnet, gateway and network */
  readonly v6?: PodWiring6 | undefined;
}

export interface PodWiring4 {
  readonly address: number;
  readonly subnet: Cidr;
  readonly gateway: number;
  readonly network: Cidr;
}

export interface PodWiring6 {
  readonly address: bigint;
  readonly subnet: Cidr6;
  readonly gateway: bigint;
  readonly network: Cidr6;
}

/** The batch run inside the pod's netns (through nsenter). */
export function podAddBatch(p: PodWiring): string[] {
  const gw6 = p.v6 ? formatIpv6(p.v6.gateway) : '';
  batchWord(p.ifname);
  const lines = ['link set dev lo up'];
  if (p.v4)
    lines.push(
      `addr add ${formatIpv4(p.v4.address)}/${p.v4.subnet.prefix} broadcast + dev ${p.ifname}`,
    );
  // nodad: IPAM hands each address out once, so duplicate address detection would only keep it
  // "tentative" (unusable) for a second or more after the pod starts; and with hairpin on, the
  // bridge echoes the pod's own neighbour solicitations back, which DAD takes for a duplicate
  if (p.v6)
    lines.push(`addr add ${formatIpv6(p.v6.address)}/${p.v6.subnet.prefix} dev ${p.ifname} nodad`);
  lines.push(`link set dev ${p.ifname} up`);
  if (p.v4) {
    const gw = formatIpv4(p.v4.gateway);
    lines.push(`route add ${formatCidr(p.v4.network)} via ${gw} dev ${p.ifname}`);
    if (p.defaultRoute) lines.push(`route add default via ${gw} dev ${p.ifname}`);
  }
  if (p.v6) {
    lines.push(`route add ${formatCidr6(p.v6.network)} via ${gw6} dev ${p.ifname}`);
    if (p.defaultRoute) lines.push(`route add ::/0 via ${gw6} dev ${p.ifname}`);
  }
  lines.push(`link show dev ${p.ifname}`);
  return lines;
}

/**
 * What the pod's netns needs before the pod batch can give it an IPv6 address, as `sh -c` text run
 * by nsenter inside that netns (net sysctls are those of the writer's netns, so this is the only
 * way to reach the pod's without a process more: nsenter execs sh, sh execs ip). `$1` is the pod's
 * interface. IPv6 is turned on when the runtime (or the namespace's defaults) turned it off (`ip
 * addr add` of an IPv6 address fails otherwise), only in the pod's netns; and duplicate address
 * detection is turned off on the pod's interface before it comes up, so that its link-local
 * address is not held "tentative" (or found "duplicate" through the hairpin echo) either: the
 * global address has `nodad` too (see podAddBatch).
 */
export const POD_IPV6_PRELUDE = [
  'set -e',
  'c=/proc/sys/net/ipv6/conf',
  // all first: writing it sets every interface's value too. `read` returns 1 on these files (a
  // sysctl read at a non-zero offset is EOF, so the newline never comes) with the value read; a
  // missing file (no IPv6 in the kernel) still fails, at the write
  'for f in all "$1"; do v=; read -r v < "$c/$f/disable_ipv6" || :; [ "$v" = 0 ] || echo 0 > "$c/$f/disable_ipv6"; done',
  'echo 0 > "$c/$1/accept_dad"',
  'exec ip -json -batch -',
].join('\n');

/**
 * The batch CHECK runs inside the pod's netns: the addresses, then the IPv4 routes (`route show`)
 * when the node has IPv4, then every route (`route show table all`) when it has IPv6.
 */
export function podCheckBatch(
  ifname: string,
  families: { readonly ipv4: boolean; readonly ipv6: boolean } = { ipv4: true, ipv6: false },
): string[] {
  const lines = [`addr show dev ${batchWord(ifname)}`];
  if (families.ipv4) lines.push(`route show dev ${ifname}`);
  // `route show` lists IPv4 routes only, and a batch line takes no -6; `table all` lists both
  // families (the main table's routes are the ones without a "table" key)
  if (families.ipv6) lines.push(`route show table all dev ${ifname}`);
  return lines;
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
