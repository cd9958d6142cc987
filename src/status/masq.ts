// `twill status`, the masquerade's part (pure): where twill keeps it and whether the kernel holds
// it as twill writes it. In iptables mode, twill's chains against what a pass wants (the chains of
// a family that is off must not exist); twill's nftables tables must not exist (an nftables-mode
// run's, which the daemon's first pass removes). In nftables mode ("EnableNFTables"), twill's
// tables of the families that are on against what a pass writes (nft.ts), the table of a family
// that is off must not exist, and neither may twill's chains (an iptables-mode run's). Everything
// is said per chain or table, and as the lines of the status diff.
import {
  chainSpecs,
  chainSpecs6,
  diffChain,
  noChainSpecs,
  noChainSpecs6,
  type ChainSpec,
} from '../dataplane/masq.ts';
import type {
  DesiredState,
  NftTableName,
  ObservedChain,
  ObservedState,
} from '../dataplane/model.ts';
import {
  NFT_TABLES,
  nftTableDiffers,
  nftTableLabel,
  wantedNftTables,
  type NftTableSeen,
} from '../dataplane/nft.ts';
import type { IptablesLeftovers } from '../dataplane/nft-observe.ts';

export interface ChainDiff {
  readonly missing: string[];
  readonly extra: string[];
  readonly different: string[];
}

/**
 * One chain for people, from the same typed ops a pass would apply: rules missing, extra
 * (duplicates included), out of order; the jump to it. `off` says why a chain that must not exist
 * must not (--ip-masq is off, IPv4 is off, nftables mode).
 */
export function chainDiff(
  want: ChainSpec,
  seen: ObservedChain,
  off = '--ip-masq is off',
): ChainDiff {
  const out: ChainDiff = { missing: [], extra: [], different: [] };
  const ops = diffChain(want, seen);
  // ip6tables' chains carry the same names: their lines say which tool they are in
  const table = want.ipv6 ? `ip6tables ${want.table}` : want.table;
  for (const op of ops) {
    if (op.kind === 'chain') {
      const name = `chain ${table} ${op.chain}`;
      if (op.action === 'add') out.missing.push(name);
      else if (op.action === 'delete') out.extra.push(`${name} (${off})`);
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
      `${table}: ${seen.jumps.length} jump(s) from ${want.parent} to ${want.chain}, want ${want.rules === null ? 'none' : 'one of ours'}`,
    );
  return out;
}

/** A chain's or a table's differences in a few words: "ok", "1 missing, 2 extra", "unknown". */
export function chainState(d: ChainDiff | undefined): string {
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

type Specs = { postrouting: ChainSpec; forward: ChainSpec };

/** A family's two chains against `specs` (undefined where not read, or no desired state). */
function diffs(
  specs: Specs | undefined,
  post: ObservedChain | undefined,
  fwd: ObservedChain | undefined,
  off?: string,
): [ChainDiff | undefined, ChainDiff | undefined] {
  return [
    specs && post ? chainDiff(specs.postrouting, post, off) : undefined,
    specs && fwd ? chainDiff(specs.forward, fwd, off) : undefined,
  ];
}

export interface MasqInput {
  /** "EnableNFTables": the masquerade lives in twill's nftables tables */
  readonly nftables: boolean;
  /** undefined: no lease of ours, so nothing is wanted (every state unknown) */
  readonly want: DesiredState | undefined;
  /** iptables mode: twill's chains, as a pass reads them */
  readonly observed: ObservedState;
  /** nftables mode: twill's chains, read as an iptables-mode run's leftovers */
  readonly leftovers?: IptablesLeftovers;
  /** twill's tables as read, by nftTableLabel (null: absent); a table not read is not in it */
  readonly nftTables?: ReadonlyMap<string, NftTableSeen | null>;
}

export interface MasqView {
  /** twill's chains in iptables and ip6tables (undefined: not read, or no desired state) */
  readonly post: ChainDiff | undefined;
  readonly fwd: ChainDiff | undefined;
  readonly post6: ChainDiff | undefined;
  readonly fwd6: ChainDiff | undefined;
  /**
   * twill's tables: "ok", "missing", "N difference(s)" (wanted); "none", "extra" (not wanted);
   * "unknown" (not read, or no desired state)
   */
  readonly tables: { readonly ipv4: string; readonly ipv6: string };
  /** the tables' lines for the status diff */
  readonly tableDiff: ChainDiff;
}

/** Why a table that is there must not be. */
function offReason(t: NftTableName, nftables: boolean): string {
  if (!nftables) return 'iptables mode';
  return t.family === 'ip' ? 'IPv4 is off' : 'IPv6 is off';
}

/** twill's two tables against the wanted ones: a state each, and the diff's lines. */
function tableView(i: MasqInput): Pick<MasqView, 'tables' | 'tableDiff'> {
  const d: ChainDiff = { missing: [], extra: [], different: [] };
  const wanted = i.nftables && i.want ? wantedNftTables(i.want.masq, i.want.masq6) : [];
  const state = (t: NftTableName): string => {
    const label = nftTableLabel(t);
    const seen = i.nftTables?.get(label);
    if (!i.want || seen === undefined) return 'unknown';
    const w = wanted.find((x) => nftTableLabel(x) === label);
    if (!w) {
      if (seen === null) return 'none';
      d.extra.push(`${label} (${offReason(t, i.nftables)})`);
      return 'extra';
    }
    if (seen === null) {
      d.missing.push(label);
      return 'missing';
    }
    const differs = nftTableDiffers(w, seen);
    d.different.push(...differs.map((x) => (x.startsWith(label) ? x : `${label}: ${x}`)));
    return differs.length === 0 ? 'ok' : `${differs.length} difference(s)`;
  };
  const [t4, t6] = NFT_TABLES;
  const tables = { ipv4: t4 ? state(t4) : 'unknown', ipv6: t6 ? state(t6) : 'unknown' };
  return { tables, tableDiff: d };
}

/** The masquerade, chain by chain and table by table, in the node's mode. */
export function masqView(i: MasqInput): MasqView {
  const { want, observed: o } = i;
  if (i.nftables) {
    // twill's chains must not exist in nftables mode; those an iptables-mode run left show extra
    const l = i.leftovers;
    const [post, fwd] = diffs(want && noChainSpecs(), l?.postrouting, l?.forward, 'nftables mode');
    const [post6, fwd6] = diffs(
      want && noChainSpecs6(),
      l?.postrouting6,
      l?.forward6,
      'nftables mode',
    );
    return { post, fwd, post6, fwd6, ...tableView(i) };
  }
  // IPv4 off: twill's iptables chains must not exist; ones an earlier IPv4 run left show as extra
  const [post, fwd] = want?.masq
    ? diffs(chainSpecs(want.masq), o.postrouting, o.forward)
    : diffs(want ? noChainSpecs() : undefined, o.postrouting, o.forward, 'IPv4 is off');
  const [post6, fwd6] = diffs(
    want?.masq6 ? chainSpecs6(want.masq6) : undefined,
    o.postrouting6,
    o.forward6,
  );
  return { post, fwd, post6, fwd6, ...tableView(i) };
}
