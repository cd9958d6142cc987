// The masquerade's reads for the reconciler's passes: what twill's chains
// (iptables mode) or nftables tables (nftables mode) hold, diffed into the
// ops that make them right. A full pass's masquerade lane reads them all
// (and what a run in the other mode left); a chains pass only the table an
// event named. Which reads an observed pass makes, leftovers of another
// family or mode included, is passReads'. Reading only: the reconciler
// applies.
import type { Runner } from '../exec/runner.ts';
import { diffChains } from './diff.ts';
import { chainSpecs, chainSpecs6, diffChain } from './masq.ts';
import type { DesiredState, Op } from './model.ts';
import { nftMasqOps, observeNft, type NftReadOptions } from './nft-observe.ts';
import { NOT_READ, observeChain, observeChains, type ObserveOptions } from './observe.ts';

export interface MasqReadOptions {
  /** the families' chains to read, and a run's leftovers in the family that is off */
  readonly families: Omit<ObserveOptions, 'chains' | 'dev6'>;
  readonly nft: NftReadOptions;
}

/**
 * What a run of the other family or masquerade mode may have left: still to look for (the
 * reconciler clears each once a full pass has read it and removed it without a failure).
 */
export interface Leftovers {
  /** IPv6 routes and ip6tables chains (a dual-stack run's), on a node without IPv6 */
  readonly v6: boolean;
  /** IPv4 routes and iptables chains (an IPv4 or dual-stack run's), on an IPv6-only node */
  readonly v4: boolean;
  /**
   * the other masquerade mode's: in nftables mode twill's iptables chains, in iptables mode twill's
   * nft tables
   */
  readonly mode: boolean;
}

/**
 * What an observed pass reads: the families on, and in a full pass (`chains`) the leftovers still
 * to look for (`leftovers`: those not yet removed by a clean pass); the leftovers it reads.
 */
export function passReads(
  want: DesiredState,
  o: { chains: boolean; nftables: boolean; nftCommand: boolean; leftovers: Leftovers },
): { masq: MasqReadOptions; leftovers: Leftovers } {
  const leftovers = {
    v6: o.chains && !want.masq6 && o.leftovers.v6,
    v4: o.chains && !want.masq && o.leftovers.v4,
    mode: o.chains && o.leftovers.mode,
  };
  const families = {
    ...(want.masq6 ? { ipv6: true } : {}),
    ...(leftovers.v6 ? { leftovers6: true } : {}),
    ...(want.masq ? {} : { ipv4: false }),
    ...(leftovers.v4 ? { leftovers4: true } : {}),
  };
  // nftables mode: twill's tables instead of the iptables chains, read alongside
  const nft = { nftables: o.nftables, leftovers: leftovers.mode, nftCommand: o.nftCommand };
  return { masq: { families, nft }, leftovers };
}

/**
 * A full pass's masquerade lane: twill's chains (iptables mode) or nftables tables, and what a run
 * in the other mode left, as the ops that make them right.
 */
export async function masqLaneOps(
  runner: Runner,
  want: DesiredState,
  o: MasqReadOptions,
  signal: AbortSignal,
): Promise<Op[]> {
  const [chains, nftSeen] = await Promise.all([
    o.nft.nftables ? NOT_READ : observeChains(runner, signal, o.families),
    observeNft(runner, want, o.nft, signal),
  ]);
  return [...diffChains(want, chains), ...nftMasqOps(want, nftSeen, o.nft)];
}

/**
 * A chains pass's reads: in nftables mode twill's tables of the families that are on (whichever
 * table the event named); in iptables mode the given tables' chains, in both families (an event or
 * the poll names the table, not the family) where they are on.
 */
export async function tableOps(
  runner: Runner,
  want: DesiredState,
  o: { nftables: boolean; tables: ReadonlySet<'nat' | 'filter'> },
  signal: AbortSignal,
): Promise<Op[]> {
  if (o.nftables) {
    const seen = await observeNft(runner, want, { nftables: true, leftovers: false }, signal);
    return nftMasqOps(want, seen, { nftables: true });
  }
  const families = [
    ...(want.masq ? [chainSpecs(want.masq)] : []),
    ...(want.masq6 ? [chainSpecs6(want.masq6)] : []),
  ];
  const chosen = families.flatMap((specs) => [
    ...(o.tables.has('nat') ? [specs.postrouting] : []),
    ...(o.tables.has('filter') ? [specs.forward] : []),
  ]);
  const seen = await Promise.all(chosen.map((spec) => observeChain(runner, spec, signal)));
  return chosen.flatMap((spec, i) => diffChain(spec, seen[i] ?? { jumps: [], rules: null }));
}
