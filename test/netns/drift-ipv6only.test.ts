// Drift repair on an IPv6-only node ("EnableIPv4": false) on a real kernel:
// the reconciler runs with its kernel monitors (ip monitor, nft monitor) over
// a vxlan node with IPv4 off, and damage to twill's objects (a route,
// neighbour or FDB entry on twill-v6.<VNI>, the device itself, an ip6tables
// rule, jump or table) is undone, back to exactly the state it had, by the
// least work that can, as with dual-stack (drift-dualstack.test.ts), and no
// IPv4 object of twill's ever appears. How fast is the bench's business; the
// bound here holds on a machine ten times slower.
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
    ipv4: false,
    peers: [1, 2, 4].map((n) => peerLease(n, { vxlan: true, ipv6: true, ipv4: false })),
  });
  node = await startGuardedNode({ short: 'drift6o', input, watch: 'nft', settleMs: 5 });
  runner = node.runner;
  await new Promise((res) => setTimeout(res, 300)); // let the monitors' start-up passes settle
  baseline = await view();
  // nothing IPv4 of twill's
  expect(baseline.devices).toEqual(['twill-v6.1']);
  expect([baseline.routes, baseline.postrtg, baseline.fwd]).toEqual([[], '', '']);
  expect(baseline.postrouting).not.toContain('TWILL');
  expect(baseline.forward).not.toContain('TWILL');
  expect(baseline.v6?.routes).toHaveLength(3);
  expect(baseline.v6?.neighs).toHaveLength(3);
  expect(baseline.v6?.fdb).toHaveLength(3);
  expect(baseline.v6?.postrtg).toContain('-A TWILL-POSTRTG');
  expect(baseline.v6?.fwd).toContain('-A TWILL-FWD');
});
afterAll(() => node.stop());

const FWD6_RULE = [
  '-s',
  'fd00::/48',
  '-m',
  'comment',
  '--comment',
  'twill forward',
  '-j',
  'ACCEPT',
];

const DRIFTS: [string, string[][], 'repair' | 'chains' | 'entries'][] = [
  ['IPv6 peer route deleted', [['ip', '-6', 'route', 'del', 'fd00:0:0:1::/64']], 'repair'],
  [
    'IPv6 neighbour deleted',
    [['ip', '-6', 'neigh', 'del', 'fd00:0:0:2::', 'dev', 'twill-v6.1']],
    'repair',
  ],
  [
    'IPv6 FDB entry deleted',
    [['bridge', 'fdb', 'del', '02:00:00:06:00:04', 'dev', 'twill-v6.1', 'dst', 'fd7b::4', 'self']],
    'repair',
  ],
  ['IPv6 vxlan device deleted', [['ip', 'link', 'del', 'twill-v6.1']], 'entries'],
  [
    'ip6tables forward rule deleted',
    [['ip6tables', '-t', 'filter', '-D', 'TWILL-FWD', ...FWD6_RULE]],
    'chains',
  ],
  [
    'ip6tables jump to the masquerade chain deleted',
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
  ['ip6 nat table deleted (nft)', [['nft', 'delete', 'table', 'ip6', 'nat']], 'chains'],
];

describe('IPv6-only drift repair with kernel monitors', () => {
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
