// Tells the store once the dataplane is up (Kubernetes: NetworkUnavailable=False
// on our Node). Called after every converged pass; it acts when the lease
// has a version it has not marked yet (the first pass, and again after a
// reclaim), one call at a time; a failed call is retried with backoff
// (1 s doubling to 10 s; passes are rare on a quiet node).
import { describeError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { Backoff, pause } from '../util/abort.ts';
import type { LeaseKeeper } from './keeper.ts';
import type { LeaseStore } from './types.ts';

export class ReadyMark {
  private marked: string | undefined;
  private busy = false;
  private readonly retry = new Backoff(1_000, 10_000);
  private readonly o: { store: LeaseStore; keeper: LeaseKeeper; logger: Logger };
  private readonly signal: AbortSignal;

  constructor(o: { store: LeaseStore; keeper: LeaseKeeper; logger: Logger }, signal: AbortSignal) {
    this.o = o;
    this.signal = signal;
  }

  converged(): void {
    const { store, keeper, logger } = this.o;
    const lease = keeper.current();
    const version = `${lease.key}@${lease.version}`;
    if (
      !store.markReady ||
      this.busy ||
      this.marked === version ||
      keeper.lost() !== undefined ||
      this.signal.aborted
    )
      return;
    this.busy = true;
    store
      .markReady(lease, this.signal)
      .then(
        () => {
          if (this.marked === undefined)
            logger.info({ key: lease.key }, 'dataplane up: marked the node network available');
          this.marked = version;
          this.retry.reset();
        },
        (err: unknown) => {
          if (this.signal.aborted) return;
          const retryInMs = this.retry.next();
          logger.warn(
            { err: describeError(err), retryInMs },
            'could not mark the node network available; retrying',
          );
          // the next pass may come first (busy is false during the wait): converged() is idempotent
          pause(retryInMs, this.signal).then(
            () => this.converged(),
            () => undefined, // stopped
          );
        },
      )
      .finally(() => (this.busy = false));
  }
}
