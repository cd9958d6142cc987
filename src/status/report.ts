// `twill status`, the pure part: from the store's view (config, leases), the
// node's files (subnet.env) and the kernel's view (observed state), build
// the report an operator reads: our lease, the peer table with whether the
// kernel has each peer's entries, the diff between desired and actual
// kernel state, and the masquerade chain state. A dual-stack node shows both
// families: our IPv6 subnet, each peer's and whether the kernel holds its IPv6
// entries, and the ip6tables chains.
import type { NetConfig } from '../config/netconf.ts';
import { desiredState } from '../dataplane/desired.ts';
import { diff } from '../dataplane/diff.ts';
import { chainSpecs, chainSpecs6, diffChain, type ChainSpec } from '../dataplane/masq.ts';
import type { ObservedChain, ObservedState, Op } from '../dataplane/model.ts';
import { opLines } from '../dataplane/render.ts';
import { admitPeers, truncated } from '../lease/admit.ts';
import type { Lease, LeaseRecord } from '../lease/types.ts';
import type { IfaceChoice } from '../net/iface.ts';
import { formatCidr, formatIpv4 } from '../net/ipv4.ts';
import { formatCidr6, formatIpv6 } from '../net/ipv6.ts';

export interface StatusInput {
  readonly config: NetConfig;
  /** our lease, as the store holds it (undefined: not found) */
  readonly self: Lease | undefined;
  readonly records: readonly LeaseRecord[];
  readonly choice: IfaceChoice;
  readonly ipMasq: boolean;
  readonly randomFully: boolean;
  readonly observed: ObservedState;
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
  readonly subnet: string;
  readonly publicIp: string;
  readonly vtepMac: string | null;
  /** "ok", or what is wrong: missing route/neigh/fdb, different …, or why it is skipped */
  readonly kernel: string;
  /** dual-stack peers: the IPv6 subnet, PublicIPv6 and IPv6 VtepMAC (null when absent) */
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
    readonly subnet: string;
    readonly publicIp: string;
    readonly backend: string;
    readonly vtepMac: string | null;
    readonly expiresAt: string | null;
    /** dual-stack: our IPv6 subnet, PublicIPv6 and IPv6 VtepMAC */
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
  readonly masquerade: { readonly postrouting: string; readonly forward: string };
  /** the same chains in ip6tables on a dual-stack node; null when IPv6 is off */
  readonly masquerade6: { readonly postrouting: string; readonly forward: string } | null;
  readonly inSync: boolean;
}

interface ChainDiff {
  readonly missing: string[];
  readonly extra: string[];
  readonly different: string[];
}

/**
 * One chain for people, from the same typed ops a pass would apply: rules missing, extra
 * (duplicates included), out of order; the jump to it.
 */
export function chainDiff(want: ChainSpec, seen: ObservedChain): ChainDiff {
  const out: ChainDiff = { missing: [], extra: [], different: [] };
  const ops = diffChain(want, seen);
  // ip6tables' chains carry the same names: their lines say which tool they are in
  const table = want.ipv6 ? `ip6tables ${want.table}` : want.table;
  for (const op of ops) {
    if (op.kind === 'chain') {
      const name = `chain ${table} ${op.chain}`;
      if (op.action === 'add') out.missing.push(name);
      else if (op.action === 'delete') out.extra.push(`${name} (--ip-masq is off)`);
      else {
        out.missing.push(...op.missing.map((r) => `${table}: ${r}`));
        out.extra.push(...op.extra.map((r) => `${table}: ${r}`));
        if (op.reordered) out.different.push(`${table} ${op.chain}: rules out of order`);
      }
    }
    if (op.kind === 'jump' && op.action === 'add')
      out.missing.push(`${table}: -A ${op.parent} ${op.rule}`);
  }
  const dropped = ops.filter((o) => o.kind === 'jump' && o.action === 'delete').length;
  if (dropped > 0)
    out.extra.push(
      `${table}: ${seen.jumps.length} jump(s) from ${want.parent} to ${want.chain}, want one of ours`,
    );
  return out;
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

/** An op's address family: IPv6 when its route dst, neighbour or FDB destination has a ':'. */
function opFamily(op: Op): Family | undefined {
  if (op.kind === 'route') return op.route.dst.includes(':') ? 6 : 4;
  if (op.kind === 'neigh') return op.neigh.ip.includes(':') ? 6 : 4;
  if (op.kind === 'fdb') return (op.fdb.dst ?? '').includes(':') ? 6 : 4;
  return undefined;
}

/** Whether an op (re)writes one of this peer's entries of one family. */
function forPeer(op: Op, lease: Lease, family: Family): boolean {
  if (op.action === 'delete' || opFamily(op) !== family) return false;
  const s6 = lease.subnet6;
  if (family === 6 && !s6) return false;
  const dst = family === 6 && s6 ? formatCidr6(s6) : formatCidr(lease.subnet);
  const gw = family === 6 && s6 ? formatIpv6(s6.base) : formatIpv4(lease.subnet.base);
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

function chainState(d: ChainDiff | undefined): string {
  if (!d) return 'unknown';
  const n = d.missing.length + d.extra.length + d.different.length;
  if (n === 0) return 'ok';
  return [
    d.missing.length ? `${d.missing.length} missing` : '',
    d.extra.length ? `${d.extra.length} extra` : '',
    ...d.different,
  ]
    .filter(Boolean)
    .join(', ');
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
      })
    : undefined;
  const ops = want ? diff(want, i.observed) : [];
  const dual = i.config.ipv6 !== null;
  const rows: PeerRow[] = peers.map((r) => {
    if (!r.ok)
      return {
        key: r.key,
        subnet: '?',
        publicIp: '?',
        vtepMac: null,
        kernel: `refused (malformed): ${truncated(r.reason, 200)}`,
        ...(dual ? { subnet6: null, publicIpv6: null, vtepMac6: null, kernel6: null } : {}),
      };
    const bad = refusedBy.get(r.key);
    const kernelOf = (family: Family): string =>
      bad !== undefined
        ? `refused (${bad.reason}): ${bad.detail}`
        : want
          ? peerKernel(r.lease, ops, family)
          : 'unknown (no lease of ours)';
    const s6 = r.lease.subnet6;
    return {
      key: r.key,
      subnet: formatCidr(r.lease.subnet),
      publicIp: r.lease.attrs.publicIp,
      vtepMac: r.lease.attrs.backendData?.vtepMac ?? null,
      kernel: kernelOf(4),
      ...(dual
        ? {
            subnet6: s6 ? formatCidr6(s6) : null,
            publicIpv6: r.lease.attrs.publicIpv6,
            vtepMac6: r.lease.attrs.backendData6?.vtepMac ?? null,
            kernel6: s6 ? (bad !== undefined ? `refused (${bad.reason})` : kernelOf(6)) : null,
          }
        : {}),
    };
  });
  const diffs = (
    specs: ReturnType<typeof chainSpecs> | undefined,
    post: ObservedChain | undefined,
    fwd: ObservedChain | undefined,
  ): [ChainDiff | undefined, ChainDiff | undefined] => [
    specs && post ? chainDiff(specs.postrouting, post) : undefined,
    specs && fwd ? chainDiff(specs.forward, fwd) : undefined,
  ];
  const o = i.observed;
  const [post, fwd] = diffs(want ? chainSpecs(want.masq) : undefined, o.postrouting, o.forward);
  const [post6, fwd6] = diffs(
    want?.masq6 ? chainSpecs6(want.masq6) : undefined,
    o.postrouting6,
    o.forward6,
  );
  return {
    daemon: i.daemon,
    lease: self
      ? {
          key: self.key,
          subnet: formatCidr(self.subnet),
          publicIp: self.attrs.publicIp,
          backend: self.attrs.backendType,
          vtepMac: self.attrs.backendData?.vtepMac ?? null,
          expiresAt: expiry(self.expiresAt),
          ...(dual
            ? {
                subnet6: self.subnet6 ? formatCidr6(self.subnet6) : null,
                publicIpv6: self.attrs.publicIpv6,
                vtepMac6: self.attrs.backendData6?.vtepMac ?? null,
              }
            : {}),
        }
      : null,
    peers: rows,
    diff: bucket(
      ops,
      [post, fwd, post6, fwd6].filter((c): c is ChainDiff => c !== undefined),
    ),
    masquerade: { postrouting: chainState(post), forward: chainState(fwd) },
    masquerade6: dual ? { postrouting: chainState(post6), forward: chainState(fwd6) } : null,
    inSync: want !== undefined && ops.length === 0,
  };
}
