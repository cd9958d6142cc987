// The connectivity matrix: every pod pings every other pod and the outside
// host, once, with a short timeout, many at a time. `up`, `status` and every
// drill use it as the definition of "the network works".
import type { Cluster, LabPod } from './cluster.ts';

export interface Matrix {
  readonly pods: readonly LabPod[];
  /** column names: every pod, then "outside" */
  readonly columns: readonly string[];
  /** reach[i][j]: pod i reached column j (null on the diagonal) */
  readonly reach: readonly (readonly (boolean | null)[])[];
  /** "n1-p1 → n2-p1 (10.244.5.2)" for each failed pair */
  readonly failures: readonly string[];
}

/** Runs `jobs` with at most `limit` in flight. */
export async function pool<T>(jobs: readonly (() => Promise<T>)[], limit: number): Promise<T[]> {
  const results: T[] = new Array<T>(jobs.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < jobs.length) {
      const i = next++;
      results[i] = await (jobs[i] as () => Promise<T>)();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, jobs.length) }, worker));
  return results;
}

export async function ping(c: Cluster, from: string, ip: string, timeoutS = 0.3): Promise<boolean> {
  return c
    .sh({ pod: from }, ['ping', '-c', '1', '-q', '-W', String(timeoutS), ip], { timeoutMs: 5_000 })
    .then(
      () => true,
      () => false,
    );
}

export async function connectivity(c: Cluster, o: { timeoutS?: number } = {}): Promise<Matrix> {
  const pods = await c.pods();
  // a dual-stack lab: every pod and the outside host once more by IPv6 ("n1-p1/6")
  const targets = [
    ...pods.map((p) => ({ name: p.name, ip: p.ip })),
    { name: 'outside', ip: c.outsideIp },
    ...pods.flatMap((p) => (p.ip6 ? [{ name: `${p.name}/6`, ip: p.ip6 }] : [])),
    ...(c.outsideIp6 ? [{ name: 'outside/6', ip: c.outsideIp6 }] : []),
  ];
  const jobs = pods.flatMap((p) =>
    targets.map(
      (t) => async (): Promise<boolean | null> =>
        t.name === p.name || t.name === `${p.name}/6` ? null : ping(c, p.name, t.ip, o.timeoutS),
    ),
  );
  const flat = await pool(jobs, 24);
  const reach = pods.map((_, i) => flat.slice(i * targets.length, (i + 1) * targets.length));
  const failures = pods.flatMap((p, i) =>
    targets.filter((_, j) => reach[i]?.[j] === false).map((t) => `${p.name} → ${t.name} (${t.ip})`),
  );
  return { pods, columns: targets.map((t) => t.name), reach, failures };
}

/**
 * Polls the matrix until it is full or `timeoutMs` passes; ms until full, or
 * undefined. A round that fails waits out its pings' timeout (`timeoutS`,
 * default 0.3 s), which is how late it can notice the network came back.
 */
export async function untilFull(
  c: Cluster,
  timeoutMs: number,
  since = performance.now(),
  o: { timeoutS?: number } = {},
): Promise<number | undefined> {
  const until = since + timeoutMs;
  for (;;) {
    const m = await connectivity(c, o);
    if (m.failures.length === 0) return performance.now() - since;
    if (performance.now() > until) return undefined;
  }
}

export function renderMatrix(m: Matrix): string {
  const width = Math.max(4, ...m.pods.map((p) => p.name.length));
  const head = `${'from \\ to'.padEnd(width + 17)} ${m.columns.map((_, j) => String(j + 1).padStart(3)).join('')}`;
  const rows = m.pods.map((p, i) => {
    const cells = (m.reach[i] ?? []).map((r) => (r === null ? '  -' : r ? '  .' : '  X')).join('');
    return `${String(i + 1).padStart(2)} ${p.name.padEnd(width)} ${p.ip.padEnd(13)} ${cells}`;
  });
  const legend = `columns: ${m.columns.map((c, j) => `${j + 1}=${c}`).join(' ')}`;
  const verdict =
    m.failures.length === 0
      ? `full connectivity: ${m.pods.length} pods, every pod reaches every pod and outside`
      : `${m.failures.length} unreachable: ${m.failures.join(', ')}`;
  return [head, ...rows, legend, verdict].join('\n');
}
