// The desired state: our lease + every admitted peer lease in, what the
// kernel should hold out (pure). The backends live here and, peer by peer, in
// peer-entries.ts (built once per lease object, EntriesMemo): host-gw routes each
// peer subnet via the peer's public IP on the underlay; vxlan gives each peer
// a permanent neighbour, an FDB entry and an onlink route through
// twill.<VNI>, wire-compatible with flannel. Dual-stack adds the same per
// IPv6 peer: host-gw a route via its PublicIPv6; vxlan a second device,
// twill-v6.<VNI> over the IPv6 underlay (flannel-v6.<VNI>'s VNI, port and
// learning, so the two talk), with its own neighbour, FDB entry and onlink
// route per peer. With IPv4 off (IPv6 only) the IPv4 half is absent: no
// twill.<VNI>, no IPv4 entry, no iptables chain (so what an IPv4 run left is
// removed); the IPv6 half is dual-stack's. Each family's pod network and our
// subnet in it also say which bridge addresses are CNI gateways of an earlier
// lease of ours, to be removed (podRanges). `Desired` is the daemon's view: the
// same functions over the keeper's lease and the tracker's peers now.
import type { NetConfig, VxlanBackend } from '../config/netconf.ts';
import type { Lease } from '../lease/types.ts';
import type { IfaceChoice } from '../net/iface.ts';
import { formatIpv4, type Cidr } from '../net/ipv4.ts';
import { formatIpv6 } from '../net/ipv6.ts';
import {
  DEVICE_PREFIX,
  DEVICE6_PREFIX,
  VXLAN_OVERHEAD,
  VXLAN6_OVERHEAD,
  type DesiredState,
  type MasqSpec,
  type MasqSpec6,
  type PeerEntries,
  type PodRange,
  type VxlanDevice,
} from './model.ts';
import { peerEntries, withEntries, type EntriesMemo, type EntriesSetup } from './peer-entries.ts';

export interface BackendInput {
  readonly config: NetConfig;
  readonly self: Lease;
  /** admitted peers (admit.ts, through the PeerTracker) */
  readonly peers: readonly Lease[];
  readonly choice: IfaceChoice;
  readonly ipMasq: boolean;
  /** whether MASQUERADE supports --random-fully here */
  readonly randomFully: boolean;
  /**
   * the CNI plugin's bridge (--cni-bridge, the CNI config's "bridge"), the only device whose
   * stale gateways twill removes; DEFAULT_CNI_BRIDGE when not given
   */
  readonly cniBridge?: string;
}

/** The CNI bridge's name unless --cni-bridge says otherwise (the CNI plugin's default too). */
export const DEFAULT_CNI_BRIDGE = 'cni0';

/** The vxlan device name for a VNI (kernel objects carry twill's names). */
export function vxlanDeviceName(vni: number): string {
  return `${DEVICE_PREFIX}${vni}`;
}

/** The IPv6 vxlan device name for a VNI: twill-v6.<VNI>, as flannel's is flannel-v6.<VNI>. */
export function vxlan6DeviceName(vni: number): string {
  return `${DEVICE6_PREFIX}${vni}`;
}

/**
 * The pods' MTU (FLANNEL_MTU): the underlay's (or Backend.MTU), less the vxlan header with vxlan
 * — on a dual-stack or IPv6-only node (`ipv6`) the IPv6 one (70 bytes, not 50): a pod's one
 * interface carries both families, and an IPv6 packet sized for the IPv4 tunnel would not fit
 * twill-v6.<VNI> (flannel writes the IPv4 figure on a dual-stack node and leaves such packets to
 * path-MTU discovery).
 */
export function podMtu(
  backend: NetConfig['backend'],
  underlayMtu: number,
  o: { ipv6?: boolean } = {},
): number {
  if (backend.type !== 'vxlan') return underlayMtu;
  return (backend.mtu ?? underlayMtu) - (o.ipv6 === true ? VXLAN6_OVERHEAD : VXLAN_OVERHEAD);
}

/** The IPv6 vxlan device's MTU: the underlay's (or Backend.MTU) less IPv6's 70-byte overhead. */
export function vxlan6Mtu(backend: VxlanBackend, underlayMtu: number): number {
  return (backend.mtu ?? underlayMtu) - VXLAN6_OVERHEAD;
}

/**
 * The IPv4 side: on when the config has an IPv4 network and we hold an IPv4 subnet and an IPv4
 * underlay address (off on an IPv6-only node); what the IPv4 entries are built from.
 */
interface V4 {
  readonly underlayIp: string;
  readonly self: Cidr;
}

function v4Of(input: Pick<BackendInput, 'config' | 'self' | 'choice'>): V4 | undefined {
  const self = input.self.subnet;
  const underlayIp = input.choice.ifaceIp;
  if (!input.config.ipv4 || !self || !underlayIp) return undefined;
  return { underlayIp, self };
}

function vxlanDevice(input: BackendInput, backend: VxlanBackend, v4: V4): VxlanDevice {
  return {
    name: vxlanDeviceName(backend.vni),
    vni: backend.vni,
    local: v4.underlayIp,
    underlay: input.choice.iface.name,
    port: backend.port,
    learning: backend.learning,
    gbp: backend.gbp,
    // the IPv4 device's own MTU: the 50-byte figure, whatever the pods use
    mtu: podMtu(backend, input.choice.iface.mtu),
    mac: input.self.attrs.backendData?.vtepMac ?? '',
    address: `${formatIpv4(v4.self.base)}/32`,
  };
}

/**
 * The IPv6 side (dual-stack or IPv6 only): on when the config enables IPv6 and we hold an IPv6
 * subnet and an IPv6 underlay address; what the IPv6 entries are built from.
 */
interface V6 {
  readonly underlayIp: string;
  readonly self: NonNullable<Lease['subnet6']>;
}

function v6Of(input: Pick<BackendInput, 'config' | 'self' | 'choice'>): V6 | undefined {
  const self = input.self.subnet6;
  const underlayIp = input.choice.ifaceIp6;
  if (!input.config.ipv6 || !self || !underlayIp) return undefined;
  return { underlayIp, self };
}

/**
 * twill-v6.<VNI>: the IPv4 device's VNI, port, learning and gbp (flannel-v6.<VNI> takes them from
 * the same backend config), over our IPv6 underlay address, with our IPv6 VtepMAC.
 */
function vxlan6Device(input: BackendInput, backend: VxlanBackend, v6: V6): VxlanDevice {
  return {
    name: vxlan6DeviceName(backend.vni),
    vni: backend.vni,
    local: v6.underlayIp,
    underlay: input.choice.iface.name,
    port: backend.port,
    learning: backend.learning,
    gbp: backend.gbp,
    mtu: vxlan6Mtu(backend, input.choice.iface.mtu),
    mac: input.self.attrs.backendData6?.vtepMac ?? '',
    address: `${formatIpv6(v6.self.base)}/128`,
  };
}

/**
 * The masquerade and forward chains' inputs: cheap, for the chain poll that runs every second;
 * null when IPv4 is off (IPv6 only: no iptables chain may exist).
 */
export function masqSpec(o: {
  config: NetConfig;
  self: Lease;
  ipMasq: boolean;
  randomFully: boolean;
}): MasqSpec | null {
  const subnet = o.self.subnet;
  if (!o.config.ipv4 || !subnet) return null;
  return { ipMasq: o.ipMasq, network: o.config.ipv4.network, subnet, randomFully: o.randomFully };
}

/** The ip6tables chains' inputs when IPv6 is on, dual-stack or IPv6 only (null otherwise). */
export function masqSpec6(o: {
  config: NetConfig;
  self: Lease;
  choice: IfaceChoice;
  ipMasq: boolean;
  randomFully: boolean;
}): MasqSpec6 | null {
  const v6 = v6Of(o);
  const network = o.config.ipv6?.network;
  if (!v6 || !network) return null;
  return { ipMasq: o.ipMasq, network, subnet: v6.self, randomFully: o.randomFully };
}

/**
 * The families whose pod network and our subnet in it are known: where a bridge's address is a
 * stale gateway (PodRange). Only from the config and our lease: a family we hold no subnet of has
 * none, so no bridge address of it is ever touched.
 */
export function podRanges(o: { config: NetConfig; self: Lease; cniBridge?: string }): PodRange[] {
  const { ipv4, ipv6 } = o.config;
  const { subnet, subnet6 } = o.self;
  const bridge = o.cniBridge ?? DEFAULT_CNI_BRIDGE;
  return [
    ...(ipv4 && subnet ? [{ family: 4 as const, bridge, network: ipv4.network, subnet }] : []),
    ...(ipv6 && subnet6
      ? [{ family: 6 as const, bridge, network: ipv6.network, subnet: subnet6 }]
      : []),
  ];
}

/**
 * The whole desired state for one pass, from peers that passed admission (admit.ts, applied by
 * the peer tracker): every peer given becomes kernel entries. `memo`: see EntriesMemo (for one
 * config and interface choice, as `Desired` keeps them).
 */
export function desiredState(input: BackendInput, memo?: EntriesMemo): DesiredState {
  const backend = input.config.backend;
  // IPv4 off (IPv6 only): no twill.<VNI>, no IPv4 entry, and masq null below
  const v4 = v4Of(input);
  const vxlan = v4 && backend.type === 'vxlan' ? vxlanDevice(input, backend, v4) : null;
  const v6 = v6Of(input);
  const vxlan6 = v6 && backend.type === 'vxlan' ? vxlan6Device(input, backend, v6) : null;
  const setup: EntriesSetup = { choice: input.choice, backend, v4: !!v4, v6: !!v6, vxlan, vxlan6 };
  const key = `${!!v4} ${!!v6} ${vxlan?.name} ${vxlan6?.name}`;
  if (memo && memo.key !== key) [memo.key, memo.entries] = [key, new WeakMap()];
  // the memo of this setup, even if a later state's setup replaces it before these are made
  const known = memo?.entries;
  const { peers } = input;
  // made when first read: an observed pass makes them while its first kernel read runs
  // (reconciler.ts)
  const made = (): PeerEntries[] =>
    peers.map((peer) => {
      const had = known?.get(peer);
      if (had) return had;
      const entries = peerEntries(setup, peer);
      known?.set(peer, entries);
      return entries;
    });
  return withEntries(
    { vxlan, vxlan6, masq: masqSpec(input), masq6: masqSpec6(input), podRanges: podRanges(input) },
    made,
  );
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
  /** peers' entries by lease (EntriesMemo) */
  private readonly memo: EntriesMemo = { entries: new WeakMap() };

  constructor(o: DesiredInputs) {
    this.o = o;
  }

  state(): DesiredState {
    const self = this.o.keeper.current();
    return desiredState({ ...this.o, self, peers: this.o.peers.list() }, this.memo);
  }

  /**
   * Only the chains' inputs: the chain poll runs every second, and needs no peer (null when IPv4
   * is off).
   */
  masq(): MasqSpec | null {
    return masqSpec({ ...this.o, self: this.o.keeper.current() });
  }

  /** The ip6tables chains' inputs (null when IPv6 is off), for the same poll. */
  masq6(): MasqSpec6 | null {
    return masqSpec6({ ...this.o, self: this.o.keeper.current() });
  }
}
