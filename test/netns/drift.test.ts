// Drift repair on a real kernel: the reconciler runs with its kernel monitors
// (ip monitor, nft monitor) and a resync timer too slow to help, and every
// kind of damage an operator or another program can do is undone within one
// second, back to exactly the state it had, chain order included.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelView, peerLease, type KernelView } from '../helpers/dataplane.ts';
import { startGuardedNode, type GuardedNode } from '../helpers/guarded.ts';
import { waitFor } from '../helpers/ports.ts';

let node: GuardedNode;
let runner: Runner;
let baseline: KernelView;
const repairs = (): number => node.repairs();

const sh = (args: string[], input?: string): Promise<unknown> => runner(args[0] as string, args.slice(1), input === undefined ? {} : { input });

beforeAll(async () => {
  const input = backendInput({ backend: 'vxlan', peers: [1, 2, 4].map((n) => peerLease(n, { vxlan: true })) });
  node = await startGuardedNode({ short: 'drift', input, watch: 'nft', settleMs: 5 });
  runner = node.runner;
  await new Promise((res) => setTimeout(res, 300)); // let the monitors' start-up passes settle
  baseline = await kernelView(runner);
  expect(baseline.routes).toHaveLength(3);
});
afterAll(() => node.stop());

const MASQ_RULE = ['-s', '10.244.0.0/16', '!', '-d', '224.0.0.0/4', '-m', 'comment', '--comment', 'twill masq', '-j', 'MASQUERADE', '--random-fully'];

const DRIFTS: [string, string[][] | (() => Promise<unknown>)][] = [
  ['peer route deleted', [['ip', 'route', 'del', '10.244.1.0/24']]],
  ['neighbour deleted', [['ip', 'neigh', 'del', '10.244.2.0', 'dev', 'twill.1']]],
  ['FDB entry deleted', [['bridge', 'fdb', 'del', '02:00:00:00:00:04', 'dev', 'twill.1', 'dst', '10.123.0.4', 'self']]],
  ['vxlan device deleted', [['ip', 'link', 'del', 'twill.1']]],
  ['vxlan device down', [['ip', 'link', 'set', 'twill.1', 'down']]],
  ['MASQUERADE rule deleted', [['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', ...MASQ_RULE]]],
  ['whole nat table flushed', [['iptables', '-t', 'nat', '-F']]],
  ['nat table deleted (nft)', [['nft', 'delete', 'table', 'ip', 'nat']]],
  ['jump to the chain deleted', [['iptables', '-t', 'nat', '-D', 'POSTROUTING', '-m', 'comment', '--comment', 'twill masq', '-j', 'TWILL-POSTRTG']]],
  ['rule order swapped', [['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', ...MASQ_RULE], ['iptables', '-t', 'nat', '-I', 'TWILL-POSTRTG', '1', ...MASQ_RULE]]],
  ['duplicate rule', [['iptables', '-t', 'nat', '-A', 'TWILL-POSTRTG', ...MASQ_RULE]]],
  ['forward chain flushed', [['iptables', '-t', 'filter', '-F', 'TWILL-FWD']]],
];

describe('drift repair with kernel monitors', () => {
  for (const [what, commands] of DRIFTS) {
    it(`repairs: ${what}, within 1 s, exactly`, async () => {
      const started = performance.now();
      const before = repairs();
      if (typeof commands === 'function') await commands();
      else for (const c of commands) await sh(c);
      const broken = performance.now();
      // twill saw the damage and repaired it (not merely: the state looks right)
      await waitFor(async () => repairs() > before && JSON.stringify(await kernelView(runner)) === JSON.stringify(baseline), { timeoutMs: 5_000, what: `repair of ${what}` });
      const repairMs = performance.now() - broken;
      expect(repairMs, `${what} repaired in ${Math.round(repairMs)} ms (broken in ${Math.round(broken - started)} ms)`).toBeLessThan(1_000);
    });
  }
});
