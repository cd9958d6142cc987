// twill's own account of a repair, read from its log: the dataplane passes
// that changed something between a drill's break and the healing, each with
// its stages (when the trigger arrived, how long it waited to start, how long
// observing and applying took, how many processes it spawned). The drill
// table prints it beside the kernel-side time, so a late repair says where
// its time went.

export interface PassLine {
  /** epoch ms when the pass ended (the log line's time) */
  readonly time: number;
  readonly kind: string;
  readonly trigger: string;
  /** the other sources that asked before the pass started (none: empty) */
  readonly joined: readonly string[];
  readonly waitedMs: number;
  readonly observeMs: number;
  readonly applyMs: number;
  readonly spawns: number;
  readonly durationMs: number;
}

const PASS_MESSAGES = new Set([
  'repaired dataplane drift',
  'dataplane updated',
  'dataplane pass could not apply every change',
]);
const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);

/** The records of a JSON-lines log (other lines skipped). */
function* records(log: string): Generator<Record<string, unknown>> {
  for (const raw of log.split('\n')) {
    if (!raw.startsWith('{') || !raw.includes('"msg":"')) continue;
    try {
      yield JSON.parse(raw) as Record<string, unknown>;
    } catch {
      // a line cut short by a crash: not a record
    }
  }
}

/** The epoch ms of the first log record with `msg` at or after `from`. */
export function firstLogTime(log: string, msg: string, from: number): number | undefined {
  for (const rec of records(log))
    if (rec.msg === msg && num(rec.time) >= from) return num(rec.time);
  return undefined;
}

/** The passes in a JSON-lines log that ended within [from, to] (epoch ms). */
export function passesBetween(log: string, from: number, to: number): PassLine[] {
  const out: PassLine[] = [];
  for (const rec of records(log)) {
    const time = num(rec.time);
    if (!PASS_MESSAGES.has(String(rec.msg)) || time < from || time > to) continue;
    out.push({
      time,
      kind: typeof rec.kind === 'string' ? rec.kind : 'full',
      trigger: typeof rec.trigger === 'string' ? rec.trigger : '?',
      joined: Array.isArray(rec.joined) ? rec.joined.map(String) : [],
      waitedMs: num(rec.waitedMs),
      observeMs: num(rec.observeMs),
      applyMs: num(rec.applyMs),
      spawns: num(rec.spawns),
      durationMs: num(rec.durationMs),
    });
  }
  return out;
}

/** One line per pass, times relative to the break ("+12 ms"). */
export function renderStages(passes: readonly PassLine[], brokeAt: number): string[] {
  // an event can reach twill before the command that caused it has returned: then it is before the
  // break's mark
  const rel = (t: number): string =>
    `${t < brokeAt ? '-' : '+'}${Math.abs(Math.round(t - brokeAt))} ms`;
  return passes.map((p, i) => {
    const start = p.time - p.durationMs;
    const joined =
      p.joined.length > 0 ? ` (joined by ${p.joined.map((j) => `"${j}"`).join(', ')})` : '';
    return `twill pass ${i + 1}/${passes.length} (${p.kind}): trigger "${p.trigger}"${joined} ${rel(start - p.waitedMs)}, waited ${Math.round(p.waitedMs)} ms, observe ${Math.round(p.observeMs)} ms, apply ${Math.round(p.applyMs)} ms, ${p.spawns} spawns, done ${rel(p.time)}`;
  });
}
