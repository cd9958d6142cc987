// What a reconciler pass reports (its kind, ops, failures and stages), and
// the one log line it makes of it: the health probe (readiness, the pass
// metrics) reads the reports and the drills read the log lines, so they live
// apart from the engine that runs passes (reconciler.ts).
import type { Logger } from '../log.ts';
import { opLogLabel, type Op } from './model.ts';
import { opLines } from './render.ts';

export type PassKind = 'full' | 'entries' | 'delta' | 'repair' | 'chains';

export interface PassReport {
  /** epoch ms when the pass ended */
  readonly at: number;
  readonly kind: PassKind;
  readonly durationMs: number;
  readonly ops: readonly Op[];
  /**
   * changes that failed, led by a standing sysctl failure (ip_forward could not be set) while there
   * is one
   */
  readonly failures: readonly string[];
  /**
   * the kernel matches the desired state: a full or chains pass needed no ops, or a repair put back
   * what had drifted
   */
  readonly converged: boolean;
  /** ops were needed although the desired state had not changed since the last converged pass */
  readonly drift: boolean;
  /**
   * stages: what asked for the pass first, how long it waited to start, observing, applying,
   * processes run
   */
  readonly stages: PassStages;
}

export interface PassStages {
  readonly trigger: string;
  /** other sources that asked before the pass started (judge.ts's Trigger); absent when none */
  readonly joined?: readonly string[];
  readonly waitedMs: number;
  /** reading the kernel: in a full pass the entries' reads (the masquerade's count in applyMs) */
  readonly observeMs: number;
  /** from the reads to the end when anything was applied, else 0 */
  readonly applyMs: number;
  readonly spawns: number;
}

/**
 * Logs a pass that changed something: its ops counted by kind, its stages, and `failures` (the
 * pass's own: a standing sysctl failure is logged when it changes, not with every pass); the ops'
 * lines at debug level.
 */
export function logPass(
  logger: Logger,
  o: { report: PassReport; failures: readonly string[] },
): void {
  const { report: r, failures } = o;
  if (r.ops.length === 0) return;
  const byKind: Record<string, number> = {};
  for (const op of r.ops) {
    // a stale bridge gateway's delete shows as "stale address delete", not as twill's device's
    const key = `${opLogLabel(op)} ${op.action}`;
    byKind[key] = (byKind[key] ?? 0) + 1;
  }
  const s = r.stages;
  const fields = {
    kind: r.kind,
    ops: byKind,
    durationMs: Math.round(r.durationMs),
    trigger: s.trigger,
    ...(s.joined ? { joined: s.joined } : {}),
    waitedMs: Math.round(s.waitedMs),
    observeMs: Math.round(s.observeMs),
    applyMs: Math.round(s.applyMs),
    spawns: s.spawns,
  };
  if (failures.length > 0)
    logger.warn(
      { ...fields, failures: failures.slice(0, 20) },
      'dataplane pass could not apply every change',
    );
  else if (r.drift) logger.warn(fields, 'repaired dataplane drift');
  else logger.info(fields, 'dataplane updated');
  if (logger.isLevelEnabled('debug'))
    logger.debug({ lines: r.ops.flatMap(opLines) }, 'dataplane ops');
}
