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
import { formatCidr, formatIpv4, type Cidr } from '../net/ipv4.ts';
import { formatCidr6, formatIpv6 } from '../net/ipv6.ts';
import type { BackendInput } from './desired.ts';
import type {
  DesiredState,
  FdbSpec,
  NeighSpec,
  PeerEntries,
  RouteSpec,
  VxlanDevice,
} from './model.ts';

/** One family's entries of one peer, as they are built. */
interface Entries {
  routes: RouteSpec[];
  neighs: NeighSpec[];
  fdb: FdbSpec[];
}

const noEntries = (): Entries => ({ routes: [], neighs: [], fdb: [] });

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

function directRoute(p: Peer4, choice: IfaceChoice): RouteSpec {
  return {
    dst: formatCidr(p.subnet),
    via: p.publicIp,
    dev: choice.iface.name,
    onlink: false,
  };
}

/**
 * One peer's IPv4 entries: host-gw a route via its PublicIP; vxlan (`dev`) a neighbour, an FDB
 * entry and an onlink route, or with DirectRouting to a peer on our link host-gw's route.
 */
function peer4Entries(s: EntriesSetup, p: Peer4, out: Entries): void {
  const { input, vxlan: dev, backend } = s;
  if (!dev || backend.type !== 'vxlan') {
    out.routes.push(directRoute(p, input.choice));
    return;
  }
  const mac = p.peer.attrs.backendData?.vtepMac;
  if (backend.directRouting && onLink(input.choice.iface, p.publicIp)) {
    out.routes.push(directRoute(p, input.choice));
    return;
  }
  // admission refused vxlan peers without a VtepMAC (admit.ts)
  if (mac === undefined) return;
  const gw = formatIpv4(p.subnet.base);
  out.neighs.push({ dev: dev.name, ip: gw, mac });
  out.fdb.push({ dev: dev.name, mac, dst: p.publicIp });
  out.routes.push({ dst: formatCidr(p.subnet), via: gw, dev: dev.name, onlink: true });
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
function peer6Entries(s: EntriesSetup, peer: Lease, out: Entries): void {
  const { input, vxlan6: dev, backend } = s;
  const subnet6 = peer.subnet6;
  const publicIpv6 = peer.attrs.publicIpv6;
  if (!subnet6 || !publicIpv6) return;
  if (!dev || backend.type !== 'vxlan') {
    out.routes.push(directRoute6(peer, subnet6, input.choice));
    return;
  }
  if (backend.directRouting && onLink6(input.choice.iface, publicIpv6)) {
    out.routes.push(directRoute6(peer, subnet6, input.choice));
    return;
  }
  // a peer without an IPv6 VtepMAC (no IPv6 vxlan device) cannot be reached through ours
  const mac = peer.attrs.backendData6?.vtepMac;
  if (mac === undefined) return;
  const gw = formatIpv6(subnet6.base);
  out.neighs.push({ dev: dev.name, ip: gw, mac });
  out.fdb.push({ dev: dev.name, mac, dst: publicIpv6 });
  out.routes.push({ dst: formatCidr6(subnet6), via: gw, dev: dev.name, onlink: true });
}

/** What every peer's entries are built with: our side of each family, and its device. */
export interface EntriesSetup {
  readonly input: Omit<BackendInput, 'peers'>;
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
  const e4 = noEntries();
  const e6 = noEntries();
  const p4 = s.v4 ? peer4Of(peer) : undefined;
  if (p4) peer4Entries(s, p4, e4);
  if (s.v6) peer6Entries(s, peer, e6);
  return {
    lease: peer,
    routes: fit(e4.routes),
    neighs: fit(e4.neighs),
    fdb: fit(e4.fdb),
    routes6: fit(e6.routes),
    neighs6: fit(e6.neighs),
    fdb6: fit(e6.fdb),
  };
}

/** No entries: one array shared by every peer that has none of a kind. */
const NONE: readonly never[] = Object.freeze([]);

/**
 * `a` as an array of its own length, kept for as long as the peer's lease lives. An array that
 * grew by push has room for 16 more (V8 grows an empty array's store to 17 slots): 184 bytes for
 * one entry instead of 56, which at 5,000 dual-stack vxlan peers (six lists each) was 3.7 MiB of
 * the daemon's heap.
 */
function fit<T>(a: readonly T[]): readonly T[] {
  return a.length === 0 ? NONE : a.slice();
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
  const all: Entries = noEntries();
  for (const p of peers) pushEntries(all, p.routes, p.neighs, p.fdb);
  for (const p of peers) pushEntries(all, p.routes6, p.neighs6, p.fdb6);
  return all;
}

function pushEntries(
  to: Entries,
  routes: readonly RouteSpec[],
  neighs: readonly NeighSpec[],
  fdb: readonly FdbSpec[],
): void {
  for (const r of routes) to.routes.push(r);
  for (const n of neighs) to.neighs.push(n);
  for (const f of fdb) to.fdb.push(f);
}
