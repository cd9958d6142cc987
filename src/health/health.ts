// Liveness and readiness, pure: from what the daemon knows, whether it is
// alive and whether it is ready, with the reason when not.
//
// Alive means "not wedged", because the answer to "not alive" is a restart
// (the kubelet's liveness probe): the loop that should be making progress
// is. While starting, that is the start-up loop: each step begun and each
// retry of a step waiting for etcd, the Kubernetes API or our Node's
// podCIDR is a sign of life, however long the wait (a restart would not
// bring etcd back or allocate a podCIDR; it would only crash-loop). Once a
// pass has run, it is the dataplane loop: a pass ended (cleanly or with an
// error) within a few safety-net periods, and none is stuck. A blocked event
// loop does not answer the probe at all, which fails it too.
//
// Ready means the node's network works: lease held, subnet.env written, the
// kernel matching the desired state, the underlay up. Waiting (for the
// store, for a podCIDR, for the peer list) is "not ready" with what it waits
// for. Readiness goes back to "not ready" whenever the dataplane breaks and
// stays broken.
import type { PassReport } from '../dataplane/pass-report.ts';

/** Where start-up is, and its last sign of life. */
export interface StartupFacts {
  /**
   * what it is doing or waiting for: "reading network config", "acquiring lease", "waiting for the
   * peer list"
   */
  readonly step: string;
  /** when that step began (epoch ms) */
  readonly since: number;
  /** the last sign of life: the step began or one of its attempts failed and is being retried */
  readonly tickAt: number;
  /** attempts of this step that failed so far */
  readonly failures: number;
  /** why the last attempt failed, if one did */
  readonly problem: string | undefined;
}

export interface HealthFacts {
  readonly now: number;
  readonly startedAt: number;
  /** the daemon got its lease and started its loops */
  readonly running: boolean;
  /** period of the safety-net pass */
  readonly resyncMs: number;
  readonly startup: StartupFacts;
  readonly lastPass: PassReport | undefined;
  /** the last pass that threw (observing the kernel failed, say), when none succeeded since */
  readonly passError: { readonly at: number; readonly error: string } | undefined;
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

/**
 * Start-up showing no sign of life for this long is hung. Every start-up
 * step is bounded (store calls 5 s in etcd mode, 10 s in Kubernetes mode;
 * processes have timeouts) and retries come at most 12 s apart, so a loop
 * that is still trying ticks well within this.
 */
export const STARTUP_STALL_MS = 120_000;
/** A single pass running longer than this means the loop is stuck. */
export const STUCK_PASS_MS = 60_000;

const secs = (ms: number): number => Math.round(ms / 1000);

export function liveness(f: HealthFacts): Verdict {
  if (f.passSince !== undefined) {
    return f.now - f.passSince > STUCK_PASS_MS
      ? {
          ok: false,
          reason: `a dataplane pass has been running for ${secs(f.now - f.passSince)} s`,
        }
      : { ok: true, reason: 'ok' };
  }
  const ended = Math.max(f.lastPass?.at ?? -Infinity, f.passError?.at ?? -Infinity);
  if (ended === -Infinity) {
    const s = f.startup;
    const quiet = f.now - s.tickAt;
    if (quiet > STARTUP_STALL_MS)
      return {
        ok: false,
        reason: `start-up is hung: ${s.step} for ${secs(f.now - s.since)} s, no progress for ${secs(quiet)} s`,
      };
    return {
      ok: true,
      reason:
        s.failures === 0
          ? `starting: ${s.step}`
          : `starting: ${s.step} for ${secs(f.now - s.since)} s, ${s.failures} attempt(s) failed, the last ${secs(quiet)} s ago`,
    };
  }
  const limit = 3 * f.resyncMs + 30_000;
  const age = f.now - ended;
  return age <= limit
    ? { ok: true, reason: 'ok' }
    : {
        ok: false,
        reason: `last dataplane pass ${secs(age)} s ago (resync every ${f.resyncMs / 1000} s)`,
      };
}

/**
 * Why start-up's step is still not done: its failed attempts and the last one's reason; empty when
 * none failed.
 */
function retrying(s: StartupFacts, now: number): string {
  return s.problem === undefined
    ? ''
    : `; ${s.failures} attempt(s) failed in ${secs(now - s.since)} s, the last: ${s.problem}`;
}

export function readiness(f: HealthFacts): Verdict {
  if (!f.running)
    return { ok: false, reason: `starting: ${f.startup.step}${retrying(f.startup, f.now)}` };
  if (f.leaseProblem !== undefined) return { ok: false, reason: f.leaseProblem };
  if (f.subnetEnvProblem !== undefined) return { ok: false, reason: f.subnetEnvProblem };
  if (f.underlayProblem !== undefined) return { ok: false, reason: f.underlayProblem };
  const p = f.lastPass;
  if (f.passError !== undefined && (p === undefined || f.passError.at >= p.at))
    return { ok: false, reason: `dataplane pass failed: ${f.passError.error}` };
  if (p === undefined)
    return {
      ok: false,
      reason: `no dataplane pass yet (${f.startup.step})${retrying(f.startup, f.now)}`,
    };
  if (p.failures.length > 0)
    return {
      ok: false,
      reason: `dataplane does not match: ${p.failures.length} change(s) failed, first: ${p.failures[0] ?? ''}`,
    };
  return { ok: true, reason: p.converged ? 'ok' : 'ok (changes applied, verifying)' };
}
