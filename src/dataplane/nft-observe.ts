// The masquerade's part of an observed pass when it is not iptables' chains,
// and the other mode's leftovers. In nftables mode ("EnableNFTables"), twill's
// tables are read (`nft -j list table`, one process per family, in parallel
// with observe.ts's reads) instead of the iptables chains; the first full
// pass after a start also reads, tolerantly, twill's iptables chains and
// jumps in both families (an iptables-mode run's), and the table of a family
// that is off, and removes them. In iptables mode the first full pass asks
// `nft list tables` once, tolerantly and only when the nft command exists,
// and removes twill's tables an nftables-mode run left. Reading is here;
// what to do about it is pure (nftMasqOps).
import { describeError } from '../errors.ts';
import { CommandError, isMissingTool, type Runner } from '../exec/runner.ts';
import { diffChain, noChainSpecs, noChainSpecs6 } from './masq.ts';
import type { DesiredState, NftTableName, ObservedChain, Op } from './model.ts';
import {
  diffNftTables,
  NFT_TABLES,
  nftTableLabel,
  wantedNftTables,
  type NftTableSeen,
} from './nft.ts';
import { isNftTableAbsent, parseNftListing, parseNftTableNames } from './nft-parse.ts';
import { readOwnChains } from './observe.ts';

/**
 * Whether nftables mode can work here, asked once at start: `nft -j list tables` runs and prints
 * JSON, which is how every pass reads twill's tables (an nft built without JSON support says
 * "JSON support not compiled-in" and exits 1; a kernel without nf_tables refuses the listing).
 * Undefined when it can; otherwise what is wrong and what to do about it.
 */
export async function nftUnusable(
  runner: Runner,
  signal: AbortSignal,
): Promise<string | undefined> {
  let stdout: string;
  try {
    stdout = (await runner('nft', ['-j', 'list', 'tables'], { signal })).stdout;
  } catch (err) {
    if (signal.aborted) throw err;
    if (isMissingTool(err))
      return 'the nft command is not installed: install nftables (Debian, Ubuntu: apt-get install nftables)';
    if (err instanceof CommandError && /JSON/i.test(err.stderr))
      return `this nft cannot print JSON (\`nft -j list tables\`: ${err.stderr.trim()}), which twill reads its tables in: install an nft built with JSON support (Debian's and Ubuntu's nftables package is)`;
    return `\`nft -j list tables\` failed (${describeError(err)}): check that the kernel has nf_tables (modprobe nf_tables) and that twill runs as root (or with NET_ADMIN) in the node's network namespace`;
  }
  try {
    JSON.parse(stdout);
    return undefined;
  } catch {
    return `\`nft -j list tables\` printed no JSON ("${stdout.trim().slice(0, 64)}"), which twill reads its tables in: install an nft built with JSON support (Debian's and Ubuntu's nftables package is)`;
  }
}

/** `nft -j list table <family> <name>`: the table, or null when it does not exist. */
export async function observeNftTable(
  runner: Runner,
  t: NftTableName,
  signal: AbortSignal,
): Promise<NftTableSeen | null> {
  try {
    const { stdout } = await runner('nft', ['-j', 'list', 'table', t.family, t.name], { signal });
    return parseNftListing(stdout, t);
  } catch (err) {
    if (isNftTableAbsent(err)) return null;
    throw err;
  }
}

/**
 * `nft list tables`: which of twill's tables exist. Tolerant: a failure (no nft command, no
 * nf_tables in the kernel) is none.
 */
export async function listOwnNftTables(
  runner: Runner,
  signal: AbortSignal,
): Promise<NftTableName[]> {
  try {
    return parseNftTableNames((await runner('nft', ['list', 'tables'], { signal })).stdout);
  } catch (err) {
    if (signal.aborted) throw err;
    return [];
  }
}

/**
 * twill's iptables and ip6tables chains, as read (a tool that is not installed holds none;
 * undefined: the read failed).
 */
export interface IptablesLeftovers {
  readonly postrouting: ObservedChain | undefined;
  readonly forward: ObservedChain | undefined;
  readonly postrouting6: ObservedChain | undefined;
  readonly forward6: ObservedChain | undefined;
}

/**
 * nftables mode: twill's chains in iptables and ip6tables, which an iptables-mode run may have
 * left, read tolerantly (observe.ts readOwnChains): a pass removes what it finds and leaves a
 * chain it cannot read as it is, `twill status` shows that one unknown.
 */
export async function readIptablesLeftovers(
  runner: Runner,
  signal: AbortSignal,
): Promise<IptablesLeftovers> {
  const [v4, v6] = await Promise.all(
    [false, true].map((ipv6) => readOwnChains(runner, { ipv6, policy: 'tolerant' }, signal)),
  );
  return {
    postrouting: v4?.postrouting,
    forward: v4?.forward,
    postrouting6: v6?.postrouting,
    forward6: v6?.forward,
  };
}

/** What a pass read of the masquerade's nftables side. */
export interface NftObserved {
  /** tables read, by nftTableLabel (null: absent); a table not read is left as it is */
  readonly tables: ReadonlyMap<string, NftTableSeen | null>;
  /** nftables mode's first full pass: twill's iptables chains an iptables-mode run may have left */
  readonly iptables?: IptablesLeftovers;
}

export interface NftReadOptions {
  /** "EnableNFTables": twill's tables hold the masquerade */
  readonly nftables: boolean;
  /**
   * the first full pass after a start: the other mode's leftovers (and in nftables mode, the
   * table of a family that is off) are read too, tolerantly
   */
  readonly leftovers: boolean;
  /** iptables mode: the nft command exists (without it, no nftables table can be there) */
  readonly nftCommand?: boolean;
}

/**
 * Reads the masquerade's nftables side for a pass over `want`: in nftables mode the tables of the
 * families that are on (a failed read fails the pass), with `leftovers` the others and twill's
 * iptables chains too (a failed read is nothing there); in iptables mode only with `leftovers`
 * (and the nft command): which of twill's tables exist. Reads run in parallel.
 */
export async function observeNft(
  runner: Runner,
  want: Pick<DesiredState, 'masq' | 'masq6'>,
  o: NftReadOptions,
  signal: AbortSignal,
): Promise<NftObserved> {
  const tolerant = <T>(read: Promise<T>, none: T): Promise<T> =>
    read.catch((err: unknown) => {
      if (signal.aborted) throw err;
      return none;
    });
  if (!o.nftables) {
    if (!o.leftovers || o.nftCommand !== true) return { tables: new Map() };
    const found = await listOwnNftTables(runner, signal);
    return {
      tables: new Map(found.map((t) => [nftTableLabel(t), { ...t, chains: [], others: 0 }])),
    };
  }
  const on = new Set(wantedNftTables(want.masq, want.masq6).map(nftTableLabel));
  const read = NFT_TABLES.filter((t) => on.has(nftTableLabel(t)) || o.leftovers);
  const [tables, iptables] = await Promise.all([
    Promise.all(
      read.map((t) => {
        const seen = observeNftTable(runner, t, signal);
        return on.has(nftTableLabel(t)) ? seen : tolerant(seen, null);
      }),
    ),
    o.leftovers ? readIptablesLeftovers(runner, signal) : undefined,
  ]);
  return {
    tables: new Map(read.map((t, i) => [nftTableLabel(t), tables[i] ?? null])),
    ...(iptables ? { iptables } : {}),
  };
}

/**
 * The ops that make the masquerade's nftables side right (pure): in nftables mode, the wanted
 * tables replaced where they differ and the others read deleted, and twill's iptables chains and
 * jumps read removed; in iptables mode (`nftables` false), the tables read deleted.
 */
export function nftMasqOps(
  want: Pick<DesiredState, 'masq' | 'masq6'>,
  seen: NftObserved,
  o: { readonly nftables: boolean },
): Op[] {
  const tables = o.nftables ? wantedNftTables(want.masq, want.masq6) : [];
  const ops: Op[] = diffNftTables(tables, seen.tables);
  const ipt = seen.iptables;
  if (ipt === undefined) return ops;
  const [none, none6] = [noChainSpecs(), noChainSpecs6()];
  return [
    ...ops,
    ...(ipt.postrouting ? diffChain(none.postrouting, ipt.postrouting) : []),
    ...(ipt.forward ? diffChain(none.forward, ipt.forward) : []),
    ...(ipt.postrouting6 ? diffChain(none6.postrouting, ipt.postrouting6) : []),
    ...(ipt.forward6 ? diffChain(none6.forward, ipt.forward6) : []),
  ];
}
