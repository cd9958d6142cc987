// Unit tests of MonitorHush with runMonitors and a fake `ip monitor`: a hush stops the running
// monitor (its process has exited before the hushed work begins), the monitor stays stopped while
// the work runs, however long, and starts again after it, saying so (the "(re)started" event that
// asks the reconciler for a full pass); nested hushes release once; a hush with no monitor running
// does not wait; the monitor's lines before and after are read as ever.
import { describe, expect, it } from 'vitest';
import { MonitorHush, runMonitors } from '../../src/dataplane/monitor.ts';
import type { Touch } from '../../src/dataplane/kernel-event.ts';
import type { LineWatcher, WatchOptions } from '../../src/exec/runner.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { captureLog } from '../helpers/log.ts';

/** A fake `ip monitor`: each start is recorded; the test prints lines and sees it stop. */
function fakeIpMonitor() {
  const runs: { opts: WatchOptions; exited: boolean }[] = [];
  const watch: LineWatcher = (_file, _args, opts) =>
    new Promise<void>((resolve) => {
      const run = { opts, exited: false };
      runs.push(run);
      const stop = (): void => {
        // a process takes a moment to exit
        setTimeout(() => {
          run.exited = true;
          resolve();
        }, 20);
      };
      if (opts.signal.aborted) stop();
      else opts.signal.addEventListener('abort', stop, { once: true });
    });
  const current = () => runs.at(-1);
  return {
    watch,
    runs,
    running: () => runs.filter((r) => !r.exited && !r.opts.signal.aborted).length,
    print: (line: string) => current()?.opts.onLine(line),
  };
}

function start(hush: MonitorHush) {
  const fake = fakeIpMonitor();
  const events: { source: string; touch?: Touch }[] = [];
  const ctl = new AbortController();
  const running = runMonitors(
    {
      watch: fake.watch,
      logger: captureLog().logger,
      ctx: { underlay: 'eth0' },
      nft: false,
      onEvent: (source, touch) => events.push({ source, ...(touch ? { touch } : {}) }),
      hush,
    },
    ctl.signal,
  );
  const restarts = () => events.filter((e) => e.source === 'ip monitor (re)started').length;
  return { fake, events, restarts, stop: () => (ctl.abort(), running) };
}

const ROUTE = '10.244.4.0/24 via 10.123.0.4 dev eth0 proto 151';

describe('MonitorHush', () => {
  it('stops ip monitor before the work, keeps it stopped during it, starts it after', async () => {
    const hush = new MonitorHush();
    const m = start(hush);
    await waitFor(() => m.fake.running() === 1, { timeoutMs: 2_000, what: 'the monitor' });
    expect(m.restarts()).toBe(1);
    m.fake.print(ROUTE);
    expect(m.events.filter((e) => e.touch?.kind === 'route')).toHaveLength(1);
    const first = m.fake.runs[0];
    let seenDuring: { exited: boolean | undefined; running: number; hushed: boolean } | undefined;
    const result = await hush.during(async () => {
      seenDuring = { exited: first?.exited, running: m.fake.running(), hushed: hush.hushed };
      // the work takes a while: the monitor must not come back meanwhile
      await new Promise((r) => setTimeout(r, 100));
      expect(m.fake.runs).toHaveLength(1);
      return 'applied';
    });
    expect(result).toBe('applied');
    expect(seenDuring).toEqual({ exited: true, running: 0, hushed: true });
    expect(hush.hushed).toBe(false);
    await waitFor(() => m.fake.running() === 1, { timeoutMs: 2_000, what: 'the restart' });
    expect(m.fake.runs).toHaveLength(2);
    expect(m.restarts()).toBe(2);
    m.fake.print(ROUTE);
    expect(m.events.filter((e) => e.touch?.kind === 'route')).toHaveLength(2);
    await m.stop();
  });

  it('releases nested hushes once, when the outer one ends; a failing work releases too', async () => {
    const hush = new MonitorHush();
    const m = start(hush);
    await waitFor(() => m.fake.running() === 1, { timeoutMs: 2_000, what: 'the monitor' });
    await expect(
      hush.during(async () => {
        await hush.during(async () => undefined);
        expect(hush.hushed).toBe(true);
        await new Promise((r) => setTimeout(r, 50));
        expect(m.fake.running()).toBe(0);
        throw new Error('batch failed');
      }),
    ).rejects.toThrow('batch failed');
    expect(hush.hushed).toBe(false);
    await waitFor(() => m.fake.running() === 1, { timeoutMs: 2_000, what: 'the restart' });
    expect(m.fake.runs).toHaveLength(2);
    await m.stop();
  });

  it('with no monitor running, the work starts at once', async () => {
    const hush = new MonitorHush();
    let ran = false;
    await hush.during(async () => {
      ran = true;
    });
    expect(ran).toBe(true);
    expect(hush.hushed).toBe(false);
  });
});
