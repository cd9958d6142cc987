// Kept batches on a real kernel: one `ip -force -batch -` in a namespace the
// test makes, fed batch after batch. A batch resolves once its lines have run
// (the kernel holds them then); a failed line is reported with its number in
// its own batch, however many came before; a device deleted and made again
// costs one failed batch, after which a new process knows its new index; a
// process that dies mid-batch, a batch that never finishes and a cancelled
// one each reject, and the next batch starts a new process.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeBatchFailures } from '../../src/exec/batch-errors.ts';
import { KeptBatch } from '../../src/exec/kept-batch.ts';
import { openFed, type Feeder, type Runner } from '../../src/exec/runner.ts';
import { commandFailure } from '../helpers/rejection.ts';
import { NetnsLab, nsFeeder, nsRunner, sweepStaleNetns } from '../../lab/kit/netns.ts';

const lab = new NetnsLab();
let ns: string;
let sh: Runner;
let spawned = 0;
let ip: KeptBatch;
const opts = (): { signal: AbortSignal; timeoutMs: number } => ({
  signal: AbortSignal.timeout(20_000),
  timeoutMs: 10_000,
});

async function veth(): Promise<void> {
  await sh('ip', ['link', 'add', 'kb0', 'type', 'veth', 'peer', 'name', 'kb1']);
  await sh('ip', ['addr', 'add', '10.77.0.1/24', 'dev', 'kb0']);
  await sh('ip', ['link', 'set', 'kb0', 'up']);
  await sh('ip', ['link', 'set', 'kb1', 'up']);
}

const routes = async (): Promise<string> =>
  (await sh('ip', ['route', 'show', 'proto', '151'])).stdout;

beforeAll(async () => {
  await sweepStaleNetns();
  ns = await lab.add('kept');
  sh = nsRunner(ns);
  await veth();
  const feed = nsFeeder(ns);
  ip = new KeptBatch({ feed, file: 'ip', onSpawn: () => spawned++ });
});
afterAll(async () => {
  ip.recycle();
  await lab.destroy();
});

const route = (n: number, dev = 'kb0'): string =>
  `route add 10.${100 + n}.0.0/24 via 10.77.0.2 dev ${dev} proto 151`;

describe('a kept ip -batch', () => {
  it('runs batch after batch in one process, each done when it resolves', async () => {
    for (let n = 0; n < 5; n++) {
      await ip.run([route(n)], opts());
      // resolved: the route is in the kernel already
      expect(await routes()).toContain(`10.${100 + n}.0.0/24`);
    }
    expect(spawned).toBe(1);
  });

  it('reports a failed line by its number in its own batch, and starts afresh after it', async () => {
    const lines = [route(10), route(0), route(11)];
    const err = await commandFailure(ip.run(lines, opts()));
    // route(0) exists already: line 2 of this batch, though the process has read 10 lines before
    expect(describeBatchFailures(err.stderr, lines)).toEqual([
      `${route(0)}: RTNETLINK answers: File exists`,
    ]);
    expect(await routes()).toContain('10.111.0.0/24');
    await ip.run([route(12)], opts());
    expect(spawned).toBe(2);
  });

  it('a device made again costs one failed batch; the next process knows its new index', async () => {
    await ip.run([route(20)], opts());
    await sh('ip', ['link', 'del', 'kb0']);
    await veth();
    // the process still has kb0's old index
    await commandFailure(ip.run([route(21)], opts()));
    const before = spawned;
    await ip.run([route(21)], opts());
    expect(spawned).toBe(before + 1);
    expect(await routes()).toContain('10.121.0.0/24');
  });

  it('a process that dies mid-batch rejects it, and the next batch starts another', async () => {
    // ip exits on an argument it cannot parse, leaving the rest of its input unread
    const err = await commandFailure(ip.run(['route add bogus via 10.77.0.2', route(30)], opts()));
    expect(err.reason).toMatch(/exit code/);
    expect(err.stderr).toContain('bogus');
    expect(await routes()).not.toContain('10.130.0.0/24');
    await ip.run([route(30)], opts());
    expect(await routes()).toContain('10.130.0.0/24');
  });
});

describe('a kept batch that never finishes', () => {
  // a stand-in for a tool that hangs: reads its input and never reports
  const silent: Feeder = (_file, _args, o) => openFed('/bin/sh', ['-c', 'cat >/dev/null'], o);

  it('times out, and its process is stopped', async () => {
    let starts = 0;
    const k = new KeptBatch({ feed: silent, file: 'ip', onSpawn: () => starts++ });
    const err = await commandFailure(
      k.run(['x'], { signal: AbortSignal.timeout(20_000), timeoutMs: 200 }),
    );
    expect(err.reason).toBe('timed out');
    const again = await commandFailure(
      k.run(['x'], { signal: AbortSignal.timeout(20_000), timeoutMs: 200 }),
    );
    expect(again.reason).toBe('timed out');
    expect(starts).toBe(2);
  });

  it('is cancelled by its signal', async () => {
    const k = new KeptBatch({ feed: silent, file: 'ip' });
    const ctl = new AbortController();
    const p = k.run(['x'], { signal: ctl.signal, timeoutMs: 10_000 });
    setTimeout(() => ctl.abort(), 50);
    expect((await commandFailure(p)).reason).toBe('cancelled');
    k.recycle();
  });
});
