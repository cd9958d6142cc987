// apply: runs a plan's batches (render.ts makes them: ip (pre), bridge, ip
// (post), one `nft -f -` per table written, iptables-restore and
// ip6tables-restore --noflush with the xtables lock, one `nft -f -` per table
// deleted) in that order within two lanes that run at once, the links' and the
// masquerade's. ip and bridge run with -force so one failing line
// does not stop the rest, and a failing batch does not stop the later ones;
// failures are mapped back to the lines that caused them (nft's
// "/dev/stdin:<line>:…" reports, per table, as well as ip's). A pass that
// reads nothing (a delta, a repair) may hand its ip and bridge batches to
// kept processes (exec/kept-batch.ts) instead of starting new ones; any
// other pass spreads a big plan over one process per core (render.ts), each
// lane running its batches stage by stage, and, given a feeder, starts a big
// batch's process before its text is rendered and feeds it piece by piece.
import { availableParallelism } from 'node:os';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { describeError } from '../errors.ts';
import { describeBatchFailures } from '../exec/batch-errors.ts';
import type { KeptBatches } from '../exec/kept-batch.ts';
import { CommandError, type Feeder, type Runner } from '../exec/runner.ts';
import type { Op, Phase } from './model.ts';
import { describeNftFailures } from './nft-parse.ts';
import { renderBatches, ROUTE_STAGE, type Batch } from './render.ts';

/**
 * How many processes a big plan's ip (post) batch is spread over: one per core, at most 4. Measured
 * on 2 cores only: 2 processes wrote 5,000 routes in 290 ms against 420 for one (410-425 against
 * 465-475 on kernel 6.18, 2026-12-03), and 3 gained nothing more there; the kernel takes its
 * routing lock for each route, which bounds what more processes can gain on more cores.
 */
export const SPREAD_WAYS = Math.min(availableParallelism(), 4);

/**
 * A batch of more ops than this, given a feeder, is fed in pieces of this many: its process starts
 * after one piece is rendered instead of all, and renders the next while the kernel takes the one
 * before (a line took 1.5-2 µs to render at a cold start, 2 cores). Small enough that the first
 * piece costs about a millisecond, big enough that a piece's turn of the event loop is nothing.
 */
export const PIECE_OPS = 500;

/** How long one batch's process may run. */
const BATCH_TIMEOUT_MS = 60_000;

export interface ApplyResult {
  readonly batches: number;
  /** one message per failed line (or per failed batch when no line is known) */
  readonly failures: readonly string[];
}

/**
 * Runs the plan's batches in two lanes at once, each in its order: the links, neighbours, FDB and
 * routes (ip, bridge, ip), and the masquerade (nft writes, the restores, nft deletes). Neither
 * lane reads what the other writes (a masquerade rule names addresses and interface names, never
 * a kernel object), so a pass that changes both, as every cold start does, waits for the longer
 * lane instead of the sum. Within a lane the batches run stage by stage (a spread plan's several
 * at once: render.ts). A failing batch does not stop the later ones; failures are reported in the
 * batches' order.
 */
export async function applyOps(
  ops: readonly Op[],
  o: {
    readonly runner: Runner;
    readonly signal: AbortSignal;
    /** runs the ip and bridge batches in kept processes instead of new ones (never spread) */
    readonly kept?: KeptBatches;
    /** processes a big plan is spread over when no kept ones are given; default SPREAD_WAYS */
    readonly ways?: number;
    /** starts a batch of more than PIECE_OPS ops to be fed in pieces (not for kept processes) */
    readonly feed?: Feeder;
    /**
     * called once the links' lane has started its ip (post) stage (ROUTE_STAGE; at once when it
     * has none; not when the pass is cancelled before): a spread plan's routes, the kernel's
     * longest work, whose processes wait on the kernel line by line and leave a core room for the
     * caller's next work (the reconciler's masquerade reads), where the stage before is three
     * processes and the feeding on two cores
     */
    readonly routesStarted?: () => void;
  },
): Promise<ApplyResult> {
  const { runner, signal } = o;
  const batches = renderBatches(ops, { ways: o.kept ? 1 : (o.ways ?? SPREAD_WAYS) });
  const failed = new Map<Batch, string[]>();
  const runOne = async (b: Batch): Promise<void> => {
    try {
      const kept = o.kept?.for(b.file);
      if (kept) await kept.run(b.lines, { signal, timeoutMs: BATCH_TIMEOUT_MS });
      else if (o.feed && b.size > PIECE_OPS) {
        const fed = o.feed(b.file, b.args, { signal, timeoutMs: BATCH_TIMEOUT_MS });
        for (const piece of b.pieces(PIECE_OPS)) {
          // cancelled: end() says so at once
          if (signal.aborted) break;
          fed.write(piece);
          // the stage's other batches start and get their pieces too
          await nextTurn();
        }
        await fed.end();
      } else await runner(b.file, b.args, { signal, input: b.input, timeoutMs: BATCH_TIMEOUT_MS });
    } catch (err) {
      if (signal.aborted) throw err;
      const describe = b.phase === 'nft' ? describeNftFailures : describeBatchFailures;
      const found = err instanceof CommandError ? describe(err.stderr, b.lines) : [];
      failed.set(b, found.length > 0 ? found.map((f) => `${b.file}: ${f}`) : [describeError(err)]);
    }
  };
  const lane = async (phases: readonly Phase[], routesStarted?: () => void): Promise<void> => {
    const mine = batches.filter((b) => phases.includes(b.phase));
    // batches come in stage order; a stage ends when all of its batches have (one aborted still
    // waits for the others, so no batch outlives the pass)
    const stages = [...new Set(mine.map((b) => b.stage))];
    const routeStage = stages.find((s) => s >= ROUTE_STAGE);
    if (routeStage === undefined) routesStarted?.();
    for (const stage of stages) {
      const running = mine.filter((b) => b.stage === stage).map(runOne);
      if (stage === routeStage) routesStarted?.();
      const ended = await Promise.allSettled(running);
      for (const e of ended) if (e.status === 'rejected') throw e.reason;
    }
  };
  const lanes = await Promise.allSettled([lane(LINK_PHASES, o.routesStarted), lane(MASQ_PHASES)]);
  for (const l of lanes) if (l.status === 'rejected') throw l.reason;
  return { batches: batches.length, failures: batches.flatMap((b) => failed.get(b) ?? []) };
}

/** The lanes' phases; together every phase render.ts makes. */
const LINK_PHASES: readonly Phase[] = ['ip-pre', 'bridge', 'ip-post'];
const MASQ_PHASES: readonly Phase[] = ['nft', 'iptables'];
