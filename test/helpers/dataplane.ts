// Dataplane fixtures: backend inputs for N peers on a given backend, and a
// compact text view of what a namespace's kernel holds of twill's objects
// (routes, neighbours, FDB entries, device, chains) for exact assertions.
import { parseNetConfig } from '../../src/config/netconf.ts';
import type { BackendInput } from '../../src/dataplane/desired.ts';
import { ROUTE_PROTOCOL } from '../../src/dataplane/model.ts';
import type { Runner } from '../../src/exec/runner.ts';
import type { Lease } from '../../src/lease/types.ts';
import { formatIpv4, parseCidr, type Cidr } from '../../src/net/ipv4.ts';

export const SELF_MAC = '02:00:00:00:00:03';

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`bad cidr ${text}`);
  return c;
}

/** Peer n (1-based, n ≠ 3) has subnet 10.244.n.0/24 (n < 256) and PublicIP `ipBase`.n. */
export function peerLease(n: number, o: { vxlan: boolean; ipBase?: string }): Lease {
  const subnet = { base: cidr('10.244.0.0/16').base + n * 256, prefix: 24 };
  const publicIp = `${o.ipBase ?? '10.123.0'}.${n % 250}`;
  const mac = `02:00:00:00:${((n >> 8) & 0xff).toString(16).padStart(2, '0')}:${(n & 0xff).toString(16).padStart(2, '0')}`;
  return {
    key: `${formatIpv4(subnet.base)}-24`,
    subnet,
    attrs: {
      publicIp,
      publicIpv6: null,
      backendType: o.vxlan ? 'vxlan' : 'host-gw',
      backendData: o.vxlan ? { vni: 1, vtepMac: mac } : null,
    },
    expiresAt: Date.now() + 86_400_000,
    version: '1',
  };
}

/** Backend input: our lease 10.244.3.0/24 at 10.123.0.2 on eth0 (10.123.0.2/24), plus `peers`. */
export function backendInput(o: {
  backend: 'vxlan' | 'host-gw';
  peers: readonly Lease[];
  ipMasq?: boolean;
  extra?: string;
  network?: string;
}): BackendInput {
  const config = parseNetConfig(
    `{"Network":"${o.network ?? '10.244.0.0/16'}","Backend":{"Type":"${o.backend}"${o.extra ?? ''}}}`,
  );
  const vxlan = o.backend === 'vxlan';
  const self: Lease = {
    key: '10.244.3.0-24',
    subnet: cidr('10.244.3.0/24'),
    attrs: {
      publicIp: '10.123.0.2',
      publicIpv6: null,
      backendType: o.backend,
      backendData: vxlan ? { vni: 1, vtepMac: SELF_MAC } : null,
    },
    expiresAt: Date.now() + 86_400_000,
    version: '1',
  };
  const iface = {
    name: 'eth0',
    mtu: 1500,
    mac: '02:fe:00:00:00:02',
    addrs: ['10.123.0.2'],
    networks: ['10.123.0.2/24'],
  };
  return {
    config,
    self,
    peers: o.peers,
    choice: { iface, ifaceIp: '10.123.0.2', publicIp: '10.123.0.2' },
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

/** What the namespace behind `runner` holds of twill's objects, as sorted text lines. */
export async function kernelView(runner: Runner): Promise<KernelView> {
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
  };
}
