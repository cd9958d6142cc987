// The waiting helpers every loop uses: pause rejects with the signal's reason (at once when it has
// already aborted), retry gives up on a refused failure, on the last attempt and on the abort, and
// says each wait before it; quietOnAbort tells a stop from a failure; abortable gives up on a call
// as soon as the signal aborts; Backoff doubles, caps, jitters and starts over; withDeadline
// aborts its work's signal with its reason when the time is up, or with the caller's.
import { describe, expect, it } from 'vitest';
import {
  Backoff,
  abortable,
  backoffDelay,
  pause,
  quietOnAbort,
  retry,
  withDeadline,
} from '../../src/util/abort.ts';

const NO_WAIT = { next: (): number => 0 };

describe('pause', () => {
  it('resolves after the time', async () => {
    const start = performance.now();
    await pause(30, new AbortController().signal);
    expect(performance.now() - start).toBeGreaterThanOrEqual(25);
  });

  it("rejects with the signal's reason as soon as it aborts", async () => {
    const ctl = new AbortController();
    const reason = new Error('stop');
    const start = performance.now();
    setTimeout(() => ctl.abort(reason), 20);
    await expect(pause(10_000, ctl.signal)).rejects.toBe(reason);
    expect(performance.now() - start).toBeLessThan(1_000);
  });

  it('rejects at once when the signal has already aborted', async () => {
    await expect(pause(10_000, AbortSignal.abort())).rejects.toMatchObject({ name: 'AbortError' });
  });
});

describe('retry', () => {
  it('retries what retryIf accepts, telling each wait, until it succeeds', async () => {
    let calls = 0;
    const waits: [string, number][] = [];
    const got = await retry(
      async () => {
        if (++calls < 3) throw new Error(`down ${calls}`);
        return 'up';
      },
      {
        signal: new AbortController().signal,
        backoff: { next: () => 7 },
        retryIf: () => true,
        onRetry: (err, ms) => waits.push([(err as Error).message, ms]),
      },
    );
    expect(got).toBe('up');
    expect(waits).toEqual([
      ['down 1', 7],
      ['down 2', 7],
    ]);
  });

  it('throws at once a failure retryIf refuses', async () => {
    let calls = 0;
    const bad = new Error('bad');
    await expect(
      retry(
        async () => {
          calls++;
          throw bad;
        },
        { signal: new AbortController().signal, backoff: NO_WAIT, retryIf: (e) => e !== bad },
      ),
    ).rejects.toBe(bad);
    expect(calls).toBe(1);
  });

  it('throws the last failure after `attempts`', async () => {
    let calls = 0;
    await expect(
      retry(
        async () => {
          throw new Error(`failure ${++calls}`);
        },
        {
          signal: new AbortController().signal,
          backoff: NO_WAIT,
          retryIf: () => true,
          attempts: 3,
        },
      ),
    ).rejects.toThrow('failure 3');
    expect(calls).toBe(3);
  });

  it("ends with the signal's reason when it aborts during a wait, and never retries after it", async () => {
    const ctl = new AbortController();
    let calls = 0;
    const run = retry(
      async () => {
        calls++;
        throw new Error('down');
      },
      { signal: ctl.signal, backoff: { next: () => 10_000 }, retryIf: () => true },
    );
    setTimeout(() => ctl.abort(new Error('stop')), 20);
    await expect(run).rejects.toThrow('stop');
    expect(calls).toBe(1);

    const failure = new Error('cut short');
    await expect(
      retry(
        async () => {
          calls++;
          throw failure;
        },
        { signal: AbortSignal.abort(), backoff: NO_WAIT, retryIf: () => true },
      ),
    ).rejects.toBe(failure);
    expect(calls).toBe(2);
  });
});

describe('quietOnAbort', () => {
  it('ends quietly on what is thrown once the signal aborted, and throws anything else', async () => {
    const ctl = new AbortController();
    const loop = quietOnAbort(ctl.signal, async () => {
      for (;;) await pause(5, ctl.signal);
    });
    setTimeout(() => ctl.abort(), 20);
    await expect(loop).resolves.toBeUndefined();

    await expect(
      quietOnAbort(new AbortController().signal, async () => {
        throw new Error('broken');
      }),
    ).rejects.toThrow('broken');
  });
});

describe('abortable', () => {
  it("answers with the work, or with the signal's reason as soon as it aborts", async () => {
    await expect(abortable(Promise.resolve(1), new AbortController().signal)).resolves.toBe(1);
    await expect(
      abortable(Promise.reject(new Error('failed')), new AbortController().signal),
    ).rejects.toThrow('failed');

    const ctl = new AbortController();
    const never = new Promise<number>(() => undefined);
    setTimeout(() => ctl.abort(new Error('stop')), 10);
    await expect(abortable(never, ctl.signal)).rejects.toThrow('stop');

    const late = Promise.reject(new Error('ignored'));
    await expect(abortable(late, AbortSignal.abort(new Error('gone')))).rejects.toThrow('gone');
  });
});

describe('Backoff', () => {
  it('doubles from initialMs up to maxMs within ±20 %, and starts over on reset', () => {
    const b = new Backoff(100, 1_000);
    const seen = Array.from({ length: 6 }, () => b.next());
    const bases = [100, 200, 400, 800, 1_000, 1_000];
    seen.forEach((ms, i) => {
      expect(ms).toBeGreaterThanOrEqual((bases[i] ?? 0) * 0.8);
      expect(ms).toBeLessThanOrEqual((bases[i] ?? 0) * 1.2);
    });
    b.reset();
    expect(b.next()).toBeLessThanOrEqual(120);
    expect(backoffDelay(100, 1_000, 1_000)).toBeLessThanOrEqual(1_200);
  });
});

describe('withDeadline', () => {
  const waitForAbort = (s: AbortSignal): Promise<never> =>
    new Promise((_, reject) =>
      s.addEventListener('abort', () => reject(s.reason as Error), { once: true }),
    );

  it("aborts the work's signal with the reason once the time is up", async () => {
    const start = performance.now();
    const reason = new Error('took too long');
    await expect(
      withDeadline(new AbortController().signal, { ms: 30, reason: () => reason }, waitForAbort),
    ).rejects.toBe(reason);
    expect(performance.now() - start).toBeGreaterThanOrEqual(25);
  });

  it("aborts it with the caller's reason when the caller's signal aborts first", async () => {
    const ctl = new AbortController();
    const stop = new Error('stopping');
    const running = withDeadline(
      ctl.signal,
      { ms: 60_000, reason: () => new Error('deadline') },
      waitForAbort,
    );
    ctl.abort(stop);
    await expect(running).rejects.toBe(stop);
  });

  it("returns the work's answer and leaves its signal aborted, without the reason, afterwards", async () => {
    let seen: AbortSignal | undefined;
    const made: Error[] = [];
    const answer = await withDeadline(
      new AbortController().signal,
      { ms: 20, reason: () => (made.push(new Error('late')), made[0]!) },
      async (s) => ((seen = s), 42),
    );
    expect(answer).toBe(42);
    expect(seen?.aborted).toBe(true);
    await pause(40);
    // the timer was cleared: no reason was ever made
    expect(made).toEqual([]);
  });
});
