// The list-then-watch loop every LeaseStore runs: list everything (retrying
// with backoff while the store is unreachable), report a snapshot, then
// follow changes until changes may have been missed (the watch says why) or
// the periodic re-list is due, and list again. The stores supply only how
// to list and how to watch from a listing.
import { hasCode } from '../errors.ts';
import { Backoff, childController, pause, quietOnAbort, retry } from '../util/abort.ts';
import type { LeaseEvent, LeaseRecord } from './types.ts';

export interface Listing<C> {
  readonly records: readonly LeaseRecord[];
  /** for the connectivity event ("listed 3 leases") */
  readonly detail: string;
  /** where the watch starts (a revision, a resourceVersion) */
  readonly cursor: C;
}

/**
 * How a watch ended. 'aborted': its signal (the periodic re-list or the
 * caller) ended it. Otherwise `kind` names why a re-list is needed
 * ("compacted", "gone", "failed" …: the re-list reason and the metric
 * label); 'failed' also means the store is unreachable, so it backs off.
 */
export type WatchOutcome =
  | { readonly reason: 'aborted' }
  | { readonly reason: 'relist' | 'failed'; readonly kind: string; readonly detail: string };

export interface RelistLoopOptions<C> {
  readonly signal: AbortSignal;
  readonly onEvent: (ev: LeaseEvent) => void;
  /** re-list about this often (±20 %, so nodes started together do not re-list together) */
  readonly relistMs: number;
  list(signal: AbortSignal): Promise<Listing<C>>;
  /**
   * reports changes through onEvent; calls `progress` on each so a failure streak's backoff starts
   * afresh
   */
  watch(o: {
    cursor: C;
    signal: AbortSignal;
    progress: () => void;
    backoff: Backoff;
  }): Promise<WatchOutcome>;
}

/** Lists and watches until `signal` aborts (then it returns quietly). */
export async function relistLoop<C>(o: RelistLoopOptions<C>): Promise<void> {
  const { signal, onEvent } = o;
  const backoff = new Backoff(200, 5_000);
  let reason = 'initial list';
  await quietOnAbort(signal, async () => {
    while (!signal.aborted) {
      const cursor = await listAndReport(o, backoff, reason);
      const round = childController(signal);
      const timer = setTimeout(
        () => round.abort(),
        Math.round(o.relistMs * (0.8 + Math.random() * 0.4)),
      );
      const end = await o
        .watch({
          cursor,
          signal: round.signal,
          progress: () => backoff.reset(),
          backoff,
        })
        .finally(() => {
          clearTimeout(timer);
          round.abort();
        });
      reason = end.reason === 'aborted' ? 'periodic re-list' : `${end.kind}: ${end.detail}`;
      // only an unreachable store waits; compaction, a wipe, a reconnect or a 410 re-list at once
      if (end.reason === 'failed') {
        onEvent({ type: 'connectivity', connected: false, detail: end.detail });
        await pause(backoff.next(), signal);
      }
    }
  });
}

/**
 * Lists (retrying while the store is unreachable) and reports the snapshot; where the watch
 * starts. A function of its own so that the listing is garbage once reported: a suspended async
 * function keeps its locals, and the loop waits in its watch for minutes (at 5,000 peers a heap
 * snapshot found about 2 MiB of listing held that way, part of it shared with the tracker).
 */
async function listAndReport<C>(
  o: RelistLoopOptions<C>,
  backoff: Backoff,
  reason: string,
): Promise<C> {
  const { signal, onEvent } = o;
  const listing = await retry(() => o.list(signal), {
    signal,
    backoff,
    retryIf: (err) => hasCode(err, 'STORE_UNAVAILABLE'),
    onRetry: (err) =>
      onEvent({ type: 'connectivity', connected: false, detail: (err as Error).message }),
  });
  onEvent({ type: 'connectivity', connected: true, detail: listing.detail });
  onEvent({ type: 'snapshot', records: listing.records, reason });
  return listing.cursor;
}
