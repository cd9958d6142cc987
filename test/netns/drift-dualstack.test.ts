// Drift repair in dual-stack on a real kernel: the reconciler runs with its
// kernel monitors (ip monitor, nft monitor) over a vxlan node with IPv6 on,
// and every kind of damage to twill's IPv6 objects (a route, neighbour or
// FDB entry on twill-v6.<VNI>, the device itself, an ip6tables rule, jump or
// table) is undone, back to exactly the state it had in both families, by
// the least work that can, as for IPv4 (drift.test.ts). How fast is the
// bench's and the drills' business; the bound here holds on a machine ten
// times slower.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelView, peerLease, type KernelView } from '../helpers/dataplane.ts';
import { expectRepairKind, startGuardedNode, type GuardedNode } from '../helpers/guarded.ts';
import { waitFor } from '../../lab/kit/wait.ts';

let node: GuardedNode;
let runner: Runner;
let baseline: KernelView;
const repairs = (): number => node.repairs();
const view = (): Promise<KernelView> => kernelView(runner, { ipv6: true });

const sh = (args: string[]): Promise<unknown> => runner(args[0] as string, args.slice(1));

beforeAll(async () => {
  const input = backendInput({
    backend: 'vxlan',
    ipv6: true,
    peers: [1, 2, 4].map((n) => peerLease(n, { vxlan: true, ipv6: true })),
  });
  node = await startGuardedNode({ short: 'drift6', input, watch: 'nft', settleMs: 5 });
  runner = node.runner;
  await new Promise((res) => setTimeout(res, 300)); // let the monitors' start-up passes settle
  baseline = await view();
  expect(baseline.routes).toHaveLength(3);
  expect(baseline.v6?.routes).toHaveLength(3);
  expect(baseline.v6?.neighs).toHaveLength(3);
  expect(baseline.v6?.fdb).toHaveLength(3);
  expect(baseline.v6?.postrtg).toContain('-A TWILL-POSTRTG');
  expect(baseline.v6?.fwd).toContain('-A TWILL-FWD');
});
afterAll(() => node.stop());

const MASQ6_RULE = [
  '-s',
  'fd00::/48',
  '!',
  '-d',
  'ff00::/8',
  '-m',
  'comment',
  '--comment',
  'twill masq',
  '-j',
  'MASQUERADE',
  '--random-fully',
];

const DRIFTS: [string, string[][], 'repair' | 'chains' | 'entries'][] = [
  ['IPv6 peer route deleted', [['ip', '-6', 'route', 'del', 'fd00:0:0:1::/64']], 'repair'],
  [
    'IPv6 neighbour deleted',
    [['ip', '-6', 'neigh', 'del', 'fd00:0:0:2::', 'dev', 'twill-v6.1']],
    'repair',
  ],
  [
    'IPv6 neighbour changed',
    [
      [
        'ip',
        '-6',
        'neigh',
        'replace',
        'fd00:0:0:2::',
        'lladdr',
        '02:00:00:06:00:99',
        'dev',
        'twill-v6.1',
        'nud',
        'permanent',
      ],
    ],
    'repair',
  ],
  [
    'IPv6 FDB entry deleted',
    [['bridge', 'fdb', 'del', '02:00:00:06:00:04', 'dev', 'twill-v6.1', 'dst', 'fd7b::4', 'self']],
    'repair',
  ],
  ['IPv6 vxlan device deleted', [['ip', 'link', 'del', 'twill-v6.1']], 'entries'],
  ['IPv6 vxlan device down', [['ip', 'link', 'set', 'twill-v6.1', 'down']], 'entries'],
  [
    'ip6tables MASQUERADE rule deleted',
    [['ip6tables', '-t', 'nat', '-D', 'TWILL-POSTRTG', ...MASQ6_RULE]],
    'chains',
  ],
  [
    'ip6tables rule order swapped',
    [
      ['ip6tables', '-t', 'nat', '-D', 'TWILL-POSTRTG', ...MASQ6_RULE],
      ['ip6tables', '-t', 'nat', '-I', 'TWILL-POSTRTG', '1', ...MASQ6_RULE],
    ],
    'chains',
  ],
  [
    'ip6tables jump to the chain deleted',
    [
      [
        'ip6tables',
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
  ['ip6tables forward chain flushed', [['ip6tables', '-t', 'filter', '-F', 'TWILL-FWD']], 'chains'],
  ['ip6 nat table deleted (nft)', [['nft', 'delete', 'table', 'ip6', 'nat']], 'chains'],
];

describe('dual-stack drift repair with kernel monitors', () => {
  for (const [what, commands, kind] of DRIFTS) {
    it(`repairs: ${what}, exactly, by a ${kind} pass`, async () => {
      const before = repairs();
      for (const c of commands) await sh(c);
      // twill saw the damage and repaired it (not merely: the state looks right)
      await waitFor(
        async () => repairs() > before && JSON.stringify(await view()) === JSON.stringify(baseline),
        { timeoutMs: 10_000, what: `repair of ${what}` },
      );
      expectRepairKind(node, before, what, kind);
    });
  }
});
