// Drills that break a node's kernel state or its twill process: the
// masquerade rule, the nat table, a peer's route, neighbour and FDB entry,
// the vxlan device; twill killed and restarted under a steady ping. They
// apply to both store modes.
import type { Cluster } from './cluster.ts';
import { BOTH_STORES, entries, logCount, ownState, steadyPing, type Drill } from './drill-kit.ts';
import { QUIET_MS, timeRepair, watchKernel, type Healing } from './kernel-watch.ts';
import { passesBetween, renderStages } from './pass-log.ts';
import { leaseOf } from './store-view.ts';
import { SLOW_MACHINE_FACTOR, until } from './kit/wait.ts';

export const first = async (c: Cluster, i: number): Promise<string> =>
  (await c.nodes())[i]?.name ?? '';

/**
 * Break something on one node and time the repair from the node's kernel
 * (kernel-watch.ts): the break's event to the last repair event before the
 * node held exactly what it held before. Connectivity, no changed pod IP and
 * no leftovers are checked after, by the runner (drills.ts).
 */
function kernelDrill(o: {
  name: string;
  broke: string;
  only?: 'vxlan';
  argv: (c: Cluster) => Promise<string[]>;
}): Drill {
  return {
    name: o.name,
    broke: o.broke,
    targetMs: 1_000,
    stores: BOTH_STORES,
    ...(o.only ? { only: o.only } : {}),
    async run(c) {
      const node = await first(c, 0);
      const argv = await o.argv(c);
      const before = await ownState(c, node);
      const w = await watchKernel(c, node);
      try {
        const h = await timeRepair(w, {
          breakIt: () => c.sh({ node }, argv),
          whole: async () => (await ownState(c, node)) === before,
          boundMs: SLOW_MACHINE_FACTOR * 1_000,
        });
        const notes = [`on ${node}: ${argv.join(' ')}`, observed(h)];
        if (h.brokeAt !== undefined && h.healedAt !== undefined)
          notes.push(
            ...renderStages(
              passesBetween(await c.twillLog(node), h.brokeAt, h.healedAt + 2_000),
              h.brokeAt,
            ),
          );
        return { healedMs: h.healedMs, ok: h.healedMs !== undefined, notes };
      } finally {
        await w.stop();
      }
    },
  };
}

/** How the time was taken, and what taking it cost. */
function observed(h: Healing): string {
  const lag =
    h.breakLagMs === undefined
      ? 'no break event seen'
      : `break event stamped ${Math.round(h.breakLagMs)} ms after the break command started`;
  return `timed by ip/nft monitors in the node's namespace: ${lag}; ${h.checks} state check(s), each after ${QUIET_MS} ms without events`;
}

const peerSubnet = async (c: Cluster): Promise<string> =>
  (await leaseOf(c, (await c.nodes())[1]?.ip ?? ''))?.subnet ?? '';

export const KERNEL_DRILLS: readonly Drill[] = [
  kernelDrill({
    name: 'masq-rule',
    broke: 'MASQUERADE rule deleted',
    argv: async () => ['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '5'],
  }),
  kernelDrill({
    name: 'nat-flush',
    broke: 'whole nat table flushed',
    argv: async () => ['iptables', '-t', 'nat', '-F'],
  }),
  kernelDrill({
    name: 'peer-route',
    broke: 'a peer route deleted',
    argv: async (c) => ['ip', 'route', 'del', await peerSubnet(c)],
  }),
  kernelDrill({
    name: 'peer-neigh',
    broke: 'a peer neighbour deleted',
    only: 'vxlan',
    argv: async (c) => [
      'ip',
      'neigh',
      'del',
      (await peerSubnet(c)).split('/')[0] ?? '',
      'dev',
      'twill.1',
    ],
  }),
  kernelDrill({
    name: 'peer-fdb',
    broke: 'a peer FDB entry deleted',
    only: 'vxlan',
    argv: async (c) => {
      const peer = (await c.nodes())[1];
      const line =
        (await entries(c, await first(c, 0))).fdb.find((f) =>
          f.includes(`dst ${peer?.ip ?? '?'} `),
        ) ?? '';
      return [
        'bridge',
        'fdb',
        'del',
        line.split(' ')[0] ?? '',
        'dev',
        'twill.1',
        'dst',
        peer?.ip ?? '',
        'self',
      ];
    },
  }),
  kernelDrill({
    name: 'vxlan-device',
    broke: 'the vxlan device deleted',
    only: 'vxlan',
    argv: async () => ['ip', 'link', 'del', 'twill.1'],
  }),
  {
    name: 'kill-restart',
    broke: 'twill SIGKILLed and restarted',
    targetMs: 10_000,
    stores: BOTH_STORES,
    async run(c) {
      const [a, b] = await c.pods().then((ps) => [ps[0], ps.find((p) => p.node !== ps[0]?.node)]);
      const victim = b?.node ?? '';
      const before = await leaseOf(c, (await c.nodes()).find((n) => n.name === victim)?.ip ?? '');
      const acquired = await logCount(c, victim, 'lease acquired');
      const ping = steadyPing(c, { from: a?.name ?? '', to: b?.ip ?? '', ms: 4_000 });
      await new Promise((r) => setTimeout(r, 500));
      const since = performance.now();
      await c.stopTwill(victim, 'kill');
      await c.startTwill(victim);
      const healedMs = await until(
        async () => (await logCount(c, victim, 'lease acquired')) > acquired,
        { timeoutMs: 20_000, since },
      );
      const stats = await ping;
      const after = await leaseOf(c, (await c.nodes()).find((n) => n.name === victim)?.ip ?? '');
      const notes = [
        `${victim} back in ${Math.round(healedMs ?? -1)} ms; steady ping ${a?.name} → ${b?.name}: ${stats.received}/${stats.sent}`,
        `subnet ${before?.subnet} → ${after?.subnet}`,
      ];
      return {
        healedMs,
        ok: healedMs !== undefined && stats.received === stats.sent && before?.key === after?.key,
        notes,
      };
    },
  },
];
