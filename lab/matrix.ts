// The connectivity matrix: every pod pings every other pod and the outside
// host, once, with a short timeout, many at a time. `up`, `status` and every
// drill use it as the definition of "the network works". A dual-stack lab
// adds every pod and the outside host by IPv6 ("n1-p1/6", "outside/6"); an
// IPv6-only lab has those IPv6 columns alone.
import { CommandError } from '../src/exec/runner.ts';
import type { Cluster, LabPod } from './cluster.ts';

export interface Matrix {
  readonly pods: readonly LabPod[];
  /** column names: every pod, then "outside" (then, with IPv6, each again with "/6") */
  readonly columns: readonly string[];
  /** reach[i][j]: pod i reached column j (null on the diagonal) */
  readonly reach: readonly (readonly (boolean | null)[])[];
  /** "n1-p1 → n2-p1 (10.244.5.2)" for each failed pair */
  readonly failures: readonly string[];
  /** an IPv6-only lab's matrix: IPv6 columns alone */
  readonly ipv6Only?: boolean;
}

/** A matrix column: what every pod pings. */
export interface MatrixTarget {
  readonly name: string;
  readonly ip: string;
  /** the pod this column is (a pod does not ping itself); absent for the outside host */
  readonly pod?: string;
}

/**
 * The columns: every pod and the outside host by IPv4 (not on an IPv6-only lab, whose pods have
 * no IPv4 address), then each pod with IPv6 and the outside host by IPv6 ("/6").
 */
export function matrixTargets(
  pods: readonly LabPod[],
  c: Pick<Cluster, 'outsideIp' | 'outsideIp6' | 'ipv6Only'>,
): MatrixTarget[] {
  const v4: MatrixTarget[] =
    c.ipv6Only === true
      ? []
      : [
          ...pods.map((p) => ({ name: p.name, ip: p.ip, pod: p.name })),
          { name: 'outside', ip: c.outsideIp },
        ];
  return [
    ...v4,
    ...pods.flatMap((p) => (p.ip6 ? [{ name: `${p.name}/6`, ip: p.ip6, pod: p.name }] : [])),
    ...(c.outsideIp6 ? [{ name: 'outside/6', ip: c.outsideIp6 }] : []),
  ];
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
  return (await pingOutcome(c, from, ip, timeoutS)) === 'reply';
}

/**
 * One ping: "reply", "no reply" (ping's exit code 1), or the failed command's own words (ping's
 * errors, exit code 2, such as an unreachable network; or the lab's transport: a lab whose commands
 * go over ssh can lose a connection, which is not the pod network's fault and must be told apart in
 * a failed run's notes).
 */
export async function pingOutcome(
  c: Cluster,
  from: string,
  ip: string,
  timeoutS = 0.3,
): Promise<string> {
  return c
    .sh({ pod: from }, ['ping', '-c', '1', '-q', '-W', String(timeoutS), ip], { timeoutMs: 5_000 })
    .then(
      () => 'reply',
      (err: unknown) =>
        err instanceof CommandError && err.exitCode === 1
          ? 'no reply'
          : String(err instanceof Error ? err.message : err).slice(0, 200),
    );
}

export async function connectivity(c: Cluster, o: { timeoutS?: number } = {}): Promise<Matrix> {
  const pods = await c.pods();
  const targets = matrixTargets(pods, c);
  // column by column: the pings in flight come from different pods, so from different nodes (a
  // lab whose commands go over ssh sends a node only so many at once)
  const jobs = targets.flatMap((t) =>
    pods.map(
      (p) => async (): Promise<string | null> =>
        t.pod === p.name ? null : pingOutcome(c, p.name, t.ip, o.timeoutS),
    ),
  );
  const flat = await pool(jobs, 24);
  // reach[i][j] and its outcome: pod i's pings, column by column
  const outcomes = pods.map((_, i) => targets.map((_, j) => flat[j * pods.length + i] ?? null));
  const reach = outcomes.map((row) => row.map((r) => (r === null ? null : r === 'reply')));
  const failures = pods.flatMap((p, i) =>
    targets.flatMap((t, j) => {
      const r = outcomes[i]?.[j] ?? null;
      if (r === null || r === 'reply') return [];
      return [`${p.name} → ${t.name} (${t.ip})${r === 'no reply' ? '' : `: ${r}`}`];
    }),
  );
  return {
    pods,
    columns: targets.map((t) => t.name),
    reach,
    failures,
    ...(c.ipv6Only === true ? { ipv6Only: true } : {}),
  };
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
  // an IPv6-only lab shows each pod's IPv6 address, longer than the 13 an IPv4 one gets
  const ipWidth = Math.max(13, ...m.pods.map((p) => p.ip.length));
  const head = `${'from \\ to'.padEnd(width + ipWidth + 4)} ${m.columns.map((_, j) => String(j + 1).padStart(3)).join('')}`;
  const rows = m.pods.map((p, i) => {
    const cells = (m.reach[i] ?? []).map((r) => (r === null ? '  -' : r ? '  .' : '  X')).join('');
    return `${String(i + 1).padStart(2)} ${p.name.padEnd(width)} ${p.ip.padEnd(ipWidth)} ${cells}`;
  });
  const legend = `columns: ${m.columns.map((c, j) => `${j + 1}=${c}`).join(' ')}`;
  const family = m.ipv6Only === true ? ', by IPv6 alone (an IPv6-only lab: no IPv4 columns)' : '';
  const verdict =
    m.failures.length === 0
      ? `full connectivity: ${m.pods.length} pods, every pod reaches every pod and outside${family}`
      : `${m.failures.length} unreachable${family}: ${m.failures.join(', ')}`;
  return [head, ...rows, legend, verdict].join('\n');
}
