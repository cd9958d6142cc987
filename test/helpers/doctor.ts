// Doctor fixtures: the facts of a healthy vxlan node (10.244.3.0/24 at
// 10.123.0.2 on eth0, MTU 1500; twill.1 at 1450; cni0 and one pod veth;
// one peer 10.244.1.0/24 and its route), to be broken one fact at a time;
// of the same node dual-stack (fd00:10:244:3::/64 at fd00:123::2,
// twill-v6.1 at 1430, IPv6 forwarding on, twill's ip6tables chains); and of
// it IPv6 only (the IPv6 half alone: no IPv4 network, lease half, address,
// device, route or chain).
import { parseNetConfig } from '../../src/config/netconf.ts';
import { chainSpecs6 } from '../../src/dataplane/masq.ts';
import {
  got,
  type CheckResult,
  type DoctorFacts,
  type LinkFact,
  type NftFact,
} from '../../src/doctor/facts.ts';
import type { Lease, LeaseRecord } from '../../src/lease/types.ts';
import { parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
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
    nft: got(NO_NFT_TABLES),
  };
}

/** The nft command is there and twill's tables are not (an iptables-mode node's). */
export const NO_NFT_TABLES: NftFact = {
  version: 'nftables v1.0.6 (Lester Gooch #5)',
  tables: new Map([
    ['table ip twill-ipv4', null],
    ['table ip6 twill-ipv6', null],
  ]),
};

function cidr6(text: string): Cidr6 {
  const c = parseCidr6(text, { strict: false });
  if (!c) throw new Error(`bad cidr ${text}`);
  return c;
}

/** Dual-stack: the IPv6 network, our IPv6 subnet and underlay address. */
export const DUAL = {
  network6: 'fd00:10:244::/56',
  subnet6: 'fd00:10:244:3::/64',
  ip6: 'fd00:123::2',
} as const;

/** Lease `l` with IPv6 subnet fd00:10:244:<n>::/64 at fd00:123::<n>, as a dual-stack node's. */
export function dualLease(l: Lease, n: number): Lease {
  return {
    ...l,
    key: `${l.key}&fd00:10:244:${n}::-64`,
    subnet6: cidr6(`fd00:10:244:${n}::/64`),
    attrs: {
      ...l.attrs,
      publicIpv6: `fd00:123::${n}`,
      backendData6: l.attrs.backendData ? { vni: 1, vtepMac: `06:00:00:00:00:0${n}` } : null,
    },
  };
}

/** The healthy node, dual-stack (vxlan). */
export function healthyDualFacts(): DoctorFacts {
  const base = healthyFacts();
  const input = backendInput({ backend: 'vxlan', peers: [] });
  const config = parseNetConfig(
    `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"${DUAL.network6}","Backend":{"Type":"vxlan"}}`,
  );
  const self = dualLease(input.self, 3);
  const peer = dualLease(peerLease(1, { vxlan: true }), 1);
  const env = base.subnetEnv.ok ? base.subnetEnv.value : undefined;
  if (!env) throw new Error('fixture');
  const specs = chainSpecs6({
    ipMasq: true,
    network: cidr6(DUAL.network6),
    subnet: cidr6(DUAL.subnet6),
    randomFully: true,
  });
  return {
    ...base,
    // a dual-stack vxlan node's pods get the IPv6 tunnel's MTU (1500 − 70) on the pod side too
    links: got([
      ...HEALTHY_LINKS.map((l) =>
        l.name === 'cni0' || l.kind === 'veth' ? { ...l, mtu: 1430 } : l,
      ),
      link('twill-v6.1', { kind: 'vxlan', mtu: 1430, vni: 1, port: 8472, local: DUAL.ip6 }),
    ]),
    subnetEnv: got({
      ...env,
      mtu: 1430,
      network6: cidr6(DUAL.network6),
      subnet6: cidr6('fd00:10:244:3::1/64'),
    }),
    store: got({
      config,
      leases: [
        { key: self.key, ok: true, lease: self },
        { key: peer.key, ok: true, lease: peer },
      ],
    }),
    ipv6Forward: got('1'),
    underlay6: got({ ip: DUAL.ip6, publicIp: DUAL.ip6 }),
    ip6Chains: got({
      postrouting: { jumps: [specs.postrouting.jump], rules: specs.postrouting.rules },
      forward: { jumps: [specs.forward.jump], rules: specs.forward.rules },
    }),
    // the peer's IPv6 route through twill-v6.1
    ownedRoutes6: got([
      { dst: 'fd00:10:244:1::/64', via: 'fd00:10:244:1::', dev: 'twill-v6.1', onlink: true },
    ]),
  };
}

/** Lease `l` IPv6 only (as the Kubernetes store reads an IPv6-only Node): no IPv4 half. */
export function v6OnlyLease(l: Lease): Lease {
  return {
    ...l,
    key: l.key.split('&')[1] ?? l.key,
    subnet: null,
    attrs: { ...l.attrs, publicIp: null, backendData: null },
  };
}

/** The network config of the IPv6-only node (vxlan unless said). */
export const V6ONLY_CONFIG = `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"${DUAL.network6}","Backend":{"Type":"vxlan"}}`;

/**
 * The healthy node, IPv6 only (vxlan): the dual-stack node's IPv6 half alone. eth0 has no IPv4
 * address, cni0 only its IPv6 gateway; net.ipv4.ip_forward is 0 and rp_filter unread, neither
 * mattering; twill's iptables chains were read and are absent.
 */
export function healthyV6OnlyFacts(): DoctorFacts {
  const dual = healthyDualFacts();
  if (!dual.store.ok || !dual.links.ok || !dual.subnetEnv.ok || !dual.subnetEnv.value)
    throw new Error('fixture');
  // ours (fd00:10:244:3::/64) names the underlay's IPv6 address: an IPv6-only node finds it so
  const ours = (l: Lease): Lease =>
    l.subnet6?.base === cidr6(DUAL.subnet6).base
      ? { ...l, attrs: { ...l.attrs, publicIpv6: DUAL.ip6 } }
      : l;
  const leases = dual.store.value.leases.map((r) =>
    r.ok ? { ...r, key: v6OnlyLease(r.lease).key, lease: ours(v6OnlyLease(r.lease)) } : r,
  );
  return {
    ...dual,
    ipForward: got('0'),
    rpFilter: new Map(),
    links: got(
      dual.links.value.flatMap((l) =>
        l.name === 'twill.1'
          ? []
          : l.name === 'eth0'
            ? [{ ...l, addresses: [], addresses6: [`${DUAL.ip6}/64`] }]
            : l.name === 'cni0'
              ? [{ ...l, addresses: [], addresses6: ['fd00:10:244:3::1/64'] }]
              : [l],
      ),
    ),
    underlay: got({ name: 'eth0', mtu: 1500, publicIp: null }),
    subnetEnv: got({ ...dual.subnetEnv.value, network: null, subnet: null }),
    store: got({ config: parseNetConfig(V6ONLY_CONFIG), leases }),
    ownedRoutes: got([]),
    bridgeNf6: got('1'),
    ip4Chains: got({
      postrouting: { jumps: [], rules: null },
      forward: { jumps: [], rules: null },
    }),
  };
}

export { cidr as doctorCidr, cidr6 as doctorCidr6 };

/** The result of one named check. */
export function resultOf(results: readonly CheckResult[], check: string): CheckResult {
  const r = results.find((x) => x.check === check);
  if (!r) throw new Error(`no check ${check} in ${results.map((x) => x.check).join(', ')}`);
  return r;
}
