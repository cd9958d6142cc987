// A monotonic clock in milliseconds, for durations and deadlines within the process. The global
// `performance` would do the same, but its first use loads Node's perf_hooks modules: about
// 0.4 MiB of resident memory kept for good (docs/design.md, rule 12).

/** Milliseconds since an arbitrary point, never going back (process.hrtime). */
export function monotonicMs(): number {
  const [s, ns] = process.hrtime();
  return s * 1000 + ns / 1e6;
}
