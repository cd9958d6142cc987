// The reconciler: one pass at a time — desired state, observe, diff, apply —
// run whenever something may have changed. Triggers (lease events, kernel
// events, the resync timer) only mark the state dirty, so any burst of them
// coalesces into one pass. A pass that changed something is followed by a
// verification pass; the state is converged when a pass finds nothing to do.
// Failed passes, and passes that keep finding work although the leases did
// not change, back off and retry; a lease change cuts the back-off short.
// No pass runs before `ready` (the first complete peer list): a pass on an
// empty peer set would sweep every peer's entries on a restart.
import { describeError } from '../errors.ts';
import type { Runner } from '../exec/runner.ts';
import type { Logger } from '../log.ts';
import { Backoff, sleep } from '../util/abort.ts';
import { applyOps } from './apply.ts';
import { diff } from './diff.ts';
import type { DesiredState, Op, PeerProblem } from './model.ts';
import { observe } from './observe.ts';

export interface PassReport {
  /** epoch ms when the pass ended */
  readonly at: number;
  readonly durationMs: number;
  readonly ops: readonly Op[];
  readonly failures: readonly string[];
  /** the kernel matched the desired state (no ops were needed) */
  readonly converged: boolean;
  /** ops were needed although the desired state had not changed since the last converged pass */
  readonly drift: boolean;
  readonly problems: readonly PeerProblem[];
}

export interface ReconcilerOptions {
  readonly runner: Runner;
  readonly logger: Logger;
  /** the desired state now (from our lease and the current peers) */
  readonly desired: () => DesiredState;
  /** sets net.ipv4.ip_forward=1 when it is not; true when it had to */
  readonly ensureForwarding: () => Promise<boolean>;
  /** period of the safety-net pass */
  readonly resyncMs: number;
  /** how long a trigger waits for more to coalesce before the pass starts (default 10 ms) */
  readonly settleMs?: number;
  /** resolves once the peer set is known (the store's first listing); passes wait for it */
  readonly ready?: Promise<void>;
  readonly onPass?: (report: PassReport) => void;
  /** a pass begins (health: a pass that never ends is a stuck loop) */
  readonly onPassStart?: () => void;
  /** a pass threw (observe failed, say) */
  readonly onPassError?: (err: unknown) => void;
}

/** Passes that keep finding work this many times in a row are treated as failing. */
const MAX_UNSETTLED = 5;

export class Reconciler {
  private readonly o: ReconcilerOptions;
  private dirty = true;
  private generation = 0;
  private convergedGeneration = -1;
  /** ends an idle wait: any trigger while idle, only a lease change while backing off */
  private wakeAny: (() => void) | undefined;
  private wakeOnLeases: (() => void) | undefined;
  private readonly problems = new Map<string, string>();
  private last: PassReport | undefined;

  constructor(o: ReconcilerOptions) {
    this.o = o;
  }

  /** Asks for a pass. `desiredChanged`: the leases changed, so ops that follow are not drift. */
  trigger(source: string, desiredChanged = false): void {
    this.o.logger.trace({ source }, 'pass triggered');
    this.dirty = true;
    if (desiredChanged) {
      this.generation++;
      this.wakeOnLeases?.();
    }
    this.wakeAny?.();
  }

  lastPass(): PassReport | undefined {
    return this.last;
  }

  /** One observe → diff → apply pass. */
  async pass(signal: AbortSignal): Promise<PassReport> {
    const started = performance.now();
    this.o.onPassStart?.();
    const generation = this.generation;
    const want = this.o.desired();
    if (await this.o.ensureForwarding()) this.o.logger.warn('net.ipv4.ip_forward was 0; set it to 1');
    const seen = await observe(this.o.runner, want.vxlan?.name, signal);
    const ops = diff(want, seen);
    const drift = ops.length > 0 && generation === this.convergedGeneration;
    const { failures } = ops.length > 0 ? await applyOps(this.o.runner, ops, signal) : { failures: [] };
    if (ops.length === 0) this.convergedGeneration = generation;
    this.noteProblems(want.problems);
    const report: PassReport = { at: Date.now(), durationMs: performance.now() - started, ops, failures, converged: ops.length === 0, drift, problems: want.problems };
    this.logPass(report);
    this.last = report;
    this.o.onPass?.(report);
    return report;
  }

  /** Runs passes until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    if (this.o.ready && !signal.aborted) await Promise.race([this.o.ready, new Promise((r) => signal.addEventListener('abort', r, { once: true }))]);
    const backoff = new Backoff(200, 5_000);
    let unsettled = 0;
    while (!signal.aborted) {
      if (!this.dirty) await this.idle(signal, { ms: this.o.resyncMs, anyTrigger: true });
      await sleep(this.o.settleMs ?? 10, signal);
      if (signal.aborted) return;
      this.dirty = false;
      const generation = this.generation;
      let delay = 0;
      try {
        const r = await this.pass(signal);
        // leases changing faster than passes run is not a kernel that refuses to settle
        unsettled = r.converged || this.generation !== generation ? 0 : unsettled + 1;
        if (r.failures.length > 0 || unsettled >= MAX_UNSETTLED) delay = backoff.next();
        else backoff.reset();
        if (!r.converged) this.dirty = true;
      } catch (err) {
        if (signal.aborted) return;
        delay = backoff.next();
        this.dirty = true;
        this.o.onPassError?.(err);
        this.o.logger.warn({ err: describeError(err), retryInMs: delay }, 'dataplane pass failed; retrying');
      }
      if (delay > 0) await this.idle(signal, { ms: delay, anyTrigger: false });
    }
  }

  /** Waits `ms`, or less: until any trigger (`anyTrigger`) or a lease change, or the abort. */
  private async idle(signal: AbortSignal, o: { ms: number; anyTrigger: boolean }): Promise<void> {
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.wakeAny = undefined;
        this.wakeOnLeases = undefined;
        resolve();
      };
      const timer = setTimeout(done, o.ms);
      if (o.anyTrigger) this.wakeAny = done;
      this.wakeOnLeases = done;
      signal.addEventListener('abort', done, { once: true });
    });
  }

  private logPass(r: PassReport): void {
    if (r.ops.length === 0) return;
    const byKind: Record<string, number> = {};
    for (const op of r.ops) byKind[`${op.kind} ${op.action}`] = (byKind[`${op.kind} ${op.action}`] ?? 0) + 1;
    const fields = { ops: byKind, durationMs: Math.round(r.durationMs) };
    if (r.failures.length > 0) this.o.logger.warn({ ...fields, failures: r.failures.slice(0, 20) }, 'dataplane pass could not apply every change');
    else if (r.drift) this.o.logger.warn(fields, 'repaired dataplane drift');
    else this.o.logger.info(fields, 'dataplane updated');
    if (this.o.logger.isLevelEnabled('debug')) this.o.logger.debug({ lines: r.ops.map((o) => o.line) }, 'dataplane ops');
  }

  /** Logs each peer problem once, and when it clears. */
  private noteProblems(problems: readonly PeerProblem[]): void {
    const now = new Map(problems.map((p) => [p.key, p.reason]));
    for (const p of problems) {
      if (this.problems.get(p.key) !== p.reason) this.o.logger.warn({ key: p.key, subnet: p.subnet, reason: p.reason }, 'cannot program peer');
    }
    for (const key of this.problems.keys()) if (!now.has(key)) this.o.logger.info({ key }, 'peer problem cleared');
    this.problems.clear();
    for (const [k, v] of now) this.problems.set(k, v);
  }
}
