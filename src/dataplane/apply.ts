// apply: runs a plan's batches (render.ts makes them: ip (pre), bridge, ip
// (post), iptables-restore --noflush with the xtables lock) in that order.
// ip and bridge run with -force so one failing line does not stop the rest;
// failures are mapped back to the lines that caused them.
import { describeError } from '../errors.ts';
import { describeBatchFailures } from '../exec/batch-errors.ts';
import { CommandError, type Runner } from '../exec/runner.ts';
import type { Op } from './model.ts';
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
      const found = err instanceof CommandError ? describeBatchFailures(err.stderr, b.lines) : [];
      failures.push(
        ...(found.length > 0 ? found.map((f) => `${b.file}: ${f}`) : [describeError(err)]),
      );
    }
  }
  return { batches: batches.length, failures };
}
