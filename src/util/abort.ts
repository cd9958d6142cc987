// Small helpers for cancellable waiting (DESIGN.md rule 8): a sleep that ends
// early when its signal aborts, and a capped exponential backoff.

/** Resolves after `ms`, or as soon as `signal` aborts (never rejects). */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
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
    const base = Math.min(this.maxMs, this.initialMs * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, 30);
    return Math.round(base * (0.8 + Math.random() * 0.4));
  }

  reset(): void {
    this.attempt = 0;
  }
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
