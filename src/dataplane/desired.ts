// The backends, pure: our lease + every peer lease in, the desired kernel
// state out. host-gw routes each peer subnet via the peer's public IP on the
// underlay; vxlan gives each peer a permanent neighbour, an FDB entry and an
// onlink route through twill.<VNI>, wire-compatible with flannel.
import type { NetConfig, VxlanBackend } from '../config/netconf.ts';
import type { Lease } from '../lease/types.ts';
import type { IfaceChoice } from '../net/iface.ts';
import { withoutConflicts } from '../lease/admit.ts';
import { containsAddr, formatCidr, formatIpv4, parseCidr, parseIpv4 } from '../net/ipv4.ts';
import type {
  DesiredState,
  FdbSpec,
  MasqSpec,
  NeighSpec,
  PeerProblem,
  RouteSpec,
  VxlanDevice,
} from './model.ts';

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
  return {
    dst: formatCidr(peer.subnet),
    via: peer.attrs.publicIp,
    dev: choice.iface.name,
    onlink: false,
  };
}

function notOnLink(peer: Lease, choice: IfaceChoice): PeerProblem {
  return {
    key: peer.key,
    subnet: formatCidr(peer.subnet),
    code: 'not-on-link',
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
  // duplicate VtepMACs among peers are refused before (admit.ts); our own may have changed since
  // the tracker checked
  for (const peer of input.peers) {
    const mac = peer.attrs.backendData?.vtepMac;
    if (backend.directRouting && onLink(input.choice, peer.attrs.publicIp)) {
      out.routes.push(directRoute(peer, input.choice));
      continue;
    }
    if (mac === undefined) {
      out.problems.push({
        key: peer.key,
        subnet: formatCidr(peer.subnet),
        code: 'vtep-mac',
        reason: 'vxlan lease without BackendData.VtepMAC',
      });
      continue;
    }
    if (mac.toLowerCase() === dev.mac.toLowerCase()) {
      out.problems.push({
        key: peer.key,
        subnet: formatCidr(peer.subnet),
        code: 'vtep-mac',
        reason: `VtepMAC ${mac} is this node's own`,
      });
      continue;
    }
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
export function masqSpec(o: {
  config: NetConfig;
  self: Lease;
  ipMasq: boolean;
  randomFully: boolean;
}): MasqSpec {
  return {
    ipMasq: o.ipMasq,
    network: o.config.network,
    subnet: o.self.subnet,
    randomFully: o.randomFully,
  };
}

/**
 * The whole desired state for one pass, from peers that each passed admission (the tracker's
 * `checkPeer`).
 */
export function desiredState(input: BackendInput): DesiredState {
  // peers whose subnets or VtepMACs conflict: refused on every node alike (admit.ts)
  const distinct = withoutConflicts(input.peers, input.config);
  const problems: PeerProblem[] = distinct.refused.map((r) => ({
    key: r.lease.key,
    subnet: formatCidr(r.lease.subnet),
    code: r.refusal.reason,
    reason: r.refusal.detail,
  }));
  const sorted = { ...input, peers: distinct.admitted };
  const backend = input.config.backend;
  const vxlan = backend.type === 'vxlan' ? vxlanDevice(sorted, backend) : null;
  const entries =
    vxlan && backend.type === 'vxlan'
      ? vxlanEntries(sorted, vxlan, backend)
      : hostGwEntries(sorted);
  return {
    vxlan,
    ...entries,
    problems: [...problems, ...entries.problems],
    masq: masqSpec(input),
  };
}
