// Dataplane fixtures: backend inputs for N peers on a given backend (IPv4,
// dual-stack with `ipv6`, or IPv6 only with `ipv4: false`), and a compact text
// view of what a namespace's kernel holds of twill's objects (routes,
// neighbours, FDB entries, device, chains; with `ipv6` the IPv6 ones too) for
// exact assertions.
import { parseNetConfig } from '../../src/config/netconf.ts';
import type { BackendInput } from '../../src/dataplane/desired.ts';
import {
  ROUTE_PROTOCOL,
  type DesiredState,
  type MasqSpec,
  type MasqSpec6,
} from '../../src/dataplane/model.ts';
import { routeMetric } from '../../src/dataplane/peer-entries.ts';
import type { Runner } from '../../src/exec/runner.ts';
import type { Lease } from '../../src/lease/types.ts';
import { formatIpv4, parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { formatIpv6, parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';

export const SELF_MAC = '02:00:00:00:00:03';

/** The metric twill gives its IPv4 route to `dst` ("10.244.1.0/24"), as `ip route` prints it. */
export function metricOf(dst: string): string {
  return `metric ${routeMetric(parseCidr(dst, { strict: true }) as Cidr)}`;
}
/** our IPv6 vxlan device's MAC (BackendV6Data's VtepMAC) */
export const SELF_MAC6 = '02:00:00:06:00:03';
/** the dual-stack fixtures' IPv6 pod network and underlay */
export const NETWORK6 = 'fd00::/48';
export const UNDERLAY6 = 'fd7b::';

function cidr6(text: string): Cidr6 {
  const c = parseCidr6(text, { strict: true });
  if (!c) throw new Error(`bad cidr ${text}`);
  return c;
}

/** Peer (or node) n's IPv6 subnet: fd00:0:0:n::/64 (n in hex). */
export function subnet6Of(n: number): Cidr6 {
  return { base: cidr6(NETWORK6).base + (BigInt(n) << 64n), prefix: 64 };
}

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`bad cidr ${text}`);
  return c;
}

/** The desired state's iptables chain inputs, which a fixture with IPv4 on always has. */
export function masqOf(d: Pick<DesiredState, 'masq'>): MasqSpec {
  if (!d.masq) throw new Error('a desired state with IPv4 off has no iptables chain inputs');
  return d.masq;
}

/** The desired state's ip6tables chain inputs, which a fixture with IPv6 on always has. */
export function masq6Of(d: Pick<DesiredState, 'masq6'>): MasqSpec6 {
  if (!d.masq6) throw new Error('a desired state with IPv6 off has no ip6tables chain inputs');
  return d.masq6;
}

/**
 * Peer n (1-based, n ≠ 3) has subnet 10.244.n.0/24 (n < 256) and PublicIP `ipBase`.n; with
 * `ipv6` also subnet6 fd00:0:0:n::/64, PublicIPv6 `ipBase6`n (hex) and an IPv6 VtepMAC
 * 02:00:00:06:…; with `ipv4` false (and `ipv6`) an IPv6-only lease as the Kubernetes store reads
 * one: no subnet, PublicIP or BackendData, keyed by its IPv6 subnet.
 */
export function peerLease(
  n: number,
  o: { vxlan: boolean; ipBase?: string; ipv6?: boolean; ipBase6?: string; ipv4?: boolean },
): Lease {
  const v4 = o.ipv4 !== false;
  const subnet = { base: cidr('10.244.0.0/16').base + n * 256, prefix: 24 };
  const publicIp = `${o.ipBase ?? '10.123.0'}.${n % 250}`;
  const tail = `${((n >> 8) & 0xff).toString(16).padStart(2, '0')}:${(n & 0xff).toString(16).padStart(2, '0')}`;
  const mac = `02:00:00:00:${tail}`;
  const subnet6 = o.ipv6 ? subnet6Of(n) : undefined;
  const key4 = v4 ? `${formatIpv4(subnet.base)}-24` : '';
  const key6 = subnet6 ? `${formatIpv6(subnet6.base)}-64` : '';
  return {
    key: [key4, key6].filter(Boolean).join('&'),
    subnet: v4 ? subnet : null,
    ...(subnet6 ? { subnet6 } : {}),
    attrs: {
      publicIp: v4 ? publicIp : null,
      publicIpv6: o.ipv6 ? `${o.ipBase6 ?? UNDERLAY6}${n.toString(16)}` : null,
      backendType: o.vxlan ? 'vxlan' : 'host-gw',
      backendData: o.vxlan && v4 ? { vni: 1, vtepMac: mac } : null,
      ...(o.ipv6 && o.vxlan ? { backendData6: { vni: 1, vtepMac: `02:00:00:06:${tail}` } } : {}),
    },
    expiresAt: Date.now() + 86_400_000,
    version: '1',
  };
}

/**
 * Backend input: our lease 10.244.3.0/24 at 10.123.0.2 on eth0 (10.123.0.2/24), plus `peers`;
 * with `ipv6` dual-stack: IPv6Network fd00::/48, our subnet6 fd00:0:0:3::/64, eth0 also at
 * fd7b::2/64 (`ifaceIp6`), our IPv6 VtepMAC SELF_MAC6; with `ipv4` false as well, IPv6 only
 * ("EnableIPv4": false): the same IPv6 half, and no IPv4 network, subnet, PublicIP, BackendData
 * or interface address (eth0 has only its IPv6 one).
 */
export function backendInput(o: {
  backend: 'vxlan' | 'host-gw';
  peers: readonly Lease[];
  ipMasq?: boolean;
  extra?: string;
  network?: string;
  ipv6?: boolean;
  /** false: IPv6 only (needs `ipv6`) */
  ipv4?: boolean;
  /** our IPv6 underlay address when not fd7b::2 */
  ifaceIp6?: string;
}): BackendInput {
  const v4 = o.ipv4 !== false;
  const v6keys = o.ipv6 ? `,"EnableIPv6":true,"IPv6Network":"${NETWORK6}"` : '';
  const v4keys = v4 ? `"Network":"${o.network ?? '10.244.0.0/16'}"` : '"EnableIPv4":false';
  const config = parseNetConfig(
    `{${v4keys}${v6keys},"Backend":{"Type":"${o.backend}"${o.extra ?? ''}}}`,
  );
  const vxlan = o.backend === 'vxlan';
  const ifaceIp6 = o.ifaceIp6 ?? `${UNDERLAY6}2`;
  const self: Lease = {
    key: [v4 ? '10.244.3.0-24' : '', o.ipv6 ? 'fd00:0:0:3::-64' : ''].filter(Boolean).join('&'),
    subnet: v4 ? cidr('10.244.3.0/24') : null,
    ...(o.ipv6 ? { subnet6: subnet6Of(3) } : {}),
    attrs: {
      publicIp: v4 ? '10.123.0.2' : null,
      publicIpv6: o.ipv6 ? ifaceIp6 : null,
      backendType: o.backend,
      backendData: vxlan && v4 ? { vni: 1, vtepMac: SELF_MAC } : null,
      ...(o.ipv6 && vxlan ? { backendData6: { vni: 1, vtepMac: SELF_MAC6 } } : {}),
    },
    expiresAt: Date.now() + 86_400_000,
    version: '1',
  };
  const iface = {
    name: 'eth0',
    mtu: 1500,
    mac: '02:fe:00:00:00:02',
    addrs: v4 ? ['10.123.0.2'] : [],
    networks: v4 ? ['10.123.0.2/24'] : [],
    ...(o.ipv6 ? { networks6: [`${ifaceIp6}/64`] } : {}),
  };
  return {
    config,
    self,
    peers: o.peers,
    choice: {
      iface,
      ifaceIp: v4 ? '10.123.0.2' : null,
      publicIp: v4 ? '10.123.0.2' : null,
      ...(o.ipv6 ? { ifaceIp6, publicIp6: ifaceIp6 } : {}),
    },
    ipMasq: o.ipMasq ?? true,
    randomFully: true,
  };
}

export interface KernelView {
  readonly routes: string[];
  readonly neighs: string[];
  readonly fdb: string[];
  readonly devices: string[];
  readonly postrtg: string;
  readonly postrouting: string;
  readonly fwd: string;
  readonly forward: string;
  /** with `ipv6`: the same for IPv6 (routes with twill's protocol, twill-v6.1, ip6tables) */
  readonly v6?: {
    readonly routes: string[];
    readonly neighs: string[];
    readonly fdb: string[];
    readonly postrtg: string;
    readonly postrouting: string;
    readonly fwd: string;
    readonly forward: string;
  };
}

const lines = (text: string): string[] =>
  text
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .sort();
const quiet = async (p: Promise<{ stdout: string }>): Promise<string> =>
  p.then(
    (r) => r.stdout,
    () => '',
  );

/** The IPv6 half of a kernel view. */
async function kernelView6(runner: Runner): Promise<NonNullable<KernelView['v6']>> {
  const [routes, neighs, fdb, postrtg, postrouting, fwd, forward] = await Promise.all([
    quiet(runner('ip', ['-6', 'route', 'show', 'table', 'main'])),
    quiet(runner('ip', ['-6', 'neigh', 'show', 'dev', 'twill-v6.1', 'nud', 'permanent'])),
    quiet(runner('bridge', ['fdb', 'show', 'dev', 'twill-v6.1'])),
    quiet(runner('ip6tables', ['-t', 'nat', '-S', 'TWILL-POSTRTG'])),
    quiet(runner('ip6tables', ['-t', 'nat', '-S', 'POSTROUTING'])),
    quiet(runner('ip6tables', ['-t', 'filter', '-S', 'TWILL-FWD'])),
    quiet(runner('ip6tables', ['-t', 'filter', '-S', 'FORWARD'])),
  ]);
  return {
    routes: lines(routes).filter((l) => l.includes(` proto ${ROUTE_PROTOCOL}`)),
    neighs: lines(neighs),
    fdb: lines(fdb),
    postrtg,
    postrouting,
    fwd,
    forward,
  };
}

/**
 * What the namespace behind `runner` holds of twill's objects, as sorted text lines; with `ipv6`,
 * the IPv6 ones too.
 */
export async function kernelView(runner: Runner, o: { ipv6?: boolean } = {}): Promise<KernelView> {
  const [routes, neighs, fdb, devices, postrtg, postrouting, fwd, forward] = await Promise.all([
    quiet(runner('ip', ['route', 'show', 'table', 'main'])),
    quiet(runner('ip', ['neigh', 'show', 'dev', 'twill.1', 'nud', 'permanent'])),
    quiet(runner('bridge', ['fdb', 'show', 'dev', 'twill.1'])),
    quiet(runner('ip', ['-br', 'link', 'show', 'type', 'vxlan'])),
    quiet(runner('iptables', ['-t', 'nat', '-S', 'TWILL-POSTRTG'])),
    quiet(runner('iptables', ['-t', 'nat', '-S', 'POSTROUTING'])),
    quiet(runner('iptables', ['-t', 'filter', '-S', 'TWILL-FWD'])),
    quiet(runner('iptables', ['-t', 'filter', '-S', 'FORWARD'])),
  ]);
  const owned = lines(routes).filter((l) => l.includes(` proto ${ROUTE_PROTOCOL}`));
  return {
    routes: owned,
    neighs: lines(neighs),
    fdb: lines(fdb),
    devices: lines(devices).map((l) => l.split(/\s+/)[0] ?? ''),
    postrtg,
    postrouting,
    fwd,
    forward,
    ...(o.ipv6 ? { v6: await kernelView6(runner) } : {}),
  };
}

/**
 * A desired state without its per-peer view (which carries the leases themselves): for comparing
 * states built from different lease objects by what they ask of the kernel.
 */
export function kernelPart(d: DesiredState): Omit<DesiredState, 'peers'> {
  const { peers: _peers, ...rest } = d;
  return rest;
}
