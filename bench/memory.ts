// The daemon's memory against the number of peers (issue 17's scaling row): one host-gw node, a
// real etcd, the built daemon started afresh at 0, 1,000, 5,000 and 20,000 peer leases, its VmRSS
// read SETTLE_MS after every peer's route is in the kernel (settled: V8 has returned the start-up
// burst's heap by then), and the growth per peer from none to the most. host-gw: the fewest
// kernel entries per peer, so the figure is the daemon's own bookkeeping (the dataplane suite
// has every backend at 5,000).
import { sweepStaleNetns } from '../lab/kit/netns.ts';
import { stopProcess } from '../lab/kit/process.ts';
import { waitFor } from '../lab/kit/wait.ts';
import { ROUTE_PROTOCOL } from '../src/dataplane/model.ts';
import {
  GROWTH_TARGET_KIB,
  logLines,
  ownedRoutes,
  POLL_MS,
  putLeases,
  RSS_TARGET_MIB,
  SETTLE_MS,
  setupNode,
  sh,
  startTwill,
  statusMiB,
  stopNode,
  type Node,
} from './node.ts';
import type { BenchRow, BenchSuite } from './table.ts';

const COUNTS = [0, 1_000, 5_000, 20_000] as const;

/** Starts the daemon over `peers` leases, waits until it has routed them all; settled RSS. */
async function settledRss(n: Node, peers: number): Promise<number> {
  await putLeases(n, peers);
  await startTwill(n);
  if (peers === 0)
    await waitFor(async () => (await logLines(n.log)).some((l) => l.msg === 'dataplane updated'), {
      timeoutMs: 60_000,
      what: 'the daemon with no peers',
      everyMs: POLL_MS,
    });
  else
    await waitFor(async () => (await ownedRoutes(n.ns)) === peers, {
      timeoutMs: 300_000,
      what: `every route of ${peers} peers`,
      everyMs: 250,
    });
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const rss = await statusMiB(n.child?.pid);
  if (n.child) await stopProcess(n.child);
  // the next start programs its peers afresh
  await sh(n.ns, ['ip', 'route', 'flush', 'proto', String(ROUTE_PROTOCOL)]);
  return rss;
}

export const memorySuite: BenchSuite = {
  name: 'memory',
  async run() {
    await sweepStaleNetns();
    const n = await setupNode({ backend: 'host-gw', name: 'bench-mem' });
    const rows: BenchRow[] = [];
    try {
      const rss: number[] = [];
      for (const peers of COUNTS) rss.push(await settledRss(n, peers));
      const [floor = 0, most = 0] = [rss[0], rss.at(-1)];
      const growthKiB = ((most - floor) * 1024) / (COUNTS.at(-1) ?? 1);
      COUNTS.forEach((peers, i) =>
        rows.push({
          suite: 'memory',
          figure: `daemon RSS, settled, ${peers} peers, host-gw`,
          value: Math.round(rss[i] ?? 0),
          unit: 'MiB',
          ...(peers === 5_000
            ? {
                target: {
                  text: `≤ ${RSS_TARGET_MIB} MiB`,
                  met: (rss[i] ?? Infinity) <= RSS_TARGET_MIB,
                },
              }
            : {}),
        }),
      );
      rows.push({
        suite: 'memory',
        figure: `  growth per peer, 0 → ${COUNTS.at(-1)} peers, host-gw`,
        value: Number(growthKiB.toFixed(2)),
        unit: 'KiB',
        target: { text: `≤ ${GROWTH_TARGET_KIB} KiB/peer`, met: growthKiB <= GROWTH_TARGET_KIB },
      });
    } finally {
      if (n.child) await stopProcess(n.child).catch(() => undefined);
      await stopNode(n);
    }
    return rows;
  },
};
