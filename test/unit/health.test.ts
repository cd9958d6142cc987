// Liveness and readiness from facts: start-up alive for as long as it keeps
// trying (a long wait for the store or a podCIDR is not ready, never dead),
// a hung start-up, a stale or stuck loop, a pass that threw, and each reason
// readiness is refused, in order.
import { describe, expect, it } from 'vitest';
import {
  liveness,
  readiness,
  STARTUP_STALL_MS,
  STUCK_PASS_MS,
  type HealthFacts,
  type StartupFacts,
} from '../../src/health/health.ts';
import type { PassReport } from '../../src/dataplane/pass-report.ts';

const NOW = 1_000_000_000;
const pass = (o: Partial<PassReport> = {}): PassReport => ({
  at: NOW - 1_000,
  kind: 'full',
  durationMs: 5,
  ops: [],
  failures: [],
  converged: true,
  drift: false,
  stages: { trigger: 'test', waitedMs: 0, observeMs: 1, applyMs: 0, spawns: 6 },
  ...o,
});
const startup = (o: Partial<StartupFacts> = {}): StartupFacts => ({
  step: 'waiting for the peer list',
  since: NOW - 10_000,
  tickAt: NOW - 10_000,
  failures: 0,
  problem: undefined,
  ...o,
});
const facts = (o: Partial<HealthFacts> = {}): HealthFacts => ({
  now: NOW,
  startedAt: NOW - 10_000,
  running: true,
  resyncMs: 5_000,
  startup: startup(),
  lastPass: pass(),
  passError: undefined,
  passSince: undefined,
  leaseProblem: undefined,
  subnetEnvProblem: undefined,
  underlayProblem: undefined,
  ...o,
});

/** Not running yet: waiting `forMs` at `step`, the last failed attempt `lastMs` ago. */
const waiting = (o: {
  step: string;
  forMs: number;
  lastMs: number;
  failures: number;
  problem: string;
}): HealthFacts =>
  facts({
    startedAt: NOW - o.forMs - 1_000,
    running: false,
    lastPass: undefined,
    startup: startup({
      step: o.step,
      since: NOW - o.forMs,
      tickAt: NOW - o.lastMs,
      failures: o.failures,
      problem: o.problem,
    }),
  });

describe('liveness', () => {
  it('is alive while starting, after a recent pass, and during a pass', () => {
    expect(
      liveness(
        facts({
          running: false,
          lastPass: undefined,
          startup: startup({ step: 'reading network config' }),
        }),
      ),
    ).toEqual({ ok: true, reason: 'starting: reading network config' });
    expect(liveness(facts())).toEqual({ ok: true, reason: 'ok' });
    expect(
      liveness(facts({ lastPass: pass({ at: NOW - 60_000 }), passSince: NOW - 1_000 })).ok,
    ).toBe(true);
  });

  it('stays alive through a 10-minute wait for the store while the attempts keep coming, and readiness says what it waits for', () => {
    const problem =
      'etcd range /coreos.com/network/config: 14 UNAVAILABLE: No connection established';
    const f = waiting({
      step: 'reading network config',
      forMs: 600_000,
      lastMs: 8_000,
      failures: 62,
      problem,
    });
    expect(liveness(f)).toEqual({
      ok: true,
      reason: 'starting: reading network config for 600 s, 62 attempt(s) failed, the last 8 s ago',
    });
    expect(readiness(f)).toEqual({
      ok: false,
      reason: `starting: reading network config; 62 attempt(s) failed in 600 s, the last: ${problem}`,
    });
  });

  it('stays alive while our Node waits an hour for its podCIDR (Kubernetes mode)', () => {
    const problem =
      'node n1 has no IPv4 spec.podCIDR yet: the controller-manager must allocate node CIDRs';
    const f = waiting({
      step: 'acquiring lease',
      forMs: 3_600_000,
      lastMs: 11_000,
      failures: 365,
      problem,
    });
    expect(liveness(f).ok).toBe(true);
    expect(readiness(f)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(
        /^starting: acquiring lease; 365 attempt\(s\) failed in 3600 s, the last: node n1 has no IPv4 spec\.podCIDR yet/,
      ),
    });
  });

  it('stays alive while the peer list cannot be read, long after the lease was taken', () => {
    const f = facts({
      startedAt: NOW - 900_000,
      lastPass: undefined,
      startup: startup({
        since: NOW - 890_000,
        tickAt: NOW - 3_000,
        failures: 170,
        problem: 'lease store unreachable: etcd range: deadline exceeded',
      }),
    });
    expect(liveness(f).ok).toBe(true);
    expect(readiness(f).reason).toBe(
      'no dataplane pass yet (waiting for the peer list); 170 attempt(s) failed in 890 s, the last: lease store unreachable: etcd range: deadline exceeded',
    );
  });

  it('fails when start-up stopped trying: a step that shows no sign of life for too long is hung', () => {
    const hung = waiting({
      step: 'acquiring lease',
      forMs: 300_000,
      lastMs: STARTUP_STALL_MS + 1_000,
      failures: 3,
      problem: 'etcd txn: deadline exceeded',
    });
    expect(liveness(hung)).toEqual({
      ok: false,
      reason: 'start-up is hung: acquiring lease for 300 s, no progress for 121 s',
    });
    // a step that never retried (a call that never returned) is hung the same way
    expect(
      liveness(
        facts({
          running: false,
          lastPass: undefined,
          startup: startup({
            step: 'choosing the interface',
            since: NOW - STARTUP_STALL_MS - 1,
            tickAt: NOW - STARTUP_STALL_MS - 1,
          }),
        }),
      ).ok,
    ).toBe(false);
    // but not at the limit itself
    expect(
      liveness(
        waiting({
          step: 'acquiring lease',
          forMs: 300_000,
          lastMs: STARTUP_STALL_MS,
          failures: 3,
          problem: 'x',
        }),
      ).ok,
    ).toBe(true);
  });

  it('fails with the reason when no pass came for too long, or one never ends', () => {
    expect(liveness(facts({ lastPass: pass({ at: NOW - 50_000 }) }))).toEqual({
      ok: false,
      reason: 'last dataplane pass 50 s ago (resync every 5 s)',
    });
    expect(liveness(facts({ passSince: NOW - STUCK_PASS_MS - 1_000 }))).toEqual({
      ok: false,
      reason: 'a dataplane pass has been running for 61 s',
    });
    // the first pass, stuck, too
    expect(
      liveness(facts({ lastPass: undefined, passSince: NOW - STUCK_PASS_MS - 1_000 })).ok,
    ).toBe(false);
  });

  it('counts a pass that threw as the loop going on: restarting would not fix the kernel', () => {
    expect(
      liveness(
        facts({
          lastPass: pass({ at: NOW - 600_000 }),
          passError: { at: NOW - 4_000, error: 'ip -json route: timed out' },
        }),
      ),
    ).toEqual({ ok: true, reason: 'ok' });
    expect(
      liveness(facts({ lastPass: undefined, passError: { at: NOW - 4_000, error: 'x' } })).ok,
    ).toBe(true);
    expect(
      liveness(facts({ lastPass: undefined, passError: { at: NOW - 50_000, error: 'x' } })).ok,
    ).toBe(false);
  });
});

describe('readiness', () => {
  it('is ready when everything holds, also right after a pass that applied changes cleanly', () => {
    expect(readiness(facts())).toEqual({ ok: true, reason: 'ok' });
    expect(readiness(facts({ lastPass: pass({ converged: false }) })).ok).toBe(true);
  });

  it('refuses with the first reason that applies', () => {
    expect(
      readiness(facts({ running: false, startup: startup({ step: 'acquiring lease' }) })),
    ).toEqual({ ok: false, reason: 'starting: acquiring lease' });
    expect(readiness(facts({ leaseProblem: 'own lease lost, reclaiming: deleted' }))).toEqual({
      ok: false,
      reason: 'own lease lost, reclaiming: deleted',
    });
    expect(readiness(facts({ subnetEnvProblem: 'subnet.env /x is missing' })).reason).toBe(
      'subnet.env /x is missing',
    );
    expect(readiness(facts({ underlayProblem: 'underlay interface eth0 is down' })).reason).toBe(
      'underlay interface eth0 is down',
    );
    expect(
      readiness(facts({ passError: { at: NOW, error: 'ip -json route: timed out' } })).reason,
    ).toBe('dataplane pass failed: ip -json route: timed out');
    expect(readiness(facts({ lastPass: undefined })).reason).toBe(
      'no dataplane pass yet (waiting for the peer list)',
    );
    expect(
      readiness(
        facts({ lastPass: pass({ converged: false, failures: ['ip: route add x: File exists'] }) }),
      ),
    ).toEqual({
      ok: false,
      reason: 'dataplane does not match: 1 change(s) failed, first: ip: route add x: File exists',
    });
  });

  it("a sysctl that cannot be set is the pass's failure even when every entry is in place", () => {
    const failures = [
      "sysctl: net.ipv4.ip_forward is 0, cannot set it to 1: EROFS: read-only file system, open '/proc/sys/net/ipv4/ip_forward'",
    ];
    expect(readiness(facts({ lastPass: pass({ converged: true, failures }) }))).toEqual({
      ok: false,
      reason: `dataplane does not match: 1 change(s) failed, first: ${failures[0] ?? ''}`,
    });
  });

  it('a pass that threw before the last good one no longer counts', () => {
    expect(readiness(facts({ passError: { at: NOW - 5_000, error: 'x' } })).ok).toBe(true);
  });
});
