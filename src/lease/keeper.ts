// Keeps our lease: renews it `renewMargin` before it expires, and reclaims the
// same subnet in place as soon as it is reported lost (deleted, expired, store
// wiped). Transient store failures are retried with backoff; a subnet that
// another node now holds ends the loop with LEASE_TAKEN, which is fatal.
// Each attempt is bounded by a share of the time the lease has left (attemptBudget), so one call
// stuck in the store cannot outlive the lease it is renewing.
import { TwillError, describeError, hasCode } from '../errors.ts';
import type { Logger } from '../log.ts';
import { Backoff, childController, pause, quietOnAbort, withDeadline } from '../util/abort.ts';
import type { Lease, LeaseStore } from './types.ts';

export interface KeeperOptions {
  readonly store: LeaseStore;
  readonly lease: Lease;
  readonly renewMarginMs: number;
  readonly logger: Logger;
  /** called with every new version of our lease */
  readonly onLease?: (lease: Lease) => void;
  /** default FLAP_LIMITS (tests shrink them) */
  readonly flapLimits?: FlapLimits;
}

/**
 * A loss within `windowMs` of the last reclaim is a flap: someone else keeps
 * rewriting our record. The n-th flap in a row waits baseMs · 2^(n-1), at
 * most maxMs, before reclaiming; `max` flaps in a row (about 3 minutes of
 * waiting) end the daemon with LEASE_TAKEN.
 */
export interface FlapLimits {
  readonly windowMs: number;
  readonly baseMs: number;
  readonly maxMs: number;
  readonly max: number;
}

export const FLAP_LIMITS: FlapLimits = { windowMs: 10_000, baseMs: 500, maxMs: 60_000, max: 10 };

/** When to renew: `margin` before expiry, but never in a busy loop. */
export function renewDelay(lease: Lease, marginMs: number, now: number): number {
  const remaining = lease.expiresAt - now;
  const early = remaining - marginMs;
  return early > 1000 ? early : Math.max(500, Math.floor(remaining / 2));
}

/** setTimeout's longest delay; a longer one fires at once */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** The least time one renewal or reclaim attempt is given, however little the lease has left. */
export const ATTEMPT_FLOOR_MS = 1_000;

/**
 * How long one renewal or reclaim may take before it is given up and tried again: a third of the
 * time `lease` has left, at least ATTEMPT_FLOOR_MS. A call can hang well past a short lease: etcd
 * drops a proposal a follower forwarded to a leader that then died, and the call waits out its
 * deadline (5 s) while a 4 s lease runs out; with a third per attempt, two more tries fit before
 * the lease expires. A lease with hours left is bounded by the store's own deadlines instead.
 */
export function attemptBudget(lease: Lease, now: number): number {
  const share = Math.floor((lease.expiresAt - now) / 3);
  // a lease that never expires (a TTL of 0) or an unknown expiry: the longest a timer can wait
  if (!Number.isFinite(share) || share > MAX_TIMER_MS) return MAX_TIMER_MS;
  return Math.max(ATTEMPT_FLOOR_MS, share);
}

export class LeaseKeeper {
  private lease: Lease;
  private lostReason: string | undefined;
  /**
   * when our lease was last reclaimed (epoch ms), and how many losses in a row came soon after one
   */
  private lastReclaimAt = 0;
  private flaps = 0;
  private flapWaitMs = 0;
  private wake: AbortController | undefined;
  private readonly opts: KeeperOptions;

  constructor(opts: KeeperOptions) {
    this.opts = opts;
    this.lease = opts.lease;
  }

  current(): Lease {
    return this.lease;
  }

  /** Why the lease is being reclaimed, while it is; undefined when it is held. */
  lost(): string | undefined {
    return this.lostReason;
  }

  /**
   * Our record is gone or not ours: reclaim now (or after a growing wait, when it keeps being taken
   * away).
   */
  notifyLost(reason: string): void {
    if (this.lostReason === undefined) {
      const limits = this.opts.flapLimits ?? FLAP_LIMITS;
      const sinceMs = Date.now() - this.lastReclaimAt;
      this.flaps = sinceMs < limits.windowMs ? this.flaps + 1 : 0;
      this.flapWaitMs =
        this.flaps === 0 ? 0 : Math.min(limits.maxMs, limits.baseMs * 2 ** (this.flaps - 1));
      if (this.flaps === 0) this.opts.logger.warn({ reason }, 'own lease lost; reclaiming it');
      else
        this.opts.logger.warn(
          { reason, sinceReclaimMs: sinceMs, flaps: this.flaps, waitMs: this.flapWaitMs },
          'own lease lost again right after it was restored: another writer? waiting before reclaiming',
        );
    }
    this.lostReason ??= reason;
    this.wake?.abort();
  }

  /** Waits out a flap; LEASE_TAKEN once our record has been taken away too often in a row. */
  private async flapPause(signal: AbortSignal): Promise<void> {
    if (this.flapWaitMs === 0) return;
    const limits = this.opts.flapLimits ?? FLAP_LIMITS;
    if (this.flaps >= limits.max) {
      throw new TwillError(
        'LEASE_TAKEN',
        `our lease ${this.lease.key} was changed by someone else ${this.flaps} times in a row, each time within ${limits.windowMs} ms of twill restoring it (last: ${this.lostReason ?? '?'}); is a second twill running with the same node name, or a tool rewriting the record?`,
      );
    }
    const wait = this.flapWaitMs;
    this.flapWaitMs = 0;
    await pause(wait, signal);
  }

  /** Keeps the lease until `signal` aborts (then it returns quietly) or LEASE_TAKEN. */
  async run(signal: AbortSignal): Promise<void> {
    const backoff = new Backoff(200, 5_000);
    let retryIn: number | undefined;
    // Not retry(): a failed renewal waits where a loss can cut the wait short, a failed reclaim
    // waits it out, and a loss found by either is reclaimed without waiting.
    await quietOnAbort(signal, async () => {
      while (!signal.aborted) {
        if (this.lostReason === undefined) {
          this.wake = childController(signal);
          await pause(
            retryIn ?? renewDelay(this.lease, this.opts.renewMarginMs, Date.now()),
            this.wake.signal,
          ).catch(() => signal.throwIfAborted()); // woken by a loss: reclaim now
          this.wake.abort(); // detaches it from `signal`
        }
        try {
          if (this.lostReason !== undefined) await this.flapPause(signal);
          await this.step(signal);
          backoff.reset();
          retryIn = undefined;
        } catch (err) {
          if (signal.aborted || hasCode(err, 'LEASE_TAKEN')) throw err;
          if (hasCode(err, 'LEASE_LOST')) {
            this.notifyLost(err.message);
            continue;
          }
          // never sleep away the last of the lease: wait at most as long as an attempt may take
          retryIn = Math.min(backoff.next(), attemptBudget(this.lease, Date.now()));
          this.opts.logger.warn(
            { err: describeError(err), retryInMs: retryIn },
            this.lostReason ? 'reclaim failed; retrying' : 'renewal failed; retrying',
          );
          if (this.lostReason !== undefined) await pause(retryIn, signal);
        }
      }
    });
  }

  private async step(signal: AbortSignal): Promise<void> {
    const lost = this.lostReason;
    const next = await this.bounded(signal, (attempt) =>
      lost === undefined
        ? this.opts.store.renewLease(this.lease, attempt)
        : this.opts.store.reclaimLease(this.lease, attempt),
    );
    if (next.key !== this.lease.key)
      throw new TwillError(
        'LEASE_TAKEN',
        `store returned lease ${next.key} instead of ${this.lease.key}`,
      );
    this.lease = next;
    if (lost !== undefined) {
      this.lostReason = undefined;
      this.lastReclaimAt = Date.now();
      this.opts.logger.info({ key: next.key, reason: lost }, 'own lease reclaimed');
    } else {
      this.opts.logger.debug(
        { key: next.key, expiresAt: new Date(next.expiresAt).toISOString() },
        'lease renewed',
      );
    }
    this.opts.onLease?.(next);
  }

  /**
   * Runs one store attempt under a signal that also aborts after attemptBudget: the store gives
   * the call up with that reason (STORE_UNAVAILABLE, retried as any store failure is).
   */
  private bounded<T>(signal: AbortSignal, work: (attempt: AbortSignal) => Promise<T>): Promise<T> {
    const ms = attemptBudget(this.lease, Date.now());
    const what = this.lostReason === undefined ? 'renewal' : 'reclaim';
    const reason = (): Error => {
      const left = this.lease.expiresAt - Date.now();
      return new TwillError(
        'STORE_UNAVAILABLE',
        `${what} of ${this.lease.key} took over ${ms} ms; given up with ${left > 0 ? `${left} ms of the lease left` : 'the lease expired'}`,
      );
    };
    return withDeadline(signal, { ms, reason }, work);
  }
}
