// The dataplane's data model: what the kernel should hold (desired), what it
// holds (observed), and the ordered changes between them (plan). Plain data,
// so backends, diff and rendering stay pure and testable without root.
import type { Lease } from '../lease/types.ts';
import type { Cidr } from '../net/ipv4.ts';
import type { Cidr6 } from '../net/ipv6.ts';

/** Routes twill installs carry this protocol number; GC removes only these. */
export const ROUTE_PROTOCOL = 151;

/** twill's vxlan devices are named `twill.<VNI>`; only devices with this prefix are twill's. */
export const DEVICE_PREFIX = 'twill.';

/**
 * twill's IPv6 vxlan devices are named `twill-v6.<VNI>` (flannel's are flannel-v6.<VNI>); only
 * devices with this prefix are twill's too.
 */
export const DEVICE6_PREFIX = 'twill-v6.';

/** Bytes vxlan adds to a packet over IPv4 (outer IP 20, UDP 8, vxlan 8, inner Ethernet 14). */
export const VXLAN_OVERHEAD = 50;

/** Bytes vxlan adds to a packet over IPv6 (outer IP 40, UDP 8, vxlan 8, inner Ethernet 14). */
export const VXLAN6_OVERHEAD = 70;

export interface VxlanDevice {
  readonly name: string;
  readonly vni: number;
  /**
   * the tunnel's source address: our IPv4 underlay address, or for twill-v6.<VNI> our IPv6 one
   * (which also makes it an IPv6 device: see isIpv6Device)
   */
  readonly local: string;
  /** the underlay interface the device is bound to */
  readonly underlay: string;
  readonly port: number;
  readonly learning: boolean;
  readonly gbp: boolean;
  readonly mtu: number;
  readonly mac: string;
  /** `<our subnet network address>/32` (IPv6: `<our IPv6 subnet base>/128`) */
  readonly address: string;
}

/** Whether a device tunnels over IPv6 (twill-v6.<VNI>): its source address is an IPv6 one. */
export function isIpv6Device(d: Pick<VxlanDevice, 'local'>): boolean {
  return d.local.includes(':');
}

export interface RouteSpec {
  /** destination CIDR text, e.g. "10.244.1.0/24" or "fd00:0:0:1::/64" (canonical) */
  readonly dst: string;
  readonly via: string;
  readonly dev: string;
  readonly onlink: boolean;
  /**
   * IPv4: the route's metric (priority), absent for 0. twill gives each of its IPv4 routes its
   * destination's block number (peer-entries.ts, routeMetric): the kernel shares one structure
   * between routes whose protocol, scope, source, metric and device match, and finds it through a
   * hash that leaves the gateway out, so 5,000 routes through one device at one metric make each
   * add walk every earlier one (quadratic); a metric of its own keeps each add short. IPv6 routes
   * keep the kernel's default and leave this unset.
   */
  readonly metric?: number;
}

/** A main-table route of another program: its destination and device. */
export interface ForeignRoute {
  readonly dst: string;
  readonly dev: string;
}

export interface NeighSpec {
  readonly dev: string;
  readonly ip: string;
  readonly mac: string;
}

export interface FdbSpec {
  readonly dev: string;
  readonly mac: string;
  readonly dst: string;
}

/** The masquerade and forward chains' inputs (rules are derived in masq.ts). */
export interface MasqSpec {
  readonly ipMasq: boolean;
  readonly network: Cidr;
  readonly subnet: Cidr;
  readonly randomFully: boolean;
}

/** The same for IPv6 (ip6tables): the IPv6 network and our IPv6 subnet. */
export interface MasqSpec6 {
  readonly ipMasq: boolean;
  readonly network: Cidr6;
  readonly subnet: Cidr6;
  readonly randomFully: boolean;
}

/**
 * One family's pod network and our subnet in it, when both are known. An address on a bridge inside
 * the network and outside our subnet is a gateway the CNI plugin put there for an earlier lease of
 * ours, which nothing else removes: its connected route would take that subnet's traffic and make
 * twill's route to the peer that holds it now fail (IPv4: "File exists"; IPv6, onlink through
 * twill-v6: "Nexthop has invalid gateway"), so an observed pass deletes it.
 */
export type PodRange =
  | { readonly family: 4; readonly bridge: string; readonly network: Cidr; readonly subnet: Cidr }
  | {
      readonly family: 6;
      readonly bridge: string;
      readonly network: Cidr6;
      readonly subnet: Cidr6;
    };

/**
 * One peer's route, neighbour and FDB entry in each family, built from its lease: host-gw (and
 * vxlan's DirectRouting) a route alone, vxlan all three, a family the peer or we lack none. Single
 * fields, not lists: a peer never has two of a kind in one family, and at 5,000 dual-stack peers
 * six lists of one entry each cost 1.6 MiB more than the entries.
 */
export interface PeerEntries {
  /** the admitted lease they were built from (the peer tracker keeps one object per lease) */
  readonly lease: Lease;
  readonly route: RouteSpec | undefined;
  readonly neigh: NeighSpec | undefined;
  readonly fdb: FdbSpec | undefined;
  /** the IPv6 ones, kept apart so the state lists IPv4 first */
  readonly route6: RouteSpec | undefined;
  readonly neigh6: NeighSpec | undefined;
  readonly fdb6: FdbSpec | undefined;
}

export interface DesiredState {
  /**
   * the IPv4 vxlan device twill.<VNI>, or null for host-gw or with IPv4 off (IPv6 only): any
   * twill.* device is then removed
   */
  readonly vxlan: VxlanDevice | null;
  /**
   * vxlan with IPv6 on (dual-stack or IPv6 only): the IPv6 device twill-v6.<VNI>; null otherwise
   * (any twill-v6.* device is then removed)
   */
  readonly vxlan6: VxlanDevice | null;
  /** both families' routes, neighbours and FDB entries (IPv4 first) */
  readonly routes: readonly RouteSpec[];
  readonly neighs: readonly NeighSpec[];
  readonly fdb: readonly FdbSpec[];
  /**
   * the iptables chains' inputs; null when IPv4 is off (IPv6 only): then the IPv4 chains must not
   * exist, and no IPv4 route or chain is read but by the first full pass, which removes what an
   * IPv4 or dual-stack run left
   */
  readonly masq: MasqSpec | null;
  /**
   * IPv6 on (dual-stack or IPv6 only): the ip6tables chains' inputs; null when IPv6 is off (then no
   * IPv6 route or chain is read or touched but by the first full pass)
   */
  readonly masq6: MasqSpec6 | null;
  /**
   * the families whose pod network and our subnet in it are known (none: no bridge address is
   * ever touched)
   */
  readonly podRanges: readonly PodRange[];
  /**
   * the same routes, neighbours and FDB entries peer by peer, each peer's lease with them (absent
   * when the state was not built from the daemon's peer set): a delta pass tells the peers that
   * changed by their lease objects and diffs only their entries (diff.ts, peerDelta)
   */
  readonly peers?: readonly PeerEntries[];
}

/** A state's parts other than its entries (peer-entries.ts, withEntries, completes one). */
export type StateSetup = Omit<DesiredState, 'routes' | 'neighs' | 'fdb' | 'peers'>;

/** Those parts of `s`, and nothing of its entries (which a spread would read). */
export function setupOf(s: DesiredState): StateSetup {
  return { vxlan: s.vxlan, vxlan6: s.vxlan6, masq: s.masq, masq6: s.masq6, podRanges: s.podRanges };
}

export interface ObservedLink {
  readonly name: string;
  readonly vni: number | undefined;
  readonly local: string | undefined;
  readonly underlay: string | undefined;
  readonly port: number | undefined;
  readonly learning: boolean;
  readonly gbp: boolean;
  readonly mtu: number;
  readonly mac: string;
  readonly up: boolean;
  /**
   * the addresses of the device's family: IPv4 as "a.b.c.d/len" (twill.*), global IPv6 as
   * "addr/len" (twill-v6.*)
   */
  readonly addresses: readonly string[];
}

/** An address on a device that is not twill's (a bridge), as "addr/len" (IPv6 canonical). */
export interface ObservedAddr {
  readonly dev: string;
  readonly address: string;
}

export interface ObservedNeigh extends NeighSpec {
  readonly permanent: boolean;
}

export interface ObservedFdb {
  readonly dev: string;
  readonly mac: string;
  readonly dst: string | undefined;
  readonly permanent: boolean;
}

/**
 * One of twill's chains: the parent's rules that jump to it (as `-S` prints them) and its own rules
 * (null: chain absent).
 */
export interface ObservedChain {
  readonly jumps: readonly string[];
  readonly rules: readonly string[] | null;
}

export interface ObservedState {
  /** vxlan devices named twill.* or twill-v6.* */
  readonly links: readonly ObservedLink[];
  /**
   * routes in the main table with ROUTE_PROTOCOL (IPv6 ones only when IPv6 was read, IPv4 ones
   * only when IPv4 was)
   */
  readonly routes: readonly RouteSpec[];
  /**
   * the destinations of the main table's routes of other programs (any other protocol), of the
   * families read; absent when not read. A peer's route whose destination is among them goes in
   * at metric 0 (diff.ts), so another program's metric-0 route makes its add fail, visibly, rather
   * than win over twill's in silence.
   */
  readonly foreignRoutes?: readonly ForeignRoute[];
  readonly neighs: readonly ObservedNeigh[];
  readonly fdb: readonly ObservedFdb[];
  /** twill's chains; undefined when the pass did not read them (then they are left as they are) */
  readonly postrouting: ObservedChain | undefined;
  readonly forward: ObservedChain | undefined;
  /** the same chains in ip6tables; absent or undefined when not read (IPv6 off) */
  readonly postrouting6?: ObservedChain | undefined;
  readonly forward6?: ObservedChain | undefined;
  /**
   * the addresses on bridges (linkinfo kind "bridge"), both families, from the same read as
   * `links`; absent when not read (then none is touched)
   */
  readonly bridgeAddrs?: readonly ObservedAddr[];
}

/** twill's chains of an observed state: what a full pass reads in the masquerade's lane. */
export type ObservedChains = Pick<
  ObservedState,
  'postrouting' | 'forward' | 'postrouting6' | 'forward6'
>;

export type OpAction = 'add' | 'change' | 'delete';

/**
 * When an op runs. Three batches keep a peer's route last on add and first on
 * delete (FDB, neighbour, route on add; route, neighbour, FDB on delete) with
 * a fixed number of processes: ip-pre (links, route deletes, neighbour
 * deletes), bridge (FDB), ip-post (neighbour adds, route adds, link deletes),
 * so a peer that comes or goes costs one ip and one bridge process; nft is one `nft -f -`
 * transaction per nftables table of twill's (nftables mode, or removing what such a run left),
 * run before iptables when it writes the table and after it when it deletes it (render.ts);
 * iptables is one iptables-restore (and, with IPv6, one ip6tables-restore after it). Both
 * families' ip and bridge lines share the batches: `ip -batch` takes the family from each line's
 * addresses.
 */
export type Phase = 'ip-pre' | 'bridge' | 'ip-post' | 'nft' | 'iptables';

interface OpBase {
  readonly action: OpAction;
  readonly phase: Phase;
}

/** One attribute of an existing device set in place. */
export type LinkSetting =
  { readonly mac: string } | { readonly mtu: number } | { readonly up: true };

/** The vxlan device: created whole, one setting changed, or deleted. */
export type LinkOp =
  | (OpBase & { readonly kind: 'link'; readonly action: 'add'; readonly device: VxlanDevice })
  | (OpBase & {
      readonly kind: 'link';
      readonly action: 'change';
      readonly name: string;
      readonly set: LinkSetting;
    })
  | (OpBase & { readonly kind: 'link'; readonly action: 'delete'; readonly name: string });

export interface AddrOp extends OpBase {
  readonly kind: 'addr';
  readonly action: 'add' | 'delete';
  readonly dev: string;
  /** "10.244.1.0/32"; a stale gateway as the bridge holds it, "10.244.216.1/24" */
  readonly address: string;
  /**
   * a delete of a bridge's gateway from an earlier lease of ours (see PodRange), not of an
   * address on twill's device
   */
  readonly stale?: true;
}

/** add, replace (change) or delete one route; a delete names the route as observed */
export interface RouteOp extends OpBase {
  readonly kind: 'route';
  readonly route: RouteSpec;
}

/** add and change both replace the entry (permanent); a delete needs only ip and dev */
export interface NeighOp extends OpBase {
  readonly kind: 'neigh';
  readonly neigh: NeighSpec;
}

/** add appends a permanent entry; a delete names the entry as observed (dst may be absent) */
export interface FdbOp extends OpBase {
  readonly kind: 'fdb';
  readonly action: 'add' | 'delete';
  readonly fdb: { readonly dev: string; readonly mac: string; readonly dst: string | undefined };
}

/**
 * One of twill's chains made right: add and change declare it (which empties it) and fill it
 * with `rules`, in order, so order and duplicates are repaired together; delete empties and
 * removes it. `missing`, `extra` and `reordered` say what was wrong rule by rule (for people:
 * `twill status`); `rules` is what the chain holds afterwards.
 */
export interface ChainOp extends OpBase {
  readonly kind: 'chain';
  /** ip6tables' chain (absent for iptables, so IPv4 ops are as they always were) */
  readonly ipv6?: true;
  readonly table: 'nat' | 'filter';
  readonly chain: string;
  /** `iptables -S` lines, "-A <chain> …"; empty for a delete */
  readonly rules: readonly string[];
  readonly missing: readonly string[];
  /** rules the chain holds and should not (a duplicate counts once per extra copy) */
  readonly extra: readonly string[];
  /** every rule is there, once, but not in order */
  readonly reordered: boolean;
}

/** The rule in a built-in chain that jumps to one of twill's, added or deleted. */
export interface JumpOp extends OpBase {
  readonly kind: 'jump';
  readonly action: 'add' | 'delete';
  /** in ip6tables (absent for iptables) */
  readonly ipv6?: true;
  readonly table: 'nat' | 'filter';
  readonly parent: string;
  readonly chain: string;
  /** the rule without its "-A <parent> " head, as `iptables -S` prints it */
  readonly rule: string;
}

/** nftables' address families twill writes tables in: ip (IPv4), ip6 (IPv6). */
export type NftFamily = 'ip' | 'ip6';

/** One of twill's nftables tables by name: `table <family> <name>` (nft.ts). */
export interface NftTableName {
  readonly family: NftFamily;
  readonly name: string;
}

/** A base chain of twill's tables, as twill declares it and as `nft -j list` reports it. */
export interface NftChainSpec {
  readonly name: string;
  readonly type: 'nat' | 'filter';
  readonly hook: 'postrouting' | 'forward';
  /** the priority as a number, as JSON reports it (srcnat 100, filter 0) */
  readonly prio: number;
  readonly policy: 'accept';
  /** the rules in nft's syntax (the text nft-parse.ts reads JSON rules back into), in order */
  readonly rules: readonly string[];
}

/** One of twill's nftables tables, whole, as twill wants it. */
export interface NftTableSpec extends NftTableName {
  readonly chains: readonly NftChainSpec[];
}

/**
 * One of twill's nftables tables (nftables mode, src/dataplane/nft.ts) replaced whole (add: it was
 * missing; change: it differed) or deleted.
 */
export interface NftOp extends OpBase {
  readonly kind: 'nft';
  readonly phase: 'nft';
  readonly table: NftTableName;
  /** the table as it is written (its chains and rules); null for a delete */
  readonly want: NftTableSpec | null;
  /** what differed, for people (nft.ts nftTableDiffers); empty for a delete */
  readonly differs: readonly string[];
}

/** One change of a plan: typed, rendered to batch text only by render.ts. */
export type Op = LinkOp | AddrOp | RouteOp | NeighOp | FdbOp | ChainOp | JumpOp | NftOp;
export type OpKind = Op['kind'];

/**
 * An op's kind as logs and metrics name it: the chains, their jumps and the nftables tables are
 * the masquerade.
 */
export function opLabel(op: Op): 'link' | 'addr' | 'route' | 'neigh' | 'fdb' | 'masquerade' {
  return op.kind === 'chain' || op.kind === 'jump' || op.kind === 'nft' ? 'masquerade' : op.kind;
}

/**
 * A peer entry op's address family: IPv6 when its route's destination, its neighbour's address or
 * its FDB entry's tunnel destination has a ':' (an FDB delete without one: IPv6 on the IPv6
 * device, twill-v6.<VNI>); undefined for links, addresses and the masquerade.
 */
export function opFamily(op: Op): 4 | 6 | undefined {
  if (op.kind === 'route') return op.route.dst.includes(':') ? 6 : 4;
  if (op.kind === 'neigh') return op.neigh.ip.includes(':') ? 6 : 4;
  if (op.kind !== 'fdb') return undefined;
  const { dst, dev } = op.fdb;
  return (dst === undefined ? dev.startsWith(DEVICE6_PREFIX) : dst.includes(':')) ? 6 : 4;
}

/**
 * An op's kind as the pass log names it: opLabel's, and a stale bridge gateway's delete as "stale
 * address" (it is not an address of twill's device).
 */
export function opLogLabel(op: Op): string {
  return op.kind === 'addr' && op.stale === true ? 'stale address' : opLabel(op);
}
