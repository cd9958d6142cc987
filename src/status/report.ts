// `twill status`, the pure part: from the store's view (config, leases), the
// node's files (subnet.env) and the kernel's view (observed state), build
// the report an operator reads: our lease, the peer table with whether the
// kernel has each peer's entries, the diff between desired and actual
// kernel state, and the masquerade chain state.
import type { NetConfig } from '../config/netconf.ts';
import { desiredState } from '../dataplane/desired.ts';
import { diff } from '../dataplane/diff.ts';
import { chainSpecs, diffChain, type ChainSpec } from '../dataplane/masq.ts';
import type { ObservedChain, ObservedState, Op } from '../dataplane/model.ts';
import { opLines } from '../dataplane/render.ts';
import { admitPeers, truncated } from '../lease/admit.ts';
import type { Lease, LeaseRecord } from '../lease/types.ts';
import type { IfaceChoice } from '../net/iface.ts';
import { formatCidr, formatIpv4 } from '../net/ipv4.ts';

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
  } | null;
  readonly peers: readonly PeerRow[];
  /** what a pass would change: each line the kernel lacks, has extra, or has differently */
  readonly diff: {
    readonly missing: readonly string[];
    readonly extra: readonly string[];
    readonly different: readonly string[];
  };
  readonly masquerade: { readonly postrouting: string; readonly forward: string };
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
  for (const op of ops) {
    if (op.kind === 'chain') {
      const name = `chain ${op.table} ${op.chain}`;
      if (op.action === 'add') out.missing.push(name);
      else if (op.action === 'delete') out.extra.push(`${name} (--ip-masq is off)`);
      else {
        out.missing.push(...op.missing.map((r) => `${op.table}: ${r}`));
        out.extra.push(...op.extra.map((r) => `${op.table}: ${r}`));
        if (op.reordered) out.different.push(`${op.table} ${op.chain}: rules out of order`);
      }
    }
    if (op.kind === 'jump' && op.action === 'add')
      out.missing.push(`${op.table}: -A ${op.parent} ${op.rule}`);
  }
  const dropped = ops.filter((o) => o.kind === 'jump' && o.action === 'delete').length;
  if (dropped > 0)
    out.extra.push(
      `${want.table}: ${seen.jumps.length} jump(s) from ${want.parent} to ${want.chain}, want one of ours`,
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

/** Whether an op (re)writes one of this peer's entries. */
function forPeer(op: Op, lease: Lease): boolean {
  if (op.action === 'delete') return false;
  if (op.kind === 'route') return op.route.dst === formatCidr(lease.subnet);
  if (op.kind === 'neigh') return op.neigh.ip === formatIpv4(lease.subnet.base);
  if (op.kind === 'fdb') return op.fdb.mac === lease.attrs.backendData?.vtepMac;
  return false;
}

/** What the kernel lacks for one peer, from the ops a pass would apply. */
function peerKernel(lease: Lease, ops: readonly Op[]): string {
  const mine = ops.filter((o) => forPeer(o, lease));
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
  const rows: PeerRow[] = peers.map((r) => {
    if (!r.ok)
      return {
        key: r.key,
        subnet: '?',
        publicIp: '?',
        vtepMac: null,
        kernel: `refused (malformed): ${truncated(r.reason, 200)}`,
      };
    const bad = refusedBy.get(r.key);
    const kernel =
      bad !== undefined
        ? `refused (${bad.reason}): ${bad.detail}`
        : want
          ? peerKernel(r.lease, ops)
          : 'unknown (no lease of ours)';
    return {
      key: r.key,
      subnet: formatCidr(r.lease.subnet),
      publicIp: r.lease.attrs.publicIp,
      vtepMac: r.lease.attrs.backendData?.vtepMac ?? null,
      kernel,
    };
  });
  const specs = want ? chainSpecs(want.masq) : undefined;
  const post =
    specs && i.observed.postrouting
      ? chainDiff(specs.postrouting, i.observed.postrouting)
      : undefined;
  const fwd =
    specs && i.observed.forward ? chainDiff(specs.forward, i.observed.forward) : undefined;
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
        }
      : null,
    peers: rows,
    diff: bucket(
      ops,
      [post, fwd].filter((c): c is ChainDiff => c !== undefined),
    ),
    masquerade: { postrouting: chainState(post), forward: chainState(fwd) },
    inSync: want !== undefined && ops.length === 0,
  };
}
