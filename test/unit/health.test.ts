// Liveness and readiness from facts: start-up grace, a stale or stuck loop,
// and each reason readiness is refused, in order.
import { describe, expect, it } from 'vitest';
import { liveness, readiness, STARTUP_GRACE_MS, type HealthFacts } from '../../src/health/health.ts';
import type { PassReport } from '../../src/dataplane/reconciler.ts';

const NOW = 1_000_000_000;
const pass = (o: Partial<PassReport> = {}): PassReport => ({ at: NOW - 1_000, kind: 'full', durationMs: 5, ops: [], failures: [], converged: true, drift: false, problems: [], stages: { trigger: 'test', waitedMs: 0, observeMs: 1, applyMs: 0, spawns: 6 }, ...o });
const facts = (o: Partial<HealthFacts> = {}): HealthFacts => ({
  now: NOW,
  startedAt: NOW - 10_000,
  running: true,
  resyncMs: 5_000,
  lastPass: pass(),
  passSince: undefined,
  leaseProblem: undefined,
  subnetEnvProblem: undefined,
  underlayProblem: undefined,
  ...o,
});

describe('liveness', () => {
  it('is alive while starting, after a recent pass, and during a pass', () => {
    expect(liveness(facts({ lastPass: undefined }))).toEqual({ ok: true, reason: 'starting' });
    expect(liveness(facts())).toEqual({ ok: true, reason: 'ok' });
    expect(liveness(facts({ lastPass: pass({ at: NOW - 60_000 }), passSince: NOW - 1_000 })).ok).toBe(true);
  });

  it('fails with the reason when no pass came for too long, or one never ends', () => {
    expect(liveness(facts({ lastPass: undefined, startedAt: NOW - STARTUP_GRACE_MS - 1 }))).toMatchObject({ ok: false, reason: expect.stringContaining('no dataplane pass') });
    expect(liveness(facts({ lastPass: pass({ at: NOW - 50_000 }) }))).toEqual({ ok: false, reason: 'last dataplane pass 50 s ago (resync every 5 s)' });
    expect(liveness(facts({ passSince: NOW - 61_000 }))).toEqual({ ok: false, reason: 'a dataplane pass has been running for 61 s' });
  });
});

describe('readiness', () => {
  it('is ready when everything holds, also right after a pass that applied changes cleanly', () => {
    expect(readiness(facts())).toEqual({ ok: true, reason: 'ok' });
    expect(readiness(facts({ lastPass: pass({ converged: false }) })).ok).toBe(true);
  });

  it('refuses with the first reason that applies', () => {
    expect(readiness(facts({ running: false }))).toEqual({ ok: false, reason: 'starting: no lease yet' });
    expect(readiness(facts({ leaseProblem: 'own lease lost, reclaiming: deleted' }))).toEqual({ ok: false, reason: 'own lease lost, reclaiming: deleted' });
    expect(readiness(facts({ subnetEnvProblem: 'subnet.env /x is missing' })).reason).toBe('subnet.env /x is missing');
    expect(readiness(facts({ underlayProblem: 'underlay interface eth0 is down' })).reason).toBe('underlay interface eth0 is down');
    expect(readiness(facts({ lastPass: undefined })).reason).toBe('no dataplane pass yet (waiting for the peer list)');
    expect(readiness(facts({ lastPass: pass({ converged: false, failures: ['ip: route add x: File exists'] }) }))).toEqual({ ok: false, reason: 'dataplane does not match: 1 change(s) failed, first: ip: route add x: File exists' });
  });
});
