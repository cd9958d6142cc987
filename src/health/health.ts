// Liveness and readiness, pure: from what the daemon knows, whether it is
// alive (its loops still run passes) and ready (lease held, subnet.env
// written, the kernel matching the desired state, the underlay up), with the
// reason when not. Readiness goes back to "not ready" whenever the dataplane
// breaks and stays broken.
import type { PassReport } from '../dataplane/reconciler.ts';

export interface HealthFacts {
  readonly now: number;
  readonly startedAt: number;
  /** the daemon got its lease and started its loops */
  readonly running: boolean;
  /** period of the safety-net pass */
  readonly resyncMs: number;
  readonly lastPass: PassReport | undefined;
  /** a pass in progress, since when */
  readonly passSince: number | undefined;
  /** why our lease is not held, if it is not */
  readonly leaseProblem: string | undefined;
  /** why subnet.env is not what it should be, if it is not */
  readonly subnetEnvProblem: string | undefined;
  /** why the underlay cannot carry traffic, if it cannot */
  readonly underlayProblem: string | undefined;
}

export interface Verdict {
  readonly ok: boolean;
  readonly reason: string;
}

/** Before the first pass, start-up (etcd may be slow or down) gets this long before liveness fails. */
export const STARTUP_GRACE_MS = 120_000;
/** A single pass running longer than this means the loop is stuck. */
export const STUCK_PASS_MS = 60_000;

export function liveness(f: HealthFacts): Verdict {
  if (f.passSince !== undefined && f.now - f.passSince > STUCK_PASS_MS) return { ok: false, reason: `a dataplane pass has been running for ${Math.round((f.now - f.passSince) / 1000)} s` };
  if (f.lastPass === undefined) {
    return f.now - f.startedAt <= STARTUP_GRACE_MS ? { ok: true, reason: 'starting' } : { ok: false, reason: `no dataplane pass ${Math.round((f.now - f.startedAt) / 1000)} s after start` };
  }
  const limit = 3 * f.resyncMs + 30_000;
  const age = f.now - f.lastPass.at;
  return age <= limit || f.passSince !== undefined ? { ok: true, reason: 'ok' } : { ok: false, reason: `last dataplane pass ${Math.round(age / 1000)} s ago (resync every ${f.resyncMs / 1000} s)` };
}

export function readiness(f: HealthFacts): Verdict {
  if (!f.running) return { ok: false, reason: 'starting: no lease yet' };
  if (f.leaseProblem !== undefined) return { ok: false, reason: f.leaseProblem };
  if (f.subnetEnvProblem !== undefined) return { ok: false, reason: f.subnetEnvProblem };
  if (f.underlayProblem !== undefined) return { ok: false, reason: f.underlayProblem };
  const p = f.lastPass;
  if (p === undefined) return { ok: false, reason: 'no dataplane pass yet (waiting for the peer list)' };
  if (p.failures.length > 0) return { ok: false, reason: `dataplane does not match: ${p.failures.length} change(s) failed, first: ${p.failures[0] ?? ''}` };
  return { ok: true, reason: p.converged ? 'ok' : 'ok (changes applied, verifying)' };
}
