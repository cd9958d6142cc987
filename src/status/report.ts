// `twill status`, the pure part: from the store's view (config, leases), the
// node's files (subnet.env) and the kernel's view (observed state), build
// the report an operator reads: our lease, the peer table with whether the
// kernel has each peer's entries, the diff between desired and actual
// kernel state, and the masquerade's state (masq.ts: twill's chains, or in
// nftables mode twill's tables, and the other mode's leftovers). A dual-stack
// node shows both families: our IPv6 subnet, each peer's and whether the
// kernel holds its IPv6 entries, and the ip6tables chains. An IPv6-only node
// shows the IPv6 family alone: its IPv4 fields are null (the keys stay, so a
// reader of the JSON of an IPv4 or dual-stack node sees what it always did),
// and what an earlier IPv4 run left in the kernel is in the diff as extra.
import type { NetConfig } from '../config/netconf.ts';
import { desiredState } from '../dataplane/desired.ts';
import { diff } from '../dataplane/diff.ts';
import { opFamily, type ObservedState, type Op } from '../dataplane/model.ts';
import type { NftTableSeen } from '../dataplane/nft.ts';
import type { IptablesLeftovers } from '../dataplane/nft-observe.ts';
import { opLines } from '../dataplane/render.ts';
import { admitPeers, truncated } from '../lease/admit.ts';
import type { Lease, LeaseRecord } from '../lease/types.ts';
import type { IfaceChoice } from '../net/iface.ts';
import { formatCidr, formatIpv4 } from '../net/ipv4.ts';
import { formatCidr6, formatIpv6 } from '../net/ipv6.ts';
import { chainState, masqView, type ChainDiff } from './masq.ts';

export interface StatusInput {
  readonly config: NetConfig;
  /** our lease, as the store holds it (undefined: not found) */
  readonly self: Lease | undefined;
  readonly records: readonly LeaseRecord[];
  readonly choice: IfaceChoice;
  readonly ipMasq: boolean;
  readonly randomFully: boolean;
  /** --cni-bridge: where a stale gateway counts as extra (the daemon removes it); default cni0 */
  readonly cniBridge?: string;
  readonly observed: ObservedState;
  /**
   * twill's nftables tables as read, by nftTableLabel (null: absent); one not read (no nft
   * command) is not in it
   */
  readonly nftTables?: ReadonlyMap<string, NftTableSeen | null>;
  /** nftables mode: twill's iptables and ip6tables chains, an iptables-mode run's leftovers */
  readonly leftovers?: IptablesLeftovers;
  /** is a `twill run` for this node running, and what its /readyz said if known */
  readonly daemon: { readonly running: boolean; readonly detail: string };
  /**
   * the store allocates outside twill (Kubernetes podCIDRs): peers of any subnet size are valid, as
   * in the daemon
   */
  readonly anySubnetSize?: boolean;
}

export interface PeerRow {
  readonly key: string;
  /** the IPv4 subnet, PublicIP and VtepMAC; null on an IPv6-only node (IPv4 is off) */
  readonly subnet: string | null;
  readonly publicIp: string | null;
  readonly vtepMac: string | null;
  /**
   * "ok", or what is wrong: missing route/neigh/fdb, different …, or why it is skipped; null on an
   * IPv6-only node, where `kernel6` says it
   */
  readonly kernel: string | null;
  /** dual-stack and IPv6-only peers: the IPv6 subnet, PublicIPv6 and IPv6 VtepMAC (null: absent) */
  readonly subnet6?: string | null;
  readonly publicIpv6?: string | null;
  readonly vtepMac6?: string | null;
  /** the IPv6 entries as `kernel` says the IPv4 ones; null when the peer has no IPv6 subnet */
  readonly kernel6?: string | null;
}

export interface StatusReport {
  readonly daemon: { readonly running: boolean; readonly detail: string };
  readonly lease: {
    readonly key: string;
    /** our IPv4 subnet and PublicIP; null on an IPv6-only node */
    readonly subnet: string | null;
    readonly publicIp: string | null;
    readonly backend: string;
    readonly vtepMac: string | null;
    readonly expiresAt: string | null;
    /** dual-stack and IPv6 only: our IPv6 subnet, PublicIPv6 and IPv6 VtepMAC */
    readonly subnet6?: string | null;
    readonly publicIpv6?: string | null;
    readonly vtepMac6?: string | null;
  } | null;
  readonly peers: readonly PeerRow[];
  /** what a pass would change: each line the kernel lacks, has extra, or has differently */
  readonly diff: {
    readonly missing: readonly string[];
    readonly extra: readonly string[];
    readonly different: readonly string[];
  };
  /**
   * where the masquerade lives: twill's iptables chains, or ("EnableNFTables") twill's nftables
   * tables
   */
  readonly mode: 'iptables' | 'nftables';
  /**
   * twill's chains in iptables; null when IPv4 is off (IPv6 only). In nftables mode the chains
   * must not exist: "ok" says none is there
   */
  readonly masquerade: { readonly postrouting: string; readonly forward: string } | null;
  /** the same chains in ip6tables on a dual-stack or IPv6-only node; null when IPv6 is off */
  readonly masquerade6: { readonly postrouting: string; readonly forward: string } | null;
  /**
   * twill's nftables tables `ip twill-ipv4` and `ip6 twill-ipv6`: "ok", "missing", "N
   * difference(s)" where the mode wants one (nftables mode, the family on); "none" or "extra"
   * where it wants none; "unknown" when not read (no nft command) or nothing is wanted yet
   */
  readonly nftables: { readonly ipv4: string; readonly ipv6: string };
  readonly inSync: boolean;
}

/** The ip and bridge ops sorted for people: what the kernel lacks, has extra, has differently. */
function bucket(ops: readonly Op[], chains: readonly ChainDiff[]): StatusReport['diff'] {
  const missing: string[] = [];
  const extra: string[] = [];
  const different: string[] = [];
  for (const op of ops)
    if (op.phase !== 'iptables')
      (op.action === 'add' ? missing : op.action === 'delete' ? extra : different).push(
        ...opLines(op),
      );
  for (const c of chains) {
    missing.push(...c.missing);
    extra.push(...c.extra);
    different.push(...c.different);
  }
  return { missing, extra, different };
}

type Family = 4 | 6;

/** Whether an op (re)writes one of this peer's entries of one family. */
function forPeer(op: Op, lease: Lease, family: Family): boolean {
  if (op.action === 'delete' || opFamily(op) !== family) return false;
  const s6 = lease.subnet6;
  const s4 = lease.subnet;
  const at =
    family === 6
      ? s6 && { dst: formatCidr6(s6), gw: formatIpv6(s6.base) }
      : s4 && { dst: formatCidr(s4), gw: formatIpv4(s4.base) };
  if (!at) return false;
  const { dst, gw } = at;
  const data = family === 6 ? lease.attrs.backendData6 : lease.attrs.backendData;
  if (op.kind === 'route') return op.route.dst === dst;
  if (op.kind === 'neigh') return op.neigh.ip === gw;
  if (op.kind === 'fdb') return op.fdb.mac === data?.vtepMac;
  return false;
}

/** What the kernel lacks for one peer's entries of one family, from the ops a pass would apply. */
function peerKernel(lease: Lease, ops: readonly Op[], family: Family = 4): string {
  const mine = ops.filter((o) => forPeer(o, lease, family));
  if (mine.length === 0) return 'ok';
  return mine.map((o) => `${o.action === 'add' ? 'missing' : 'different'} ${o.kind}`).join(', ');
}

/** An expiry for people: a time, "never" (Kubernetes leases), or null when unknown. */
function expiry(at: number): string | null {
  if (at === Number.POSITIVE_INFINITY) return 'never';
  return at > 0 ? new Date(at).toISOString() : null;
}

export function buildStatus(i: StatusInput): StatusReport {
  const self = i.self;
  const context = {
    config: i.config,
    self: self?.subnet,
    ...(self ? { selfPublicIp: self.attrs.publicIp } : {}),
    ...(self?.attrs.backendData ? { selfVtepMac: self.attrs.backendData.vtepMac } : {}),
    ...(self?.subnet6
      ? { self6: self.subnet6, selfPublicIpv6: self.attrs.publicIpv6 ?? i.choice.publicIp6 ?? null }
      : {}),
    ...(self?.attrs.backendData6 ? { selfVtepMac6: self.attrs.backendData6.vtepMac } : {}),
    anySubnetSize: i.anySubnetSize === true,
    underlay: i.choice.iface,
  };
  const peers = i.records.filter((r) => r.key !== self?.key);
  // the daemon's admission, over the whole set: a peer refused for a conflict shows as refused here
  // too
  const admission = admitPeers(
    peers.flatMap((r) => (r.ok ? [r.lease] : [])),
    context,
  );
  const refusedBy = new Map(admission.refused.map((x) => [x.lease.key, x.refusal]));
  const valid = admission.admitted;
  const want = self
    ? desiredState({
        config: i.config,
        self,
        peers: valid,
        choice: i.choice,
        ipMasq: i.ipMasq,
        randomFully: i.randomFully,
        ...(i.cniBridge === undefined ? {} : { cniBridge: i.cniBridge }),
      })
    : undefined;
  const ops = want ? diff(want, i.observed) : [];
  // the families the node runs: an IPv6-only node's rows and lease carry null IPv4 fields, and its
  // kernel column is the IPv6 one
  const v4 = i.config.ipv4 !== null;
  const v6 = i.config.ipv6 !== null;
  const rows: PeerRow[] = peers.map((r) => {
    if (!r.ok) {
      const malformed = `refused (malformed): ${truncated(r.reason, 200)}`;
      return {
        key: r.key,
        subnet: v4 ? '?' : null,
        publicIp: v4 ? '?' : null,
        vtepMac: null,
        kernel: v4 ? malformed : null,
        ...(v6
          ? { subnet6: null, publicIpv6: null, vtepMac6: null, kernel6: v4 ? null : malformed }
          : {}),
      };
    }
    const bad = refusedBy.get(r.key);
    const kernelOf = (family: Family): string =>
      bad !== undefined
        ? `refused (${bad.reason}): ${bad.detail}`
        : want
          ? peerKernel(r.lease, ops, family)
          : 'unknown (no lease of ours)';
    const s4 = v4 ? r.lease.subnet : null;
    const s6 = r.lease.subnet6;
    // dual-stack: the refusal's detail is in the IPv4 column already
    const kernel6 = (): string =>
      v4 && bad !== undefined ? `refused (${bad.reason})` : kernelOf(6);
    return {
      key: r.key,
      subnet: s4 ? formatCidr(s4) : null,
      publicIp: v4 ? r.lease.attrs.publicIp : null,
      vtepMac: (v4 ? r.lease.attrs.backendData?.vtepMac : undefined) ?? null,
      // a dual-stack node's admitted IPv6-only peer has no IPv4 entries to judge: null, not "ok"
      kernel: v4 && (s4 !== null || bad !== undefined) ? kernelOf(4) : null,
      ...(v6
        ? {
            subnet6: s6 ? formatCidr6(s6) : null,
            publicIpv6: r.lease.attrs.publicIpv6,
            vtepMac6: r.lease.attrs.backendData6?.vtepMac ?? null,
            // IPv6 only: a peer without an IPv6 subnet is refused, and says so here
            kernel6: s6 || !v4 ? kernel6() : null,
          }
        : {}),
    };
  });
  const m = masqView({
    nftables: i.config.nftables,
    want,
    observed: i.observed,
    ...(i.leftovers ? { leftovers: i.leftovers } : {}),
    ...(i.nftTables ? { nftTables: i.nftTables } : {}),
  });
  const chains = [m.post, m.fwd, m.post6, m.fwd6].filter((c): c is ChainDiff => c !== undefined);
  // what the ops do not carry: the tables, and in nftables mode the chains' leftovers
  const besides = [m.tableDiff, ...(i.config.nftables ? chains : [])];
  const clean = besides.every((d) => d.missing.length + d.extra.length + d.different.length === 0);
  return {
    daemon: i.daemon,
    lease: self
      ? {
          key: self.key,
          subnet: v4 && self.subnet ? formatCidr(self.subnet) : null,
          publicIp: v4 ? self.attrs.publicIp : null,
          backend: self.attrs.backendType,
          vtepMac: (v4 ? self.attrs.backendData?.vtepMac : undefined) ?? null,
          expiresAt: expiry(self.expiresAt),
          ...(v6
            ? {
                subnet6: self.subnet6 ? formatCidr6(self.subnet6) : null,
                publicIpv6: self.attrs.publicIpv6,
                vtepMac6: self.attrs.backendData6?.vtepMac ?? null,
              }
            : {}),
        }
      : null,
    peers: rows,
    diff: bucket(ops, [...chains, m.tableDiff]),
    mode: i.config.nftables ? 'nftables' : 'iptables',
    masquerade: v4 ? { postrouting: chainState(m.post), forward: chainState(m.fwd) } : null,
    masquerade6: v6 ? { postrouting: chainState(m.post6), forward: chainState(m.fwd6) } : null,
    nftables: m.tables,
    inSync: want !== undefined && ops.length === 0 && clean,
  };
}
