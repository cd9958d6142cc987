// Where iptables has no rule event stream (iptables-legacy), twill polls its
// two chains every second: with the nft monitor off, a deleted MASQUERADE
// rule, a swapped order and a flushed nat table still come back, exactly.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { desiredState } from '../../src/dataplane/backend.ts';
import { pollChains, runMonitors } from '../../src/dataplane/monitor.ts';
import { Reconciler } from '../../src/dataplane/reconciler.ts';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelView, peerLease } from '../helpers/dataplane.ts';
import { captureLog } from '../helpers/log.ts';
import { NetnsLab, nsForwarding, nsRunner, nsWatch, sweepStaleNetns } from '../helpers/netns.ts';
import { waitFor } from '../helpers/ports.ts';

const lab = new NetnsLab();
const ctl = new AbortController();
let runner: Runner;
let loops: Promise<unknown>;
let log: ReturnType<typeof captureLog>;
const repairs = (): number => log.lines.filter((l) => l.msg === 'repaired dataplane drift').length;

beforeAll(async () => {
  await sweepStaleNetns();
  const ns = await lab.add('poll');
  const other = await lab.add('poll-peer');
  await lab.link({ ns, dev: 'eth0', cidr: '10.123.0.2/24' }, { ns: other, dev: 'eth0', cidr: '10.123.0.1/24' });
  runner = nsRunner(ns);
  const input = backendInput({ backend: 'host-gw', peers: [peerLease(1, { vxlan: false })] });
  log = captureLog();
  const logger = log.logger;
  const r = new Reconciler({ runner, logger, desired: () => desiredState(input), ensureForwarding: nsForwarding(ns), resyncMs: 600_000 });
  loops = Promise.all([
    r.run(ctl.signal),
    runMonitors({ watch: nsWatch(ns), logger, ctx: { underlay: 'eth0' }, nft: false, onEvent: (s) => r.trigger(s) }, ctl.signal),
    pollChains({ runner, logger, masq: () => desiredState(input).masq, intervalMs: 1_000, onDrift: (s) => r.trigger(s) }, ctl.signal),
  ]);
  await waitFor(() => r.lastPass()?.converged === true, { timeoutMs: 10_000, what: 'first converged pass' });
});
afterAll(async () => {
  ctl.abort();
  await loops;
  await lab.destroy();
});

describe('iptables poll (no nft monitor)', () => {
  const cases: [string, string[][]][] = [
    ['MASQUERADE rule deleted', [['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '6']]],
    ['rule order swapped', [['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '1'], ['iptables', '-t', 'nat', '-A', 'TWILL-POSTRTG', '-m', 'mark', '--mark', '0x4000/0x4000', '-m', 'comment', '--comment', 'twill masq', '-j', 'RETURN']]],
    ['whole nat table flushed', [['iptables', '-t', 'nat', '-F']]],
  ];
  for (const [what, commands] of cases) {
    it(`repairs: ${what}, within the poll interval plus a pass`, async () => {
      const baseline = JSON.stringify(await kernelView(runner));
      const before = repairs();
      for (const c of commands) await runner(c[0] as string, c.slice(1));
      const broken = performance.now();
      // the poll may repair before we could look: count the repair, then compare the state
      await waitFor(async () => repairs() > before && JSON.stringify(await kernelView(runner)) === baseline, { timeoutMs: 5_000, what });
      expect(performance.now() - broken).toBeLessThan(2_500); // a 1 s poll, then a pass; generous for a loaded 2-core CI
    });
  }
});
