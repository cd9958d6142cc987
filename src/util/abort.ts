// Cancellable waiting (docs/design.md, rule 8), in one place: a pause that rejects when its signal
// aborts, a capped exponential backoff, one retry loop built on both, the two ways a loop
// meets an abort (a call raced against it; a loop that ends quietly), and a call given a deadline.

/**
 * Resolves after `ms`; rejects with the signal's reason as soon as `signal` aborts (at once when it
 * already has). A loop that pauses therefore checks nothing after the pause: the abort leaves the
 * loop, and a caller that stops quietly catches it at the top (`quietOnAbort`).
 */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(signal.reason as Error);
  return new Promise((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** The `attempt`-th delay (from 0): initialMs · 2^attempt, capped at `maxMs`, with ±20 % jitter. */
export function backoffDelay(initialMs: number, maxMs: number, attempt: number): number {
  const base = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 30));
  return Math.round(base * (0.8 + Math.random() * 0.4));
}

/** Delays 1×, 2×, 4× … `initialMs`, capped at `maxMs`, with ±20 % jitter. */
export class Backoff {
  private attempt = 0;
  private readonly initialMs: number;
  private readonly maxMs: number;

  constructor(initialMs: number, maxMs: number) {
    this.initialMs = initialMs;
    this.maxMs = maxMs;
  }

  next(): number {
    const ms = backoffDelay(this.initialMs, this.maxMs, this.attempt);
    this.attempt = Math.min(this.attempt + 1, 30);
    return ms;
  }

  reset(): void {
    this.attempt = 0;
  }
}

export interface RetryOptions {
  readonly signal: AbortSignal;
  /**
   * the wait before each further attempt; never reset here, so a caller may share one Backoff
   * between calls and reset it when it sees progress
   */
  readonly backoff: { next(): number };
  /** whether a failure is worth another attempt; any other is thrown at once */
  readonly retryIf: (err: unknown) => boolean;
  /** told of each failure about to be retried, with the wait before the next attempt */
  readonly onRetry?: (err: unknown, retryInMs: number) => void;
  /** at most this many attempts, the last failure thrown after them (default: no limit) */
  readonly attempts?: number;
}

/**
 * Calls `fn` until it succeeds. Throws the first failure `retryIf` refuses, the last one once
 * `attempts` ran out, a failure that came after the abort (never retried), or the signal's reason
 * when it aborts during a wait.
 */
export async function retry<T>(fn: () => Promise<T>, o: RetryOptions): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (o.signal.aborted || attempt === o.attempts || !o.retryIf(err)) throw err;
      const retryInMs = o.backoff.next();
      o.onRetry?.(err, retryInMs);
      await pause(retryInMs, o.signal);
    }
  }
}

/**
 * Runs a loop that stops when `signal` aborts: whatever it throws after the abort comes from that
 * stop (a pause or a call cut short), so it ends quietly; anything else is a failure.
 */
export async function quietOnAbort(signal: AbortSignal, loop: () => Promise<void>): Promise<void> {
  try {
    await loop();
  } catch (err) {
    if (!signal.aborted) throw err;
  }
}

/**
 * `work`, or a rejection with the signal's reason as soon as `signal` aborts, for calls that take
 * no signal of their own: the call runs on, and its outcome is ignored.
 */
export function abortable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(signal.reason as Error);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    void work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** A signal that aborts when `parent` does or when `abort()` is called. */
export function childController(parent: AbortSignal): AbortController {
  const ctl = new AbortController();
  if (parent.aborted) ctl.abort(parent.reason);
  else
    parent.addEventListener('abort', () => ctl.abort(parent.reason), {
      once: true,
      signal: ctl.signal,
    });
  return ctl;
}

/**
 * Runs `work` under a signal that aborts when `signal` does or, with `reason()` (made when the
 * time is up), after `ms`; the timer is cleared and the signal detached from `signal` once `work`
 * settles. How the work ends on that abort is its own business: it sees the reason on its signal.
 */
export async function withDeadline<T>(
  signal: AbortSignal,
  o: { readonly ms: number; readonly reason: () => Error },
  work: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const ctl = childController(signal);
  const timer = setTimeout(() => ctl.abort(o.reason()), o.ms);
  try {
    return await work(ctl.signal);
  } finally {
    clearTimeout(timer);
    ctl.abort();
  }
}
