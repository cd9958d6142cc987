// When other programs flood `nft monitor` (kube-proxy rewriting thousands of
// rules), twill stops listening and lists its chains every second instead
// (one long-lived `nft -i`): the flood is noticed, a rule deleted meanwhile is
// still repaired, and so are later drifts, found by the listing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelView, peerLease } from '../helpers/dataplane.ts';
import { startGuardedNode, type GuardedNode } from '../helpers/guarded.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';

let node: GuardedNode;
let runner: Runner;
let log: GuardedNode['log'];
let baseline: string;

/** kube-proxy-shaped churn: `count` DNAT rules in chains of their own, in one restore. */
function churn(count: number, round: number): string {
  const lines = ['*nat', ':KUBE-FLOOD - [0:0]'];
  for (let i = 0; i < count; i++)
    lines.push(
      `-A KUBE-FLOOD -p tcp -m comment --comment "svc ${round}-${i}" -j DNAT --to-destination 10.96.${(i >> 8) & 255}.${i & 255}:80`,
    );
  return `${[...lines, 'COMMIT'].join('\n')}\n`;
}

beforeAll(async () => {
  const flood = { bytes: 50_000, windowMs: 5_000, cooldownMs: 600_000 };
  node = await startGuardedNode({
    short: 'flood',
    input: backendInput({ backend: 'host-gw', peers: [peerLease(1, { vxlan: false })] }),
    watch: 'nft-then-poll',
    flood,
  });
  runner = node.runner;
  log = node.log;
});
afterAll(() => node.stop());

describe('nft monitor flooded by other programs', () => {
  it('switches to listing the chains, and still repairs a deleted rule', async () => {
    baseline = JSON.stringify(await kernelView(runner));
    for (let round = 0; round < 2; round++)
      await runner('iptables-restore', ['--noflush', '-w', '5'], {
        input: churn(2_000, round),
        timeoutMs: 30_000,
      });
    await waitFor(() => log.lines.some((l) => l.msg.startsWith('nft monitor flooded')), {
      timeoutMs: 10_000,
      what: 'flood noticed',
    });
    const repairs = log.lines.filter((l) => l.msg === 'repaired dataplane drift').length;
    await runner('iptables', ['-t', 'nat', '-D', 'TWILL-POSTRTG', '5']);
    const broken = performance.now();
    await waitFor(
      async () =>
        log.lines.filter((l) => l.msg === 'repaired dataplane drift').length > repairs &&
        JSON.stringify(await kernelView(runner)) === baseline,
      { timeoutMs: slowBound(2_000), what: 'repair while polling' },
    );
    expect(performance.now() - broken).toBeLessThan(slowBound(2_000));
  });

  it('repairs what the listing finds: a deleted masquerade rule, a flushed chain or table, a deleted table', async () => {
    // one listing round more than the switch needs: its first full round is in
    await new Promise((r) => setTimeout(r, 1_500));
    for (const [file, ...args] of [
      ['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '5'],
      ['iptables', '-t', 'nat', '-F', 'TWILL-POSTRTG'],
      ['iptables', '-t', 'nat', '-F'],
      ['nft', 'delete', 'table', 'ip', 'nat'],
    ] as const) {
      // each break after the last repair's verification pass (the first one after the test
      // above's), which would otherwise repair it first: on a slow day its trigger was
      // 'verification'
      await waitFor(() => node.converged(), {
        timeoutMs: slowBound(2_000),
        what: `a converged pass before ${file} ${args.join(' ')}`,
      });
      const repairs = node.repairs();
      await runner(file, args);
      const broken = performance.now();
      await waitFor(
        async () =>
          node.repairs() > repairs && JSON.stringify(await kernelView(runner)) === baseline,
        { timeoutMs: slowBound(2_000), what: `repair after ${file} ${args.join(' ')}` },
      );
      expect(performance.now() - broken).toBeLessThan(slowBound(2_000));
      // the listing saw it: the first repair since the break was its pass
      expect(node.repairPasses()[repairs]?.trigger).toBe('nft listing');
    }
  });
});
