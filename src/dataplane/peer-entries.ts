// Each peer's kernel entries, built from its lease alone (pure): host-gw a
// route via its PublicIP (PublicIPv6); vxlan a permanent neighbour, an FDB
// entry and an onlink route through twill.<VNI> (twill-v6.<VNI>), or with
// DirectRouting to a peer on our link host-gw's route. A peer's entries are
// one object, kept by lease object across passes (EntriesMemo): a delta pass
// tells the peers that changed by identity and diffs only theirs
// (diff.ts, peerDelta), and a new lease among 5,000 builds one peer's entries.
import type { NetConfig } from '../config/netconf.ts';
import type { Lease } from '../lease/types.ts';
import { onLink, onLink6, type IfaceChoice } from '../net/iface.ts';
import { blockText, formatCidr, formatIpv4, type Cidr } from '../net/ipv4.ts';
import { formatCidr6, formatIpv6 } from '../net/ipv6.ts';
import type {
  DesiredState,
  FdbSpec,
  NeighSpec,
  PeerEntries,
  RouteSpec,
  StateSetup,
  VxlanDevice,
} from './model.ts';

/** One family's entries of one peer: a route alone, or (vxlan) all three. */
interface Family {
  readonly route: RouteSpec;
  readonly neigh?: NeighSpec;
  readonly fdb?: FdbSpec;
}

/** Every peer's entries of one state, as lists (what a DesiredState holds). */
interface Entries {
  routes: RouteSpec[];
  neighs: NeighSpec[];
  fdb: FdbSpec[];
}

/** A peer's IPv4 half: its subnet and PublicIP. */
interface Peer4 {
  readonly peer: Lease;
  readonly subnet: Cidr;
  readonly publicIp: string;
}

/** A peer's IPv4 half, when it has an IPv4 subnet and a PublicIP (an IPv6-only peer has none). */
function peer4Of(peer: Lease): Peer4 | undefined {
  return peer.subnet && peer.attrs.publicIp
    ? { peer, subnet: peer.subnet, publicIp: peer.attrs.publicIp }
    : undefined;
}

/**
 * An IPv4 route's metric: its destination's block number at its prefix length (10.244.1.0/24 →
 * 717825), so no two of twill's routes share one (peers' subnets never overlap) and the kernel's
 * route adds stay linear (model.ts, RouteSpec.metric). A metric orders only routes to the same
 * destination, so it changes nothing else: the default route (prefix 0) keeps 0.
 */
export function routeMetric(c: Cidr): number {
  return c.prefix === 0 ? 0 : c.base >>> (32 - c.prefix);
}

function directRoute(p: Peer4, choice: IfaceChoice): RouteSpec {
  return {
    dst: formatCidr(p.subnet),
    via: p.publicIp,
    dev: choice.iface.name,
    onlink: false,
    metric: routeMetric(p.subnet),
  };
}

/**
 * One peer's IPv4 entries: host-gw a route via its PublicIP; vxlan (`dev`) a neighbour, an FDB
 * entry and an onlink route, or with DirectRouting to a peer on our link host-gw's route.
 */
function peer4Entries(s: EntriesSetup, p: Peer4): Family | undefined {
  const { choice, vxlan: dev, backend } = s;
  if (!dev || backend.type !== 'vxlan') return { route: directRoute(p, choice) };
  const mac = p.peer.attrs.backendData?.vtepMac;
  if (backend.directRouting && onLink(choice.iface, p.publicIp))
    return { route: directRoute(p, choice) };
  // admission refused vxlan peers without a VtepMAC (admit.ts)
  if (mac === undefined) return undefined;
  const gw = formatIpv4(p.subnet.base);
  return {
    neigh: { dev: dev.name, ip: gw, mac },
    fdb: { dev: dev.name, mac, dst: p.publicIp },
    route: {
      dst: blockText(gw, p.subnet.prefix),
      via: gw,
      dev: dev.name,
      onlink: true,
      metric: routeMetric(p.subnet),
    },
  };
}

function directRoute6(
  peer: Lease,
  subnet6: NonNullable<Lease['subnet6']>,
  choice: IfaceChoice,
): RouteSpec {
  return {
    dst: formatCidr6(subnet6),
    via: peer.attrs.publicIpv6 ?? '',
    dev: choice.iface.name,
    onlink: false,
  };
}

/**
 * One peer's IPv6 entries, when it has an IPv6 subnet and a PublicIPv6 (an IPv4-only peer has
 * none): host-gw a route via its PublicIPv6; vxlan (`vxlan6`) a neighbour, an FDB entry and an
 * onlink route through twill-v6.<VNI>, or with DirectRouting to a peer on our link a direct route.
 */
function peer6Entries(s: EntriesSetup, peer: Lease): Family | undefined {
  const { choice, vxlan6: dev, backend } = s;
  const subnet6 = peer.subnet6;
  const publicIpv6 = peer.attrs.publicIpv6;
  if (!subnet6 || !publicIpv6) return undefined;
  if (!dev || backend.type !== 'vxlan') return { route: directRoute6(peer, subnet6, choice) };
  if (backend.directRouting && onLink6(choice.iface, publicIpv6))
    return { route: directRoute6(peer, subnet6, choice) };
  // a peer without an IPv6 VtepMAC (no IPv6 vxlan device) cannot be reached through ours
  const mac = peer.attrs.backendData6?.vtepMac;
  if (mac === undefined) return undefined;
  // formatted once: the route's destination is made from it (5,000 IPv6 formats cost 7–12 ms)
  const gw = formatIpv6(subnet6.base);
  return {
    neigh: { dev: dev.name, ip: gw, mac },
    fdb: { dev: dev.name, mac, dst: publicIpv6 },
    route: { dst: blockText(gw, subnet6.prefix), via: gw, dev: dev.name, onlink: true },
  };
}

/** What every peer's entries are built with: our side of each family, and its device. */
export interface EntriesSetup {
  /** the underlay (a direct route goes through it) */
  readonly choice: IfaceChoice;
  readonly backend: NetConfig['backend'];
  /** IPv4 on (not IPv6 only) */
  readonly v4: boolean;
  /** IPv6 on (dual-stack or IPv6 only) */
  readonly v6: boolean;
  readonly vxlan: VxlanDevice | null;
  readonly vxlan6: VxlanDevice | null;
}

/** One peer's entries in both families (what a delta pass adds or removes as a whole). */
export function peerEntries(s: EntriesSetup, peer: Lease): PeerEntries {
  const p4 = s.v4 ? peer4Of(peer) : undefined;
  const e4 = p4 ? peer4Entries(s, p4) : undefined;
  const e6 = s.v6 ? peer6Entries(s, peer) : undefined;
  // every field always set, so all peers' entries share one shape
  return {
    lease: peer,
    route: e4?.route,
    neigh: e4?.neigh,
    fdb: e4?.fdb,
    route6: e6?.route,
    neigh6: e6?.neigh,
    fdb6: e6?.fdb,
  };
}

/**
 * Each peer's entries, reused by lease object across passes: they depend only on the lease, on
 * what `Desired` fixes (config, interface choice) and on which families and devices are on (`key`;
 * a change there starts afresh), so a pass after one lease changed builds one peer's entries, not
 * 5,000.
 */
export interface EntriesMemo {
  key?: string;
  entries: WeakMap<Lease, PeerEntries>;
}

/**
 * Peers' entries as one state's lists: every IPv4 route, neighbour and FDB entry, then every IPv6
 * one (the order desiredState lists them, passes apply them and tests read them).
 */
export function joinEntries(
  peers: readonly PeerEntries[],
): Pick<DesiredState, 'routes' | 'neighs' | 'fdb'> {
  const all: Entries = { routes: [], neighs: [], fdb: [] };
  for (const p of peers) pushEntries(all, p.route, p.neigh, p.fdb);
  for (const p of peers) pushEntries(all, p.route6, p.neigh6, p.fdb6);
  return all;
}

function pushEntries(
  to: Entries,
  route: RouteSpec | undefined,
  neigh: NeighSpec | undefined,
  fdb: FdbSpec | undefined,
): void {
  if (route) to.routes.push(route);
  if (neigh) to.neighs.push(neigh);
  if (fdb) to.fdb.push(fdb);
}

/** Each of a peer's entries of one kind, both families (IPv4 first). */
export function both<T>(a: T | undefined, b: T | undefined): T[] {
  return a === undefined ? (b === undefined ? [] : [b]) : b === undefined ? [a] : [a, b];
}

/**
 * `setup` with the peers `makePeers` gives and their entries as lists, each made when first read:
 * a delta pass reads only the peers that changed (diff.ts, peerDelta), so the lists of 5,000
 * peers' 15,000 entries are made for the passes that read them (2-3 ms a lease event, 2 cores),
 * and an observed pass makes the peers while its first kernel read runs (reconciler.ts).
 */
export function withEntries(
  setup: StateSetup,
  makePeers: () => readonly PeerEntries[],
): DesiredState {
  let made: readonly PeerEntries[] | undefined;
  const peersNow = (): readonly PeerEntries[] => (made ??= makePeers());
  let lists: Pick<DesiredState, 'routes' | 'neighs' | 'fdb'> | undefined;
  const joined = (): Pick<DesiredState, 'routes' | 'neighs' | 'fdb'> =>
    (lists ??= joinEntries(peersNow()));
  // enumerable own accessors: a spread or a deep comparison sees the lists as values
  return Object.defineProperties(
    { ...setup },
    {
      peers: { enumerable: true, get: peersNow },
      routes: { enumerable: true, get: () => joined().routes },
      neighs: { enumerable: true, get: () => joined().neighs },
      fdb: { enumerable: true, get: () => joined().fdb },
    },
  ) as DesiredState;
}
