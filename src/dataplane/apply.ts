// apply: runs a plan's batches (render.ts makes them: ip (pre), then bridge
// and ip (post) at once; one `nft -f -` per table written, iptables-restore
// and ip6tables-restore --noflush with the xtables lock, one `nft -f -` per
// table deleted, in that order) in two lanes that run at once, the links' and
// the masquerade's. ip and bridge run with -force so one failing line
// does not stop the rest, and a failing batch does not stop the later ones;
// failures are mapped back to the lines that caused them (nft's
// "/dev/stdin:<line>:…" reports, per table, as well as ip's).
import { describeError } from '../errors.ts';
import { describeBatchFailures } from '../exec/batch-errors.ts';
import { CommandError, type Runner } from '../exec/runner.ts';
import type { Op, Phase } from './model.ts';
import { describeNftFailures } from './nft-parse.ts';
import { renderBatches, type Batch } from './render.ts';

export interface ApplyResult {
  readonly batches: number;
  /** one message per failed line (or per failed batch when no line is known) */
  readonly failures: readonly string[];
}

/**
 * Runs the plan's batches in two lanes at once: the links, neighbours, FDB and routes, and the
 * masquerade (nft writes, the restores, nft deletes, in that order). Neither lane reads what the
 * other writes (a masquerade rule names addresses and interface names, never a kernel object), so
 * a pass that changes both, as every cold start does, waits for the longer lane instead of the
 * sum. Within the links' lane the `ip` batch of links, addresses and deletions runs first; then the
 * `bridge` batch (FDB) and the `ip` batch of neighbours and routes run at once: each needs only
 * the device the first made, neither reads what the other writes (an FDB entry names a MAC and an
 * underlay address, a route or neighbour an overlay address), so a new peer's three entries cost
 * one process start of waiting instead of two (unless the second deletes a device, whose FDB
 * entries the first deletes: then they keep that order). A failing batch does not stop the later
 * ones; failures are reported in the batches' order.
 */
export async function applyOps(
  runner: Runner,
  ops: readonly Op[],
  signal: AbortSignal,
): Promise<ApplyResult> {
  const batches = renderBatches(ops);
  const failed = new Map<Batch, string[]>();
  const lane = async (phases: readonly Phase[]): Promise<void> => {
    for (const b of batches) {
      if (!phases.includes(b.phase)) continue;
      try {
        await runner(b.file, b.args, { signal, input: b.input, timeoutMs: 60_000 });
      } catch (err) {
        if (signal.aborted) throw err;
        const describe = b.phase === 'nft' ? describeNftFailures : describeBatchFailures;
        const found = err instanceof CommandError ? describe(err.stderr, b.lines) : [];
        failed.set(
          b,
          found.length > 0 ? found.map((f) => `${b.file}: ${f}`) : [describeError(err)],
        );
      }
    }
  };
  // a device deleted after its FDB entries (a backend or family turned off) keeps the order
  const deletesLinks = ops.some(
    (o) => o.kind === 'link' && o.action === 'delete' && o.phase === 'ip-post',
  );
  const links = async (): Promise<void> => {
    await lane(['ip-pre']);
    if (deletesLinks) for (const p of LINK_PHASES_AT_ONCE) await lane([p]);
    else await together(LINK_PHASES_AT_ONCE.map((p) => lane([p])));
  };
  await together([links(), lane(MASQ_PHASES)]);
  return { batches: batches.length, failures: batches.flatMap((b) => failed.get(b) ?? []) };
}

/** Waits for all of `work`; then throws the first rejection, if any (an abort). */
async function together(work: readonly Promise<void>[]): Promise<void> {
  const settled = await Promise.allSettled(work);
  for (const l of settled) if (l.status === 'rejected') throw l.reason;
}

/** After 'ip-pre', these phases of the links' lane run at once. */
const LINK_PHASES_AT_ONCE: readonly Phase[] = ['bridge', 'ip-post'];
const MASQ_PHASES: readonly Phase[] = ['nft', 'iptables'];
