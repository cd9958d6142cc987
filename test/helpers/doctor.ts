// Doctor fixtures: the facts of a healthy vxlan node (10.244.3.0/24 at
// 10.123.0.2 on eth0, MTU 1500; twill.1 at 1450; cni0 and one pod veth;
// one peer 10.244.1.0/24 and its route), to be broken one fact at a time.
import { got, type CheckResult, type DoctorFacts, type LinkFact } from '../../src/doctor/facts.ts';
import type { LeaseRecord } from '../../src/lease/types.ts';
import { parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { backendInput, peerLease } from './dataplane.ts';

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: false });
  if (!c) throw new Error(`bad cidr ${text}`);
  return c;
}

export function link(name: string, o: Partial<LinkFact> = {}): LinkFact {
  return {
    name,
    kind: undefined,
    mtu: 1500,
    master: undefined,
    addresses: [],
    vni: undefined,
    port: undefined,
    ...o,
  };
}

export const HEALTHY_LINKS: readonly LinkFact[] = [
  link('lo', { mtu: 65536, addresses: ['127.0.0.1/8'] }),
  link('eth0', { addresses: ['10.123.0.2/24'] }),
  link('twill.1', { kind: 'vxlan', mtu: 1450, vni: 1, port: 8472, addresses: ['10.244.3.0/32'] }),
  link('cni0', { kind: 'bridge', mtu: 1450, addresses: ['10.244.3.1/24'] }),
  link('twv0123456789ab', { kind: 'veth', mtu: 1450, master: 'cni0' }),
];

/** Store facts: the config (Backend vxlan plus `backendExtra`), our lease and peer 1. */
export function storeFact(
  o: { backend?: 'vxlan' | 'host-gw'; backendExtra?: string; leases?: LeaseRecord[] } = {},
): DoctorFacts['store'] {
  const input = backendInput({ backend: o.backend ?? 'vxlan', peers: [], extra: o.backendExtra });
  const self = input.self;
  const peer = peerLease(1, { vxlan: (o.backend ?? 'vxlan') === 'vxlan' });
  const leases = o.leases ?? [
    { key: self.key, ok: true, lease: self },
    { key: peer.key, ok: true, lease: peer },
  ];
  return got({ config: input.config, leases });
}

export function healthyFacts(): DoctorFacts {
  return {
    ipForward: got('1'),
    bridgeNf: got('1'),
    rpFilter: new Map([
      ['all', '0'],
      ['default', '0'],
      ['eth0', '0'],
      ['twill.1', '0'],
      ['cni0', '0'],
    ]),
    iptables: got({ backend: 'nf_tables', otherRules: got(0) }),
    inputChain: got('-P INPUT ACCEPT\n'),
    foreignChains: got([]),
    links: got(HEALTHY_LINKS),
    underlay: got({ name: 'eth0', mtu: 1500, publicIp: '10.123.0.2' }),
    subnetFile: '/run/twill/subnet.env',
    subnetEnv: got({
      network: cidr('10.244.0.0/16'),
      subnet: cidr('10.244.3.1/24'),
      mtu: 1450,
      ipMasq: true,
    }),
    store: storeFact(),
    ownedRoutes: got([{ dst: '10.244.1.0/24', via: '10.244.1.0', dev: 'twill.1', onlink: true }]),
    bridge: 'cni0',
  };
}

export { cidr as doctorCidr };

/** The result of one named check. */
export function resultOf(results: readonly CheckResult[], check: string): CheckResult {
  const r = results.find((x) => x.check === check);
  if (!r) throw new Error(`no check ${check} in ${results.map((x) => x.check).join(', ')}`);
  return r;
}
