// Where iptables has no rule event stream (iptables-legacy), twill polls its
// two chains every second: with the nft monitor off, a deleted MASQUERADE
// rule, a swapped order and a flushed nat table still come back, exactly.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelView, peerLease } from '../helpers/dataplane.ts';
import { startGuardedNode, type GuardedNode } from '../helpers/guarded.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';

let node: GuardedNode;
let runner: Runner;
const repairs = (): number => node.repairs();

beforeAll(async () => {
  node = await startGuardedNode({
    short: 'poll',
    input: backendInput({ backend: 'host-gw', peers: [peerLease(1, { vxlan: false })] }),
    watch: 'poll',
  });
  runner = node.runner;
});
afterAll(() => node.stop());

describe('iptables poll (no nft monitor)', () => {
  const cases: [string, string[][]][] = [
    ['MASQUERADE rule deleted', [['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '6']]],
    [
      'rule order swapped',
      [
        ['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '1'],
        [
          'iptables',
          '-t',
          'nat',
          '-A',
          'TWILL-POSTRTG',
          '-m',
          'mark',
          '--mark',
          '0x4000/0x4000',
          '-m',
          'comment',
          '--comment',
          'twill masq',
          '-j',
          'RETURN',
        ],
      ],
    ],
    ['whole nat table flushed', [['iptables', '-t', 'nat', '-F']]],
  ];
  for (const [what, commands] of cases) {
    it(`repairs: ${what}, within the poll interval plus a pass`, async () => {
      const baseline = JSON.stringify(await kernelView(runner));
      const before = repairs();
      for (const c of commands) await runner(c[0] as string, c.slice(1));
      const broken = performance.now();
      // the poll may repair before we could look: count the repair, then compare the state
      await waitFor(
        async () => repairs() > before && JSON.stringify(await kernelView(runner)) === baseline,
        { timeoutMs: slowBound(2_000), what },
      );
      expect(performance.now() - broken).toBeLessThan(slowBound(2_000)); // a 1 s poll, then a pass
    });
  }
});
