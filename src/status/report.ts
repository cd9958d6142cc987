// `twill status`, the pure part: from the store's view (config, leases), the
// node's files (subnet.env) and the kernel's view (observed state), build
// the report an operator reads: our lease, the peer table with whether the
// kernel has each peer's entries, the diff between desired and actual
// kernel state, and the masquerade chain state.
import type { NetConfig } from '../config/netconf.ts';
import { desiredState } from '../dataplane/backend.ts';
import { diff } from '../dataplane/diff.ts';
import { chainSpecs, type ChainSpec } from '../dataplane/masq.ts';
import type { DesiredState, ObservedChain, ObservedState, Op } from '../dataplane/model.ts';
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
 * One chain, rule by rule: rules missing, extra (duplicates included), out of order; the jump to
 * it.
 */
export function chainDiff(want: ChainSpec, seen: ObservedChain): ChainDiff {
  const out: ChainDiff = { missing: [], extra: [], different: [] };
  const rules = want.rules ?? [];
  if (want.rules !== null && seen.rules === null)
    out.missing.push(`chain ${want.table} ${want.chain}`);
  if (want.rules === null && seen.rules !== null)
    out.extra.push(`chain ${want.table} ${want.chain} (--ip-masq is off)`);
  const left = [...(seen.rules ?? [])];
  for (const r of rules) {
    const at = left.indexOf(r);
    if (at >= 0) left.splice(at, 1);
    else if (seen.rules !== null) out.missing.push(`${want.table}: ${r}`);
  }
  if (want.rules !== null) out.extra.push(...left.map((r) => `${want.table}: ${r}`));
  const kept = (seen.rules ?? []).filter((r) => rules.includes(r));
  if (out.missing.length === 0 && out.extra.length === 0 && kept.some((r, i) => r !== rules[i]))
    out.different.push(`${want.table} ${want.chain}: rules out of order`);
  const jumps = seen.jumps.length;
  if (want.rules !== null && jumps === 0)
    out.missing.push(`${want.table}: -A ${want.parent} ${want.jump}`);
  if (jumps > (want.rules === null ? 0 : 1))
    out.extra.push(`${want.table}: ${jumps} jumps from ${want.parent} to ${want.chain}`);
  return out;
}

function bucket(ops: readonly Op[], chains: readonly ChainDiff[]): StatusReport['diff'] {
  const missing: string[] = [];
  const extra: string[] = [];
  const different: string[] = [];
  for (const op of ops)
    if (op.phase !== 'iptables')
      (op.action === 'add' ? missing : op.action === 'delete' ? extra : different).push(op.line);
  for (const c of chains) {
    missing.push(...c.missing);
    extra.push(...c.extra);
    different.push(...c.different);
  }
  return { missing, extra, different };
}

/** What the kernel lacks for one peer, from the ops a pass would apply. */
function peerKernel(lease: Lease, want: DesiredState, ops: readonly Op[]): string {
  const problem = want.problems.find((p) => p.key === lease.key);
  if (problem) return `refused (${problem.code}): ${problem.reason}`;
  const subnet = formatCidr(lease.subnet);
  const gw = formatIpv4(lease.subnet.base);
  const mac = lease.attrs.backendData?.vtepMac ?? '\u0000';
  const mine = ops.filter(
    (o) =>
      o.action !== 'delete' &&
      (o.line.includes(` ${subnet} `) ||
        o.line.includes(`neigh replace ${gw} `) ||
        o.line.includes(` ${mac} `)),
  );
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
          ? peerKernel(r.lease, want, ops)
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
