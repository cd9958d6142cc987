// What `twill doctor` knows about a node: the facts the gather step reads
// (sysctls, links, routes, iptables and nft listings, subnet.env, the lease store)
// as plain data, and the verdict each check gives. Every read may fail on
// its own (a missing tool, an unreachable store), so each one is a `Read`:
// the checks turn a failed read into a warning and go on.
import type { NetConfig } from '../config/netconf.ts';
import type { RouteSpec } from '../dataplane/model.ts';
import type { NftTableSeen } from '../dataplane/nft.ts';
import type { OwnChains } from '../dataplane/observe.ts';
import type { LeaseRecord } from '../lease/types.ts';
import type { SubnetEnv } from '../subnetenv.ts';

export type Verdict = 'ok' | 'warn' | 'fail';

export interface CheckResult {
  /** short stable name, e.g. "ip-forward" */
  readonly check: string;
  readonly verdict: Verdict;
  readonly detail: string;
  /** one line an operator can act on ("" when there is nothing to do) */
  readonly fix: string;
}

/** One check's verdicts, so each reads as one call: `v.warn(detail, fix)`. */
export function verdicts(
  check: string,
): Record<Verdict, (detail: string, fix?: string) => CheckResult> {
  const of =
    (verdict: Verdict) =>
    (detail: string, fix = ''): CheckResult => ({ check, verdict, detail, fix });
  return { ok: of('ok'), warn: of('warn'), fail: of('fail') };
}

export type Read<T> =
  { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: string };

export const got = <T>(value: T): Read<T> => ({ ok: true, value });
export const failed = <T>(error: string): Read<T> => ({ ok: false, error });

export interface LinkFact {
  readonly name: string;
  /** linkinfo kind ("vxlan", "bridge", "veth", …), undefined for plain devices */
  readonly kind: string | undefined;
  readonly mtu: number;
  /** the bridge this link is a port of */
  readonly master: string | undefined;
  /** IPv4 addresses as "a.b.c.d/len" */
  readonly addresses: readonly string[];
  /** global IPv6 addresses as "addr/len" (absent: not read) */
  readonly addresses6?: readonly string[];
  /** vxlan devices: VNI and UDP port */
  readonly vni: number | undefined;
  readonly port: number | undefined;
  /** vxlan devices: the tunnel's source address (`local`, or `local6` for an IPv6 device) */
  readonly local?: string | undefined;
}

export interface UnderlayFact {
  readonly name: string;
  readonly mtu: number;
  /** the address peers reach us at (--public-ip or the interface's); null when IPv4 is off */
  readonly publicIp: string | null;
}

/**
 * Dual-stack or IPv6 only: the underlay's IPv6 address and the one peers are told (--public-ipv6).
 */
export interface Underlay6Fact {
  readonly ip: string;
  readonly publicIp: string;
}

/** twill's two chains in one tool, as a pass reads them. */
export type ChainsFact = OwnChains;

/** twill's chains in ip6tables (dual-stack or IPv6 only). */
export type Ip6ChainsFact = ChainsFact;

export interface IptablesFact {
  /** the backend the `iptables` command drives (`ip6tables` on an IPv6-only node) */
  readonly backend: 'nf_tables' | 'legacy';
  /** number of rules ("-A" lines) the other backend holds */
  readonly otherRules: Read<number>;
}

/** A chain another overlay daemon leaves behind (FLANNEL-POSTRTG, FLANNEL-FWD). */
export interface ForeignChain {
  /** in ip6tables (read on an IPv6-only node), not iptables */
  readonly ipv6?: boolean;
  readonly table: string;
  readonly chain: string;
  readonly rules: number;
  /** rules in the built-in chain that jump to it */
  readonly jumps: number;
}

/** twill's nftables side: the nft command, and its two tables as `nft -j list table` reads them. */
export interface NftFact {
  /** what `nft --version` prints; undefined when the nft command is not installed */
  readonly version: string | undefined;
  /**
   * `table ip twill-ipv4` and `table ip6 twill-ipv6` (by nftTableLabel), null when absent; empty
   * without the nft command
   */
  readonly tables: ReadonlyMap<string, NftTableSeen | null>;
}

export interface StoreFact {
  readonly config: NetConfig;
  readonly leases: readonly LeaseRecord[];
}

export interface DoctorFacts {
  readonly ipForward: Read<string>;
  /**
   * bridge-nf-call-iptables; undefined when /proc/sys/net/bridge is absent (br_netfilter not
   * loaded)
   */
  readonly bridgeNf: Read<string | undefined>;
  /**
   * rp_filter per conf entry ("all", "default", device names); devices that do not exist are left
   * out
   */
  readonly rpFilter: ReadonlyMap<string, string>;
  /** iptables' backend; ip6tables' on an IPv6-only node (its packets meet only ip6tables) */
  readonly iptables: Read<IptablesFact>;
  /**
   * that tool is not installed (its `--version` could not be spawned): fine in nftables mode,
   * where twill uses no iptables
   */
  readonly noIptables?: true;
  /** `iptables -S INPUT`; `ip6tables -S INPUT` on an IPv6-only node (vxlan runs over IPv6) */
  readonly inputChain: Read<string>;
  /** the foreign chains that exist (on an IPv6-only node those in ip6tables too) */
  readonly foreignChains: Read<readonly ForeignChain[]>;
  readonly links: Read<readonly LinkFact[]>;
  readonly underlay: Read<UnderlayFact>;
  readonly subnetFile: string;
  /** undefined when the file does not exist */
  readonly subnetEnv: Read<SubnetEnv | undefined>;
  readonly store: Read<StoreFact>;
  /** main-table routes carrying twill's protocol */
  readonly ownedRoutes: Read<readonly RouteSpec[]>;
  /** the CNI bridge's name (cni0) */
  readonly bridge: string;
  /**
   * IPv6 on (dual-stack or IPv6 only; undefined on an IPv4-only node, or when it cannot be told):
   * net.ipv6.conf.all.forwarding (undefined when the node has no IPv6 sysctls), the underlay's
   * IPv6 address and twill's ip6tables chains
   */
  readonly ipv6Forward?: Read<string | undefined>;
  readonly underlay6?: Read<Underlay6Fact>;
  readonly ip6Chains?: Read<Ip6ChainsFact>;
  /** IPv6 on: main-table IPv6 routes carrying twill's protocol */
  readonly ownedRoutes6?: Read<readonly RouteSpec[]>;
  /**
   * IPv6 only: bridge-nf-call-ip6tables (undefined when /proc/sys/net/bridge is absent), and
   * twill's chains in iptables, which an earlier IPv4 or dual-stack run may have left; in
   * nftables mode also with IPv4 on, where an iptables-mode run may have left them (a node
   * without iptables then has none). In nftables mode `ip6Chains` too are leftovers, and none
   * without ip6tables.
   */
  readonly bridgeNf6?: Read<string | undefined>;
  readonly ip4Chains?: Read<ChainsFact>;
  /** the nft command and twill's nftables tables, read in either mode */
  readonly nft?: Read<NftFact>;
}
