// The doctor's read of the masquerade's nftables side, through the process runner: the nft
// command (`nft --version`) and twill's two tables (`nft -j list table`, read as a pass reads
// them), in either mode: nftables mode checks them, iptables mode reports them as leftovers.
import { NFT_TABLES, nftTableLabel } from '../dataplane/nft.ts';
import { observeNftTable } from '../dataplane/nft-observe.ts';
import { isMissingTool, type Runner } from '../exec/runner.ts';
import type { NftFact } from './facts.ts';

/** The nft command's version and twill's tables; no version and no table without the command. */
export async function readNftFact(runner: Runner, signal: AbortSignal): Promise<NftFact> {
  let version: string;
  try {
    version = (await runner('nft', ['--version'], { signal })).stdout.trim();
  } catch (err) {
    if (isMissingTool(err)) return { version: undefined, tables: new Map() };
    throw err;
  }
  const seen = await Promise.all(NFT_TABLES.map((t) => observeNftTable(runner, t, signal)));
  return {
    version,
    tables: new Map(NFT_TABLES.map((t, i) => [nftTableLabel(t), seen[i] ?? null])),
  };
}
