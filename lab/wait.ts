// Waiting with a bound, for the lab and its drills: poll a condition until
// it holds, and say how long that took.
import { sleep } from '../src/util/abort.ts';

/**
 * Polls `check` every `everyMs` until true; ms it took from `since`, or undefined after
 * `timeoutMs`.
 */
export async function until(
  check: () => Promise<boolean>,
  o: { timeoutMs: number; since?: number; everyMs?: number },
): Promise<number | undefined> {
  const since = o.since ?? performance.now();
  for (;;) {
    if (await check()) return performance.now() - since;
    if (performance.now() - since > o.timeoutMs) return undefined;
    await sleep(o.everyMs ?? 10, AbortSignal.timeout(60_000));
  }
}
