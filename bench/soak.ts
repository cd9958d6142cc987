// A churn soak (issue 17: a lighter daemon must stay light): one vxlan node (the built daemon, a
// real etcd) holds 5,000 peer leases; after it has programmed them and settled, a small etcd3
// client in the etcd namespace puts a new peer lease 10 times a second and deletes the one put
// WINDOW puts before (each lives 10 s; the subnets come round again from a pool of 1,000), for
// 30 minutes by default. The daemon's VmRSS is sampled every 5 s (a line a minute on stderr);
// when the churn ends, its last leases are deleted and the node must be back to exactly the
// 5,000 peers' routes. Settled RSS, before and after the churn, is the least read over a window
// that holds a resync pass (settledMiB). The rows: settled RSS after the churn against before it
// (the target: at most 5 % more), the most seen during the churn, the trend of the second half's
// samples and the events the client made. Not in the default run (it would triple it):
// `npm run bench -- --only soak [--soak-minutes N]`.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { sweepStaleNetns } from '../lab/kit/netns.ts';
import { exited, hasEnded, stopProcess } from '../lab/kit/process.ts';
import { waitFor } from '../lab/kit/wait.ts';
import {
  ETCD_PREFIX,
  ownedRoutes,
  ownLeaseKey,
  peer,
  putLeases,
  SETTLE_MS,
  setupNode,
  startTwill,
  statusMiB,
  stopNode,
  type Node,
} from './node.ts';
import type { BenchRow, BenchSuite } from './table.ts';

const PEERS = 5_000;
export const DEFAULT_SOAK_MINUTES = 30;
/** new leases a second (and as many deleted, once the window is full) */
const RATE = 10;
/** leases alive at once beyond the 5,000: each lives WINDOW / RATE seconds */
const WINDOW = 100;
/** the churned peers: after the 5,000, so many that a lease's subnet is never re-put while alive */
const POOL = 1_000;
const SAMPLE_MS = 5_000;
/**
 * Settled, before and after the churn: the least of the RSS read every SAMPLE_MS from SETTLE_MS to
 * this long after the routes are right, a window that holds a resync pass (every 60 s ± 10 %):
 * RSS can rise by 10–15 MiB around one and stay there until the next (a kube-mode daemon read
 * 142 MiB from 10 to 45 s after convergence, 156 MiB at 60 and 90 s), so one read would say where
 * it fell in that cycle rather than what the churn left.
 */
const SETTLED_UNTIL_MS = 90_000;
/**
 * How much more the settled RSS may be after the churn. Settled RSS moves 2–3 MiB between runs of
 * the same daemon (the floors of the dataplane and memory suites in one run: 83–86 MiB), so 5 %
 * of the ~97 MiB before (~4.8 MiB) is above that noise; 30 minutes make 36,000 events, so a leak
 * of about 140 bytes an event or more crosses it (a shorter soak is that much less sensitive).
 */
const GROWTH_TARGET_PCT = 5;

/**
 * Puts peer lease pool[k % pool.length] every 1000/rate ms on a fixed schedule and deletes the
 * one `window` puts older, for `durationMs` or until SIGTERM; then deletes the rest and prints
 * {"puts", "deletes", "late", "ms"} (late: ticks that started more than one period behind).
 */
const CHURN_SCRIPT = (o: {
  endpoint: string;
  backend: string;
  pool: number[];
  window: number;
  rate: number;
  durationMs: number;
}): string => `
import { Etcd3 } from 'etcd3';
import { leaseValue, peer } from './bench/node.ts';
const o = ${JSON.stringify(o)};
const c = new Etcd3({ hosts: o.endpoint });
const key = (i) => '${ETCD_PREFIX}/subnets/' + peer(i).key;
let stop = false;
process.on('SIGTERM', () => { stop = true; });
const live = [];
let puts = 0;
let deletes = 0;
let late = 0;
const every = 1000 / o.rate;
const t0 = performance.now();
for (let k = 0; !stop && performance.now() - t0 < o.durationMs; k++) {
  const wait = t0 + k * every - performance.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  else if (wait < -every) late++;
  const i = o.pool[k % o.pool.length];
  await c.put(key(i)).value(leaseValue(peer(i), o.backend));
  puts++;
  live.push(i);
  if (live.length > o.window) {
    await c.delete().key(key(live.shift()));
    deletes++;
  }
}
for (const i of live) {
  await c.delete().key(key(i));
  deletes++;
}
process.stdout.write(JSON.stringify({ puts, deletes, late, ms: performance.now() - t0 }) + '\\n');
c.close();
`;

interface Sample {
  readonly atMs: number;
  readonly mib: number;
}

/** Least-squares slope of the samples, MiB per minute. */
function slopePerMinute(samples: readonly Sample[]): number {
  const n = samples.length;
  if (n < 2) return 0;
  const mx = samples.reduce((s, x) => s + x.atMs, 0) / n;
  const my = samples.reduce((s, x) => s + x.mib, 0) / n;
  const sxy = samples.reduce((s, x) => s + (x.atMs - mx) * (x.mib - my), 0);
  const sxx = samples.reduce((s, x) => s + (x.atMs - mx) ** 2, 0);
  return sxx === 0 ? 0 : (sxy / sxx) * 60_000;
}

/** The daemon's 5,000 routes, exactly (the churned ones all gone). */
async function backToPeers(n: Node, what: string): Promise<void> {
  await waitFor(async () => (await ownedRoutes(n.ns)) === PEERS, {
    timeoutMs: 120_000,
    what,
    everyMs: 250,
  });
}

/** The churned peers: after the 5,000, skipping our own subnet. */
async function churnPool(n: Node): Promise<number[]> {
  const own = await ownLeaseKey(n);
  const pool: number[] = [];
  for (let i = PEERS; pool.length < POOL; i++) if (peer(i).key !== own) pool.push(i);
  return pool;
}

/** The least RSS of `pid` read every SAMPLE_MS from SETTLE_MS to SETTLED_UNTIL_MS from now. */
async function settledMiB(pid: number | undefined): Promise<number> {
  const t0 = Date.now();
  let least = Infinity;
  for (let at = SETTLE_MS; at <= SETTLED_UNTIL_MS; at += SAMPLE_MS) {
    await new Promise((r) => setTimeout(r, Math.max(0, at - (Date.now() - t0))));
    least = Math.min(least, await statusMiB(pid));
  }
  return least;
}

const fmtMinutes = (m: number): string => (Number.isInteger(m) ? String(m) : m.toFixed(1));

async function soakRows(n: Node, minutes: number, signal: AbortSignal): Promise<BenchRow[]> {
  await putLeases(n, PEERS);
  await startTwill(n);
  await backToPeers(n, `every route of ${PEERS} peers`);
  const pid = n.child?.pid;
  const start = await settledMiB(pid);
  process.stderr.write(
    `bench: soak: settled at ${start.toFixed(1)} MiB; churning for ${fmtMinutes(minutes)} min…\n`,
  );
  const churnLog = join(n.dir, 'churn.log');
  const script = CHURN_SCRIPT({
    endpoint: n.etcd.endpoint,
    backend: n.backend,
    pool: await churnPool(n),
    window: WINDOW,
    rate: RATE,
    durationMs: minutes * 60_000,
  });
  // npm runs the bench from the project root, where 'etcd3' and './bench/node.ts' resolve
  const churn = n.lab.spawn(
    n.etcdNs,
    [process.execPath, '--input-type=module', '-e', script],
    churnLog,
  );
  // Ctrl-C ends the churn early; the rows then say how long it ran
  const abort = (): void => void churn.kill('SIGTERM');
  signal.addEventListener('abort', abort, { once: true });
  const ended = exited(churn);
  const samples: Sample[] = [];
  const t0 = Date.now();
  let reported = 0;
  try {
    for (;;) {
      const d = n.child;
      if (!d || hasEnded(d))
        throw new Error(`bench: soak: the daemon exited during the churn; see ${n.log}`);
      const sample = { atMs: Date.now() - t0, mib: await statusMiB(pid) };
      samples.push(sample);
      // a line a minute, for whoever follows a long run's log
      if (Math.floor(sample.atMs / 60_000) > reported) {
        reported = Math.floor(sample.atMs / 60_000);
        const most = Math.max(...samples.map((x) => x.mib));
        process.stderr.write(
          `bench: soak: ${reported} min: RSS ${sample.mib.toFixed(1)} MiB (most ${most.toFixed(1)})\n`,
        );
      }
      const done = await Promise.race([
        ended.then(() => true),
        new Promise<boolean>((r) => setTimeout(() => r(false), SAMPLE_MS)),
      ]);
      if (done) break;
    }
  } finally {
    signal.removeEventListener('abort', abort);
    await stopProcess(churn);
  }
  const code = await ended;
  const summaryText = (await readFile(churnLog, 'utf8')).trim().split('\n').at(-1) ?? '';
  if (code !== 0 || !summaryText.startsWith('{'))
    throw new Error(`bench: soak: the churn client failed (${String(code)}); see ${churnLog}`);
  const summary = JSON.parse(summaryText) as {
    puts: number;
    deletes: number;
    late: number;
    ms: number;
  };
  await backToPeers(n, `the ${PEERS} peers' routes alone after the churn`);
  const end = await settledMiB(pid);
  const secondHalf = samples.filter((x) => x.atMs >= summary.ms / 2);
  const most = Math.max(...samples.map((s) => s.mib));
  const ran = `${fmtMinutes(summary.ms / 60_000)} min`;
  const label = `${PEERS} peers, ${n.backend}`;
  return [
    {
      suite: 'soak',
      figure: `daemon RSS after ${ran} of lease churn (${RATE} new and ${RATE} deleted leases a second), ${label} (settled: the least read every ${SAMPLE_MS / 1000} s from ${SETTLE_MS / 1000} to ${SETTLED_UNTIL_MS / 1000} s after)`,
      value: Number(end.toFixed(1)),
      unit: 'MiB',
      yardstick: { name: 'before the churn, settled', value: Number(start.toFixed(1)) },
      target: {
        text: `≤ before + ${GROWTH_TARGET_PCT} %`,
        met: end <= start * (1 + GROWTH_TARGET_PCT / 100),
      },
    },
    {
      suite: 'soak',
      figure: `  the most during the churn (VmRSS every ${SAMPLE_MS / 1000} s, ${samples.length} samples), ${label}`,
      value: Number(most.toFixed(1)),
      unit: 'MiB',
    },
    {
      suite: 'soak',
      figure: `  the trend over the churn's second half (least-squares slope of its samples), ${label}`,
      value: Number((slopePerMinute(secondHalf) * 1024).toFixed(1)),
      unit: 'KiB/min',
    },
    {
      suite: 'soak',
      figure: `  lease events the churn made (puts + deletes; ${summary.late} ticks late), ${label}`,
      value: summary.puts + summary.deletes,
      unit: 'events',
    },
  ];
}

/** The soak suite, churning for `minutes` (--soak-minutes; default 30). */
export function soakSuite(minutes = DEFAULT_SOAK_MINUTES): BenchSuite {
  return {
    name: 'soak',
    optIn: true,
    async run(signal) {
      await sweepStaleNetns();
      const n = await setupNode({ backend: 'vxlan', name: 'bench-soak' });
      try {
        return await soakRows(n, minutes, signal);
      } finally {
        if (n.child) await stopProcess(n.child).catch(() => undefined);
        await stopNode(n);
      }
    },
  };
}
