// The desired state: our lease + every admitted peer lease in, what the
// kernel should hold out (pure). The backends live here: host-gw routes each
// peer subnet via the peer's public IP on the underlay; vxlan gives each peer
// a permanent neighbour, an FDB entry and an onlink route through
// twill.<VNI>, wire-compatible with flannel. `Desired` is the daemon's view:
// the same functions over the keeper's lease and the tracker's peers now.
import type { NetConfig, VxlanBackend } from '../config/netconf.ts';
import type { Lease } from '../lease/types.ts';
import { onLink, type IfaceChoice } from '../net/iface.ts';
import { formatCidr, formatIpv4 } from '../net/ipv4.ts';
import {
  DEVICE_PREFIX,
  VXLAN_OVERHEAD,
  type DesiredState,
  type FdbSpec,
  type MasqSpec,
  type NeighSpec,
  type RouteSpec,
  type VxlanDevice,
} from './model.ts';

export interface BackendInput {
  readonly config: NetConfig;
  readonly self: Lease;
  /** admitted peers (admit.ts, through the PeerTracker) */
  readonly peers: readonly Lease[];
  readonly choice: IfaceChoice;
  readonly ipMasq: boolean;
  /** whether MASQUERADE supports --random-fully here */
  readonly randomFully: boolean;
}

/** The vxlan device name for a VNI (kernel objects carry twill's names). */
export function vxlanDeviceName(vni: number): string {
  return `${DEVICE_PREFIX}${vni}`;
}

/** The pods' MTU: the underlay's (or Backend.MTU), less the vxlan header with vxlan. */
export function podMtu(backend: NetConfig['backend'], underlayMtu: number): number {
  return backend.type === 'vxlan' ? (backend.mtu ?? underlayMtu) - VXLAN_OVERHEAD : underlayMtu;
}

interface PeerEntries {
  routes: RouteSpec[];
  neighs: NeighSpec[];
  fdb: FdbSpec[];
}

function directRoute(peer: Lease, choice: IfaceChoice): RouteSpec {
  return {
    dst: formatCidr(peer.subnet),
    via: peer.attrs.publicIp,
    dev: choice.iface.name,
    onlink: false,
  };
}

function hostGwEntries(input: BackendInput): PeerEntries {
  return { routes: input.peers.map((p) => directRoute(p, input.choice)), neighs: [], fdb: [] };
}

function vxlanEntries(input: BackendInput, dev: VxlanDevice, backend: VxlanBackend): PeerEntries {
  const out: PeerEntries = { routes: [], neighs: [], fdb: [] };
  for (const peer of input.peers) {
    const mac = peer.attrs.backendData?.vtepMac;
    if (backend.directRouting && onLink(input.choice.iface, peer.attrs.publicIp)) {
      out.routes.push(directRoute(peer, input.choice));
      continue;
    }
    // admission refused vxlan peers without a VtepMAC (admit.ts)
    if (mac === undefined) continue;
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
    mtu: podMtu(backend, input.choice.iface.mtu),
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
 * The whole desired state for one pass, from peers that passed admission (admit.ts, applied by
 * the peer tracker): every peer given becomes kernel entries.
 */
export function desiredState(input: BackendInput): DesiredState {
  const backend = input.config.backend;
  const vxlan = backend.type === 'vxlan' ? vxlanDevice(input, backend) : null;
  const entries =
    vxlan && backend.type === 'vxlan' ? vxlanEntries(input, vxlan, backend) : hostGwEntries(input);
  return { vxlan, ...entries, masq: masqSpec(input) };
}

/** The daemon's desired state, computed afresh from our current lease and the admitted peers. */
export interface DesiredInputs extends Omit<BackendInput, 'self' | 'peers'> {
  /** our lease now (the LeaseKeeper) */
  readonly keeper: { current(): Lease };
  /** the admitted peers now (the PeerTracker) */
  readonly peers: { list(): readonly Lease[] };
}

export class Desired {
  private readonly o: DesiredInputs;

  constructor(o: DesiredInputs) {
    this.o = o;
  }

  state(): DesiredState {
    return desiredState({ ...this.o, self: this.o.keeper.current(), peers: this.o.peers.list() });
  }

  /** Only the chains' inputs: the chain poll runs every second, and needs no peer. */
  masq(): MasqSpec {
    return masqSpec({ ...this.o, self: this.o.keeper.current() });
  }
}
