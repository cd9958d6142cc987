// Unit tests of runTogether, which runs the daemon's loops (the lease watch, the keeper, the
// reconciler, the kernel monitors, the health endpoint): every loop runs until stopped, so one that
// ends on its own stops the daemon with LOOP_ENDED naming it (before, the daemon exited 0 and said
// nothing), a failing loop's error is thrown, and a stop ends them all quietly.
import { describe, expect, it } from 'vitest';
import { runTogether, type Loop } from '../../src/daemon.ts';
import { TwillError } from '../../src/errors.ts';

/** A loop that runs until its signal aborts, recording that it was stopped. */
function untilStopped(stopped: string[], name: string): Loop {
  return [
    name,
    (s) =>
      new Promise<void>((resolve) => {
        s.addEventListener(
          'abort',
          () => {
            stopped.push(name);
            resolve();
          },
          { once: true },
        );
      }),
  ];
}

describe('runTogether', () => {
  it('a loop that ends on its own stops the others and fails with LOOP_ENDED naming it', async () => {
    const stopped: string[] = [];
    const ended: Loop = ['the kernel monitors', async () => undefined];
    const err = await runTogether(new AbortController().signal, [
      untilStopped(stopped, 'the reconciler'),
      ended,
    ]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TwillError);
    expect((err as TwillError).code).toBe('LOOP_ENDED');
    expect((err as TwillError).message).toContain('the kernel monitors');
    expect(stopped).toEqual(['the reconciler']);
  });

  it("a failing loop's own error is thrown", async () => {
    const stopped: string[] = [];
    const boom = new TwillError('LEASE_LOST', 'lease gone');
    const err = await runTogether(new AbortController().signal, [
      untilStopped(stopped, 'the reconciler'),
      ['the lease keeper', () => Promise.reject(boom)],
    ]).catch((e: unknown) => e);
    expect(err).toBe(boom);
    expect(stopped).toEqual(['the reconciler']);
  });

  it('a stop ends every loop quietly', async () => {
    const stopped: string[] = [];
    const ctl = new AbortController();
    const running = runTogether(ctl.signal, [
      untilStopped(stopped, 'a'),
      untilStopped(stopped, 'b'),
    ]);
    ctl.abort();
    await expect(running).resolves.toBeUndefined();
    expect(stopped.sort()).toEqual(['a', 'b']);
  });
});
