// apply: runs a plan's batches (render.ts makes them: ip (pre), bridge, ip
// (post), one `nft -f -` per table written, iptables-restore and
// ip6tables-restore --noflush with the xtables lock, one `nft -f -` per table
// deleted) in that order. ip and bridge run with -force so one failing line
// does not stop the rest, and a failing batch does not stop the later ones;
// failures are mapped back to the lines that caused them (nft's
// "/dev/stdin:<line>:…" reports, per table, as well as ip's).
import { describeError } from '../errors.ts';
import { describeBatchFailures } from '../exec/batch-errors.ts';
import { CommandError, type Runner } from '../exec/runner.ts';
import type { Op } from './model.ts';
import { describeNftFailures } from './nft-parse.ts';
import { renderBatches } from './render.ts';

export interface ApplyResult {
  readonly batches: number;
  /** one message per failed line (or per failed batch when no line is known) */
  readonly failures: readonly string[];
}

/** Runs the plan's batches; a failing batch does not stop the later ones. */
export async function applyOps(
  runner: Runner,
  ops: readonly Op[],
  signal: AbortSignal,
): Promise<ApplyResult> {
  const batches = renderBatches(ops);
  const failures: string[] = [];
  for (const b of batches) {
    try {
      await runner(b.file, b.args, { signal, input: b.input, timeoutMs: 60_000 });
    } catch (err) {
      if (signal.aborted) throw err;
      const describe = b.phase === 'nft' ? describeNftFailures : describeBatchFailures;
      const found = err instanceof CommandError ? describe(err.stderr, b.lines) : [];
      failures.push(
        ...(found.length > 0 ? found.map((f) => `${b.file}: ${f}`) : [describeError(err)]),
      );
    }
  }
  return { batches: batches.length, failures };
}
