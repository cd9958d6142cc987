// When other programs flood `nft monitor` (kube-proxy rewriting thousands of
// rules), twill stops listening and polls its chains instead: the flood is
// noticed, and a rule deleted meanwhile is still repaired.
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

/** kube-proxy-shaped churn: `count` DNAT rules in chains of their own, in one restore. */
function churn(count: number, round: number): string {
  const lines = ['*nat', ':KUBE-FLOOD - [0:0]'];
  for (let i = 0; i < count; i++) lines.push(`-A KUBE-FLOOD -p tcp -m comment --comment "svc ${round}-${i}" -j DNAT --to-destination 10.96.${(i >> 8) & 255}.${i & 255}:80`);
  return `${[...lines, 'COMMIT'].join('\n')}\n`;
}

beforeAll(async () => {
  await sweepStaleNetns();
  const ns = await lab.add('flood');
  const other = await lab.add('flood-peer');
  await lab.link({ ns, dev: 'eth0', cidr: '10.123.0.2/24' }, { ns: other, dev: 'eth0', cidr: '10.123.0.1/24' });
  runner = nsRunner(ns);
  const input = backendInput({ backend: 'host-gw', peers: [peerLease(1, { vxlan: false })] });
  log = captureLog();
  const logger = log.logger;
  const r = new Reconciler({ runner, logger, desired: () => desiredState(input), ensureForwarding: nsForwarding(ns), resyncMs: 600_000 });
  const poll = (s: AbortSignal): Promise<void> => pollChains({ runner, logger, masq: () => desiredState(input).masq, intervalMs: 1_000, onDrift: (x) => r.trigger(x) }, s);
  const flood = { bytes: 50_000, windowMs: 5_000, cooldownMs: 600_000 };
  loops = Promise.all([r.run(ctl.signal), runMonitors({ watch: nsWatch(ns), logger, ctx: { underlay: 'eth0' }, nft: true, onEvent: (s) => r.trigger(s), poll, flood }, ctl.signal)]);
  await waitFor(() => r.lastPass()?.converged === true, { timeoutMs: 10_000, what: 'first converged pass' });
});
afterAll(async () => {
  ctl.abort();
  await loops;
  await lab.destroy();
});

describe('nft monitor flooded by other programs', () => {
  it('switches to polling the chains, and still repairs a deleted rule', async () => {
    const baseline = JSON.stringify(await kernelView(runner));
    for (let round = 0; round < 2; round++) await runner('iptables-restore', ['--noflush', '-w', '5'], { input: churn(2_000, round), timeoutMs: 30_000 });
    await waitFor(() => log.lines.some((l) => l.msg.startsWith('nft monitor flooded')), { timeoutMs: 10_000, what: 'flood noticed' });
    const repairs = log.lines.filter((l) => l.msg === 'repaired dataplane drift').length;
    await runner('iptables', ['-t', 'nat', '-D', 'TWILL-POSTRTG', '5']);
    const broken = performance.now();
    await waitFor(async () => log.lines.filter((l) => l.msg === 'repaired dataplane drift').length > repairs && JSON.stringify(await kernelView(runner)) === baseline, { timeoutMs: 5_000, what: 'repair while polling' });
    expect(performance.now() - broken).toBeLessThan(2_500);
  });
});
