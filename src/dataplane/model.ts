// The dataplane's data model: what the kernel should hold (desired), what it
// holds (observed), and the ordered changes between them (plan). Plain data,
// so backends, diff and rendering stay pure and testable without root.
import type { Cidr } from '../net/ipv4.ts';

/** Routes twill installs carry this protocol number; GC removes only these. */
export const ROUTE_PROTOCOL = 151;

/** twill's vxlan devices are named `twill.<VNI>`; only devices with this prefix are twill's. */
export const DEVICE_PREFIX = 'twill.';

/** Bytes vxlan adds to a packet over IPv4 (outer IP 20, UDP 8, vxlan 8, inner Ethernet 14). */
export const VXLAN_OVERHEAD = 50;

export interface VxlanDevice {
  readonly name: string;
  readonly vni: number;
  /** our public IP, the tunnel's source address */
  readonly local: string;
  /** the underlay interface the device is bound to */
  readonly underlay: string;
  readonly port: number;
  readonly learning: boolean;
  readonly gbp: boolean;
  readonly mtu: number;
  readonly mac: string;
  /** `<our subnet network address>/32` */
  readonly address: string;
}

export interface RouteSpec {
  /** destination CIDR text, e.g. "10.244.1.0/24" */
  readonly dst: string;
  readonly via: string;
  readonly dev: string;
  readonly onlink: boolean;
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

export interface DesiredState {
  /** the vxlan device, or null for host-gw (any twill.* device is then removed) */
  readonly vxlan: VxlanDevice | null;
  readonly routes: readonly RouteSpec[];
  readonly neighs: readonly NeighSpec[];
  readonly fdb: readonly FdbSpec[];
  readonly masq: MasqSpec;
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
  /** IPv4 addresses as "a.b.c.d/len" */
  readonly addresses: readonly string[];
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
  /** vxlan devices named twill.* */
  readonly links: readonly ObservedLink[];
  /** routes in the main table with ROUTE_PROTOCOL */
  readonly routes: readonly RouteSpec[];
  readonly neighs: readonly ObservedNeigh[];
  readonly fdb: readonly ObservedFdb[];
  /** twill's chains; undefined when the pass did not read them (then they are left as they are) */
  readonly postrouting: ObservedChain | undefined;
  readonly forward: ObservedChain | undefined;
}

export type OpAction = 'add' | 'change' | 'delete';

/**
 * When an op runs. Three batches keep flannel's per-peer order (neighbour,
 * FDB, route on add; route, FDB, neighbour on delete) with a fixed number of
 * processes: ip-pre (links, route deletes, neighbour adds), bridge (FDB),
 * ip-post (neighbour deletes, route adds, link deletes); iptables is one
 * iptables-restore.
 */
export type Phase = 'ip-pre' | 'bridge' | 'ip-post' | 'iptables';

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
  /** "10.244.1.0/32" */
  readonly address: string;
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
  readonly table: 'nat' | 'filter';
  readonly parent: string;
  readonly chain: string;
  /** the rule without its "-A <parent> " head, as `iptables -S` prints it */
  readonly rule: string;
}

/** One change of a plan: typed, rendered to batch text only by render.ts. */
export type Op = LinkOp | AddrOp | RouteOp | NeighOp | FdbOp | ChainOp | JumpOp;
export type OpKind = Op['kind'];

/** An op's kind as logs and metrics name it: the chains and their jumps are the masquerade. */
export function opLabel(op: Op): 'link' | 'addr' | 'route' | 'neigh' | 'fdb' | 'masquerade' {
  return op.kind === 'chain' || op.kind === 'jump' ? 'masquerade' : op.kind;
}
