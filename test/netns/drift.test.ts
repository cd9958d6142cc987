// Drift repair on a real kernel: the reconciler runs with its kernel monitors
// (ip monitor, nft monitor) and a resync timer too slow to help, and every
// kind of damage an operator or another program can do is undone, back to
// exactly the state it had, chain order included, by the least work that
// can: a deleted route, neighbour or FDB entry by a repair pass that only
// re-applies it (one batch in a kept process, no observing), a rule change by a pass over
// the chains alone, a device by a pass over the entries (not the chains). How fast is the bench's
// and
// the drills' business; the bound here holds on a machine ten times slower.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelView, peerLease, type KernelView } from '../helpers/dataplane.ts';
import { expectRepairKind, startGuardedNode, type GuardedNode } from '../helpers/guarded.ts';
import { waitFor } from '../../lab/kit/wait.ts';

let node: GuardedNode;
let runner: Runner;
let baseline: KernelView;
const repairs = (): number => node.repairs();

const sh = (args: string[], input?: string): Promise<unknown> =>
  runner(args[0] as string, args.slice(1), input === undefined ? {} : { input });

beforeAll(async () => {
  const input = backendInput({
    backend: 'vxlan',
    peers: [1, 2, 4].map((n) => peerLease(n, { vxlan: true })),
  });
  node = await startGuardedNode({ short: 'drift', input, watch: 'nft', settleMs: 5 });
  runner = node.runner;
  await new Promise((res) => setTimeout(res, 300)); // let the monitors' start-up passes settle
  baseline = await kernelView(runner);
  expect(baseline.routes).toHaveLength(3);
});
afterAll(() => node.stop());

const MASQ_RULE = [
  '-s',
  '10.244.0.0/16',
  '!',
  '-d',
  '224.0.0.0/4',
  '-m',
  'comment',
  '--comment',
  'twill masq',
  '-j',
  'MASQUERADE',
  '--random-fully',
];

const DRIFTS: [string, string[][], 'repair' | 'chains' | 'entries'][] = [
  ['peer route deleted', [['ip', 'route', 'del', '10.244.1.0/24']], 'repair'],
  ['neighbour deleted', [['ip', 'neigh', 'del', '10.244.2.0', 'dev', 'twill.1']], 'repair'],
  [
    'neighbour changed',
    [
      [
        'ip',
        'neigh',
        'replace',
        '10.244.2.0',
        'lladdr',
        '02:00:00:00:00:99',
        'dev',
        'twill.1',
        'nud',
        'permanent',
      ],
    ],
    'repair',
  ],
  [
    'FDB entry deleted',
    [['bridge', 'fdb', 'del', '02:00:00:00:00:04', 'dev', 'twill.1', 'dst', '10.123.0.4', 'self']],
    'repair',
  ],
  [
    'foreign FDB entry towards a peer',
    [
      [
        'bridge',
        'fdb',
        'append',
        '02:00:00:00:00:77',
        'dev',
        'twill.1',
        'dst',
        '10.123.0.4',
        'self',
        'permanent',
      ],
    ],
    'entries',
  ],
  [
    "peer route replaced by another of twill's protocol",
    [
      [
        'ip',
        'route',
        'replace',
        '10.244.1.0/24',
        'via',
        '10.123.0.1',
        'dev',
        'eth0',
        'proto',
        '151',
      ],
    ],
    'entries',
  ],
  ['vxlan device deleted', [['ip', 'link', 'del', 'twill.1']], 'entries'],
  ['vxlan device down', [['ip', 'link', 'set', 'twill.1', 'down']], 'entries'],
  [
    'MASQUERADE rule deleted',
    [['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', ...MASQ_RULE]],
    'chains',
  ],
  ['whole nat table flushed', [['iptables', '-t', 'nat', '-F']], 'chains'],
  ['nat table deleted (nft)', [['nft', 'delete', 'table', 'ip', 'nat']], 'chains'],
  [
    'jump to the chain deleted',
    [
      [
        'iptables',
        '-t',
        'nat',
        '-D',
        'POSTROUTING',
        '-m',
        'comment',
        '--comment',
        'twill masq',
        '-j',
        'TWILL-POSTRTG',
      ],
    ],
    'chains',
  ],
  [
    'rule order swapped',
    [
      ['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', ...MASQ_RULE],
      ['iptables', '-t', 'nat', '-I', 'TWILL-POSTRTG', '1', ...MASQ_RULE],
    ],
    'chains',
  ],
  ['duplicate rule', [['iptables', '-t', 'nat', '-A', 'TWILL-POSTRTG', ...MASQ_RULE]], 'chains'],
  ['forward chain flushed', [['iptables', '-t', 'filter', '-F', 'TWILL-FWD']], 'chains'],
];

describe('drift repair with kernel monitors', () => {
  for (const [what, commands, kind] of DRIFTS) {
    it(`repairs: ${what}, exactly, by a ${kind} pass`, async () => {
      const before = repairs();
      for (const c of commands) await sh(c);
      // twill saw the damage and repaired it (not merely: the state looks right)
      await waitFor(
        async () =>
          repairs() > before &&
          JSON.stringify(await kernelView(runner)) === JSON.stringify(baseline),
        { timeoutMs: 10_000, what: `repair of ${what}` },
      );
      expectRepairKind(node, before, what, kind);
    });
  }
});
