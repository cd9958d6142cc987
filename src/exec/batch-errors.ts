// What `ip -batch` and `bridge -batch` print on stderr when lines of their
// input fail: for each failed line, the tool's own messages ("RTNETLINK
// answers: File exists", "Error: …"), then "Command failed -:<n>" with the
// line's 1-based number in the input. With -force every line runs and each
// failure is reported; without it the first failure ends the batch. This is
// the one reader of that text, for the daemon's plans and for twill-cni.

export interface BatchFailure {
  /** the failed line, 1-based, as the tool counted its input */
  readonly line: number;
  /** the messages printed before its "Command failed", joined by "; " ('' when none) */
  readonly reason: string;
}

export interface BatchErrors {
  /** every "Command failed" report, in the order printed */
  readonly failures: readonly BatchFailure[];
  /** messages after the last report (all of stderr when no line is named), joined by "; " */
  readonly unattributed: string;
}

const FAILED = /^Command failed -:(\d+)/;
const REPORTS = /Command failed -:(\d+)\n/g;

/** How twill runs `ip` and `bridge` batches: every line runs, each failure reported, stdin. */
export const FORCE_BATCH_ARGS: readonly string[] = ['-force', '-batch', '-'];

/** The report line for input line `n` ("Command failed -:n\n"). */
export function reportLine(n: number): string {
  return `Command failed -:${n}\n`;
}

/**
 * The reports of the stderr of a tool that had read `base` lines before a batch, numbered from 1 as
 * the batch counts its lines; what follows the last report is left out unless `all` ('' when there
 * is no report and not `all`).
 */
export function renumberReports(stderr: string, base: number, all = false): string {
  let end = 0;
  for (const m of stderr.matchAll(REPORTS)) end = m.index + m[0].length;
  return (all ? stderr : stderr.slice(0, end)).replace(REPORTS, (_m, n: string) =>
    reportLine(Number(n) - base),
  );
}

/** Reads the stderr of a failed `ip -batch -` / `bridge -batch -`. */
export function parseBatchErrors(stderr: string): BatchErrors {
  const failures: BatchFailure[] = [];
  let reason: string[] = [];
  for (const raw of stderr.split('\n')) {
    const line = raw.trim();
    const m = FAILED.exec(line);
    if (m) {
      failures.push({ line: Number(m[1]), reason: reason.join('; ') });
      reason = [];
    } else if (line !== '') reason.push(line);
  }
  return { failures, unattributed: reason.join('; ') };
}

/** The first line the batch reports as failed ("Command failed -:3" → 3), if any. */
export function firstFailedLine(stderr: string): number | undefined {
  return parseBatchErrors(stderr).failures[0]?.line;
}

/** Each failed line's number with why it failed (empty when no line is named). */
export function failedLines(stderr: string): Map<number, string> {
  return new Map(parseBatchErrors(stderr).failures.map((f) => [f.line, f.reason]));
}

/**
 * One "<input line>: <reason>" message per failed line of a batch whose input was `lines`
 * ("line <n>" when the number is past them, "failed" when the tool said nothing else); when no
 * line is named, stderr's messages as one; empty when stderr is empty.
 */
export function describeBatchFailures(stderr: string, lines: readonly string[]): string[] {
  const { failures, unattributed } = parseBatchErrors(stderr);
  const out = failures.map(
    (f) => `${lines[f.line - 1] ?? `line ${f.line}`}: ${f.reason || 'failed'}`,
  );
  if (out.length === 0 && unattributed !== '') out.push(unattributed);
  return out;
}
