// The backends, pure: our lease + every peer lease in, the desired kernel
// state out. host-gw routes each peer subnet via the peer's public IP on the
// underlay; vxlan gives each peer a permanent neighbour, an FDB entry and an
// onlink route through twill.<VNI>, wire-compatible with flannel.
import type { NetConfig, VxlanBackend } from '../config/netconf.ts';
import type { Lease } from '../lease/types.ts';
import type { IfaceChoice } from '../net/iface.ts';
import { containsAddr, formatCidr, formatIpv4, lastAddress, parseCidr, parseIpv4 } from '../net/ipv4.ts';
import type { DesiredState, FdbSpec, MasqSpec, NeighSpec, PeerProblem, RouteSpec, VxlanDevice } from './model.ts';

export interface BackendInput {
  readonly config: NetConfig;
  readonly self: Lease;
  /** validated peers (PeerTracker) */
  readonly peers: readonly Lease[];
  readonly choice: IfaceChoice;
  readonly ipMasq: boolean;
  /** whether MASQUERADE supports --random-fully here */
  readonly randomFully: boolean;
}

/** The vxlan device name for a VNI (kernel objects carry twill's names). */
export function vxlanDeviceName(vni: number): string {
  return `twill.${vni}`;
}

/** True when `ip` lies in one of the interface's on-link networks. */
export function onLink(choice: IfaceChoice, ip: string): boolean {
  const addr = parseIpv4(ip);
  if (addr === undefined) return false;
  return choice.iface.networks.some((n) => {
    const cidr = parseCidr(n, { strict: false });
    return cidr !== undefined && containsAddr(cidr, addr);
  });
}

interface PeerEntries {
  routes: RouteSpec[];
  neighs: NeighSpec[];
  fdb: FdbSpec[];
  problems: PeerProblem[];
}

function directRoute(peer: Lease, choice: IfaceChoice): RouteSpec {
  return { dst: formatCidr(peer.subnet), via: peer.attrs.publicIp, dev: choice.iface.name, onlink: false };
}

function notOnLink(peer: Lease, choice: IfaceChoice): PeerProblem {
  return {
    key: peer.key,
    subnet: formatCidr(peer.subnet),
    reason: `PublicIP ${peer.attrs.publicIp} is not on-link on ${choice.iface.name} (${choice.iface.networks.join(', ') || 'no IPv4 networks'}); host-gw needs every node on one L2 network`,
  };
}

function hostGwEntries(input: BackendInput): PeerEntries {
  const out: PeerEntries = { routes: [], neighs: [], fdb: [], problems: [] };
  for (const peer of input.peers) {
    if (onLink(input.choice, peer.attrs.publicIp)) out.routes.push(directRoute(peer, input.choice));
    else out.problems.push(notOnLink(peer, input.choice));
  }
  return out;
}

function vxlanEntries(input: BackendInput, dev: VxlanDevice, backend: VxlanBackend): PeerEntries {
  const out: PeerEntries = { routes: [], neighs: [], fdb: [], problems: [] };
  // one FDB entry per MAC: a second peer claiming a VtepMAC would steal the first one's traffic
  const macOwner = new Map<string, string>([[dev.mac, 'this node']]);
  for (const peer of input.peers) {
    const mac = peer.attrs.backendData?.vtepMac;
    if (backend.directRouting && onLink(input.choice, peer.attrs.publicIp)) {
      out.routes.push(directRoute(peer, input.choice));
      continue;
    }
    if (mac === undefined) {
      out.problems.push({ key: peer.key, subnet: formatCidr(peer.subnet), reason: 'vxlan lease without BackendData.VtepMAC' });
      continue;
    }
    const owner = macOwner.get(mac);
    if (owner !== undefined) {
      out.problems.push({ key: peer.key, subnet: formatCidr(peer.subnet), reason: `VtepMAC ${mac} is already used by ${owner}` });
      continue;
    }
    macOwner.set(mac, peer.key);
    const gw = formatIpv4(peer.subnet.base);
    out.neighs.push({ dev: dev.name, ip: gw, mac });
    out.fdb.push({ dev: dev.name, mac, dst: peer.attrs.publicIp });
    out.routes.push({ dst: formatCidr(peer.subnet), via: gw, dev: dev.name, onlink: true });
  }
  return out;
}

function vxlanDevice(input: BackendInput, backend: VxlanBackend): VxlanDevice {
  return {
    name: vxlanDeviceName(backend.vni),
    vni: backend.vni,
    local: input.choice.ifaceIp,
    underlay: input.choice.iface.name,
    port: backend.port,
    learning: backend.learning,
    gbp: backend.gbp,
    mtu: (backend.mtu ?? input.choice.iface.mtu) - 50,
    mac: input.self.attrs.backendData?.vtepMac ?? '',
    address: `${formatIpv4(input.self.subnet.base)}/32`,
  };
}

/** The masquerade and forward chains' inputs: cheap, for the chain poll that runs every second. */
export function masqSpec(o: { config: NetConfig; self: Lease; ipMasq: boolean; randomFully: boolean }): MasqSpec {
  return { ipMasq: o.ipMasq, network: o.config.network, subnet: o.self.subnet, randomFully: o.randomFully };
}

/** The whole desired state for one pass. Peers are sorted so output is stable. */
/**
 * Peers whose subnets overlap an earlier one (by address, then the larger
 * block, then key: the same winner on every node) are problems, not entries:
 * two routes for one subnet would flip the kernel on every pass. Keys that
 * are subnets (etcd) cannot collide; node names (Kubernetes) can.
 */
function withoutOverlaps(peers: readonly Lease[]): { peers: Lease[]; problems: PeerProblem[] } {
  const sorted = [...peers].sort((a, b) => a.subnet.base - b.subnet.base || a.subnet.prefix - b.subnet.prefix || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const kept: Lease[] = [];
  const problems: PeerProblem[] = [];
  let widest: Lease | undefined;
  for (const peer of sorted) {
    if (widest && peer.subnet.base <= lastAddress(widest.subnet)) {
      problems.push({ key: peer.key, subnet: formatCidr(peer.subnet), reason: `subnet overlaps ${formatCidr(widest.subnet)} of peer ${widest.key}` });
      continue;
    }
    kept.push(peer);
    if (!widest || lastAddress(peer.subnet) > lastAddress(widest.subnet)) widest = peer;
  }
  return { peers: kept, problems };
}

export function desiredState(input: BackendInput): DesiredState {
  const distinct = withoutOverlaps(input.peers);
  const sorted = { ...input, peers: distinct.peers };
  const backend = input.config.backend;
  const vxlan = backend.type === 'vxlan' ? vxlanDevice(sorted, backend) : null;
  const entries = vxlan && backend.type === 'vxlan' ? vxlanEntries(sorted, vxlan, backend) : hostGwEntries(sorted);
  return {
    vxlan,
    ...entries,
    problems: [...distinct.problems, ...entries.problems],
    masq: masqSpec(input),
  };
}
