// The benchmark table: every suite returns rows, main prints them as one
// table (or JSON). A row holds one measured figure, the yardstick measured
// side by side in the same run when one exists, and the target it is held to.
export interface BenchRow {
  /** the suite, e.g. "dataplane" or "cni" */
  readonly suite: string;
  /** what was measured, e.g. "cold convergence, 5000 peers, vxlan" */
  readonly figure: string;
  /** twill's value */
  readonly value: number;
  readonly unit: string;
  /** the same figure for the yardstick (raw `ip -batch`, reference plugin), when there is one */
  readonly yardstick?: { readonly name: string; readonly value: number };
  /** the target, as text, and whether this run met it */
  readonly target?: { readonly text: string; readonly met: boolean };
}

export interface BenchSuite {
  readonly name: string;
  /** run only when named (`--only <name>`), not in the default run (the 30-minute soak) */
  readonly optIn?: boolean;
  run(signal: AbortSignal): Promise<BenchRow[]>;
}

function fmt(n: number): string {
  if (Number.isInteger(n)) return String(n);
  return Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(2);
}

/** The ratio twill / yardstick, or undefined when there is no yardstick. */
export function ratio(row: BenchRow): number | undefined {
  return row.yardstick && row.yardstick.value > 0 ? row.value / row.yardstick.value : undefined;
}

export function renderTable(rows: readonly BenchRow[]): string {
  const header = ['suite', 'figure', 'twill', 'yardstick', 'ratio', 'target', 'met'];
  const body = rows.map((r) => {
    const q = ratio(r);
    return [
      r.suite,
      r.figure,
      `${fmt(r.value)} ${r.unit}`,
      r.yardstick ? `${fmt(r.yardstick.value)} ${r.unit} (${r.yardstick.name})` : '-',
      q === undefined ? '-' : `${q.toFixed(2)}x`,
      r.target?.text ?? '-',
      r.target ? (r.target.met ? 'yes' : 'NO') : '-',
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => (b[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...body.map(line)].join('\n');
}

/** Percentile (0..100) of a sample, nearest-rank. */
export function percentile(sample: readonly number[], p: number): number {
  if (sample.length === 0) return Number.NaN;
  const sorted = [...sample].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] ?? Number.NaN;
}
