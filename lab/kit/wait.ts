// Waiting with a bound, for the tests, the lab's drills and the bench: poll a
// condition until it holds and say how long that took (`until`), or fail
// with what was awaited (`waitFor`); and how loose a test's bound is.
import { pause } from '../../src/util/abort.ts';

/**
 * How much slower than the target a repair may be and still count as
 * working: a machine ten times slower than a fast day must pass the tests;
 * whether the target was met is reported (`met`), and `npm run bench` is the
 * record for speed.
 */
export const SLOW_MACHINE_FACTOR = 10;

/**
 * A test's bound for something promised within `ms`: loose enough for a
 * machine ten times slower than a fast day, since tests check that it
 * happens and the bench and the drill table check how fast.
 */
export function slowBound(ms: number): number {
  return ms * SLOW_MACHINE_FACTOR;
}

/**
 * Polls `check` every `everyMs` until true; ms it took from `since`, or undefined after
 * `timeoutMs`.
 */
export async function until(
  check: () => Promise<boolean> | boolean,
  o: { timeoutMs: number; since?: number; everyMs?: number },
): Promise<number | undefined> {
  const since = o.since ?? performance.now();
  for (;;) {
    if (await check()) return performance.now() - since;
    if (performance.now() - since > o.timeoutMs) return undefined;
    await pause(o.everyMs ?? 10);
  }
}

/**
 * Polls `check` (every 50 ms unless told) until true: the ms it took; rejects with `what` after
 * `timeoutMs`.
 */
export async function waitFor(
  check: () => Promise<boolean> | boolean,
  o: { timeoutMs: number; what: string; everyMs?: number },
): Promise<number> {
  const ms = await until(check, { timeoutMs: o.timeoutMs, everyMs: o.everyMs ?? 50 });
  if (ms === undefined) throw new Error(`timed out after ${o.timeoutMs} ms waiting for ${o.what}`);
  return ms;
}
