// What the daemon tells its health endpoints and metrics: each start-up
// step and each retry of one (start-up's heartbeat), the lease keeper, the
// expected subnet.env, the underlay, every pass and lease-store event. It
// turns them into metrics as they happen, and into liveness/readiness facts
// on request (reading subnet.env and the underlay's operstate then). subnet.env
// is compared pair by pair: an IPv6-only node's has no IPv4 pair, and must not.
import { readFile } from 'node:fs/promises';
import { opLabel } from '../dataplane/model.ts';
import type { PassReport } from '../dataplane/pass-report.ts';
import { describeError } from '../errors.ts';
import { REFUSAL_REASONS, type Refusal, type RefusalReason } from '../lease/admit.ts';
import type { Lease, LeaseEvent } from '../lease/types.ts';
import { formatCidr, sameCidr, type Cidr } from '../net/ipv4.ts';
import { formatCidr6, sameOptionalCidr6, type Cidr6 } from '../net/ipv6.ts';
import { readSubnetEnv, type SubnetEnv } from '../subnetenv.ts';
import type { HealthFacts, StartupFacts } from './health.ts';
import { driftKind, TwillMetrics } from './metrics.ts';

export interface KeeperView {
  current(): Lease;
  /** why the lease is being reclaimed, while it is */
  lost(): string | undefined;
}

/**
 * How start-up reports progress: the waits that retry call `retrying` on every failed attempt, so a
 * wait that stops trying shows.
 */
export interface StartupProgress {
  /** start-up begins `step` ("acquiring lease") */
  step(step: string): void;
  /** an attempt of the current step failed with `problem` and is retried */
  retrying(problem: string): void;
}

export class DaemonProbe implements StartupProgress {
  readonly metrics: TwillMetrics;
  private readonly startedAt = Date.now();
  private readonly resyncMs: number;
  private startup: StartupFacts;
  private keeper: KeeperView | undefined;
  private env: { path: string; want: SubnetEnv } | undefined;
  private underlay: string | undefined;
  private last: PassReport | undefined;
  private passError: { at: number; error: string } | undefined;
  private passSince: number | undefined;

  constructor(o: { version: string; resyncMs: number }) {
    this.metrics = new TwillMetrics({ version: o.version });
    this.resyncMs = o.resyncMs;
    this.startup = {
      step: 'starting',
      since: this.startedAt,
      tickAt: this.startedAt,
      failures: 0,
      problem: undefined,
    };
  }

  step(step: string): void {
    const now = Date.now();
    this.startup = { step, since: now, tickAt: now, failures: 0, problem: undefined };
  }

  retrying(problem: string): void {
    this.startup = {
      ...this.startup,
      tickAt: Date.now(),
      failures: this.startup.failures + 1,
      problem,
    };
  }

  /**
   * The lease is ours and subnet.env written: the loops start, and the first pass waits for the
   * peer list.
   */
  started(o: { keeper: KeeperView; subnetFile: string; env: SubnetEnv; underlay: string }): void {
    this.keeper = o.keeper;
    this.env = { path: o.subnetFile, want: o.env };
    this.underlay = o.underlay;
    this.leaseChanged(o.keeper.current());
    this.step('waiting for the peer list');
  }

  leaseChanged(lease: Lease): void {
    this.metrics.leaseExpiry.set(lease.expiresAt / 1000);
  }

  passStarted(): void {
    this.passSince = Date.now();
  }

  passDone(r: PassReport): void {
    this.passSince = undefined;
    this.passError = undefined;
    this.last = r;
    const m = this.metrics;
    m.passes.inc({
      result: r.failures.length > 0 ? 'failed' : r.converged ? 'converged' : 'changed',
    });
    m.passDuration.observe(r.durationMs / 1000);
    // counted first, then one increment a label set: a cold start's 30,000 ops, incremented one by
    // one, cost the JavaScript thread about 60 ms in label formatting (profiled, 2 cores)
    const ops = new Map<string, { kind: ReturnType<typeof opLabel>; action: string; n: number }>();
    const drift = new Map<string, number>();
    for (const op of r.ops) {
      const kind = opLabel(op);
      const key = `${kind} ${op.action}`;
      const c = ops.get(key);
      if (c) c.n++;
      else ops.set(key, { kind, action: op.action, n: 1 });
      if (!r.drift) continue;
      const d = driftKind(op);
      drift.set(d, (drift.get(d) ?? 0) + 1);
    }
    for (const { kind, action, n } of ops.values()) m.ops.inc({ kind, action }, n);
    for (const [kind, n] of drift) m.drift.inc({ kind }, n);
  }

  /** A pass threw: the loop goes on (it retries), but the kernel is in an unknown state. */
  passFailed(err: unknown): void {
    this.passSince = undefined;
    this.passError = { at: Date.now(), error: describeError(err) };
    this.metrics.passes.inc({ result: 'failed' });
  }

  storeEvent(ev: LeaseEvent): void {
    // before the first pass, the lease watch's list attempts are start-up's heartbeat (waiting for
    // the peer list)
    if (this.keeper !== undefined && this.last === undefined && this.passError === undefined) {
      if (ev.type === 'connectivity' && !ev.connected)
        this.retrying(`lease store unreachable: ${ev.detail}`);
      else this.startup = { ...this.startup, tickAt: Date.now() };
    }
    if (ev.type === 'connectivity') this.metrics.storeConnected.set(ev.connected ? 1 : 0);
    if (ev.type === 'snapshot') {
      this.metrics.storeConnected.set(1);
      if (ev.reason !== 'initial list')
        this.metrics.relists.inc({
          reason: ev.reason.split(':')[0]?.replace('periodic re-list', 'periodic') ?? 'other',
        });
    }
  }

  peers(list: readonly Lease[], refused: ReadonlyMap<string, Refusal>): void {
    const by = new Map<string, number>([
      ['vxlan', 0],
      ['host-gw', 0],
    ]);
    const by6 = new Map(by);
    for (const p of list) {
      by.set(p.attrs.backendType, (by.get(p.attrs.backendType) ?? 0) + 1);
      if (p.subnet6) by6.set(p.attrs.backendType, (by6.get(p.attrs.backendType) ?? 0) + 1);
    }
    for (const [backend, n] of by) this.metrics.peers.set({ backend }, n);
    for (const [backend, n] of by6) this.metrics.peersIpv6.set({ backend }, n);
    // one gauge for every refused peer, by reason (admit.ts)
    const refusals = new Map<RefusalReason, number>(REFUSAL_REASONS.map((r) => [r, 0]));
    for (const r of refused.values()) refusals.set(r.reason, (refusals.get(r.reason) ?? 0) + 1);
    for (const [reason, n] of refusals) this.metrics.refusedPeers.set({ reason }, n);
  }

  lastPass(): PassReport | undefined {
    return this.last;
  }

  async facts(): Promise<HealthFacts> {
    const lost = this.keeper?.lost();
    const lease = this.keeper?.current();
    const leaseProblem =
      lost !== undefined
        ? `own lease lost, reclaiming: ${lost}`
        : lease && lease.expiresAt < Date.now()
          ? `own lease ${lease.key} expired at ${new Date(lease.expiresAt).toISOString()}`
          : undefined;
    return {
      now: Date.now(),
      startedAt: this.startedAt,
      running: this.keeper !== undefined,
      resyncMs: this.resyncMs,
      startup: this.startup,
      lastPass: this.last,
      passError: this.passError,
      passSince: this.passSince,
      leaseProblem,
      subnetEnvProblem: await this.subnetEnvProblem(),
      underlayProblem: await this.underlayProblem(),
    };
  }

  private async subnetEnvProblem(): Promise<string | undefined> {
    if (!this.env) return undefined;
    const { path, want } = this.env;
    try {
      const got = await readSubnetEnv(path);
      if (!got) return `subnet.env ${path} is missing`;
      if (
        !sameOptionalCidr(got.subnet, want.subnet) ||
        !sameOptionalCidr(got.network, want.network) ||
        (got.mtu !== want.mtu && want.subnet !== null)
      ) {
        return `subnet.env ${path} says ${text4(got.subnet)} MTU ${got.mtu}, the lease says ${text4(want.subnet)} MTU ${want.mtu}`;
      }
      if (
        !sameOptionalCidr6(got.subnet6, want.subnet6) ||
        !sameOptionalCidr6(got.network6, want.network6) ||
        got.mtu !== want.mtu
      ) {
        // the IPv6 pair; on an IPv6-only node (no IPv4 pair to show it with) the MTU too
        const mtu = (e: SubnetEnv): string => (got.mtu !== want.mtu ? ` MTU ${e.mtu}` : '');
        return `subnet.env ${path} says IPv6 ${text6(got.subnet6)} in ${text6(got.network6)}${mtu(got)}, the lease says ${text6(want.subnet6)} in ${text6(want.network6)}${mtu(want)}`;
      }
      return undefined;
    } catch (err) {
      return `subnet.env ${path}: ${describeError(err)}`;
    }
  }

  private async underlayProblem(): Promise<string | undefined> {
    if (!this.underlay) return undefined;
    const state = (
      await readFile(`/sys/class/net/${this.underlay}/operstate`, 'utf8').catch(() => 'missing')
    ).trim();
    if (state === 'up' || state === 'unknown') return undefined;
    return state === 'missing'
      ? `underlay interface ${this.underlay} is gone`
      : `underlay interface ${this.underlay} is ${state}`;
  }
}

function text6(c: Cidr6 | null | undefined): string {
  return c ? formatCidr6(c) : 'none';
}

/** An IPv4 subnet for the message; "no IPv4 subnet" when the file or lease has none (IPv6 only). */
function text4(c: Cidr | null): string {
  return c ? formatCidr(c) : 'no IPv4 subnet';
}

/** Both absent (IPv4 off), or both the same. */
function sameOptionalCidr(a: Cidr | null, b: Cidr | null): boolean {
  return a === null || b === null ? a === b : sameCidr(a, b);
}
