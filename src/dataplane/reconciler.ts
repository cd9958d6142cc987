// The reconciler: one pass at a time, run whenever something may have
// changed. Triggers only record what needs looking at, so any burst of them
// coalesces into one pass. Five kinds of pass:
//   full     desired state, observe everything, diff, apply: at start, on
//            the safety-net timer, when a monitor (re)starts, after a
//            failure. One that changed something is followed by a
//            verification pass; the state is converged when a pass finds
//            nothing to do. It runs in two lanes, as apply.ts does: the
//            entries (links, routes, neighbours, FDB) are read, diffed and
//            their batches started first; only once their routes' stage has
//            started (a big plan's routes) are the chains (or nft tables)
//            read, diffed and rewritten, so a cold start's 5,000 routes wait
//            for no iptables run.
//   entries  the same without the chains (which depend on our own lease
//            only): for kernel events about links, addresses or anything
//            twill cannot pin down.
//   delta    the leases changed and the last pass left the kernel matching
//            its desired state: the entries of the peers whose leases changed
//            (diff.ts, peerDelta) are diffed, old against new, and the
//            difference applied, without reading the kernel (a new peer: one
//            bridge and one ip batch, fed to kept processes when `feed` is
//            given: exec/kept-batch.ts; an observed pass that finds nothing
//            to do starts them). If anything fails, or the device or chains
//            would change, an entries pass.
//   repair   a kernel event showed one of twill's routes, neighbours or FDB
//            entries deleted or changed: just those entries are re-applied
//            from the desired state of the last observed pass, with no
//            observing (one or two batches, in kept processes as a delta's).
//            Their own events then match the desired state and trigger
//            nothing. If the repair fails, an entries pass.
//   chains   a rule event: only the touched table's two chains are observed,
//            diffed and rewritten.
// A resync pass (the safety net) that is still reading the kernel when a lease
// changes gives way: it abandons the reading, one delta runs, then it starts
// again; at most MAX_YIELDS times in a row, so leases changing all the time
// cannot starve it. A lease change waits for the rest of a pass only once
// that pass applies.
// Failed passes, and full passes that keep finding work although the leases
// did not change, back off and retry; a lease change cuts the back-off
// short. Observed passes also keep forwarding on (ensureForwarding:
// net.ipv4.ip_forward, with dual-stack net.ipv6.conf.all.forwarding too, and
// with IPv4 off only the latter; the log names what forwardingSysctls lists);
// failing to (a read-only /proc/sys) fails the pass's report, never the rest
// of it. With dual-stack (the desired state's masq6), observed passes read the
// IPv6 routes, the twill-v6 device's entries and the ip6tables chains too, and
// a chains pass looks at a table's chains in both families. Without IPv6, the
// first full pass after a start (until one applies cleanly) also reads,
// tolerantly, the IPv6 routes and ip6tables chains a dual-stack run may have
// left, and removes them; later passes spawn what IPv4-only passes always did.
// With IPv4 off (IPv6 only: masq null), the same the other way round: observed
// passes read no IPv4 route or iptables chain, but the first full pass reads,
// tolerantly, those an IPv4 or dual-stack run may have left, and removes them
// (and twill.<VNI>, which every pass sees). Observed passes also delete a
// CNI gateway an earlier lease of ours left on a bridge (diff.ts: its
// connected route would take the subnet of the peer that holds it now).
// In nftables mode ("EnableNFTables"), full and chains passes read and
// rewrite twill's nftables tables (nft-observe.ts) instead of the iptables
// chains; in either mode the first full pass after a start also removes,
// tolerantly read, what a run in the other mode left (twill's iptables chains
// and jumps, or twill's nftables tables).
// No pass runs before `ready` (the first complete peer list): a pass on an
// empty peer set would sweep every peer's entries on a restart.
// A plan of QUIET_MIN_ENTRIES entries or more (a cold start, a device
// recreated) is applied with `ip monitor` stopped (quietMonitors, monitor.ts'
// MonitorHush): its thousands of events would be twill's own, and reading them
// slows the batch that makes them; the monitor's restart asks for the full
// pass that looks at the kernel again.
// Each pass ends in a report (pass-report.ts: its log line names the first
// trigger and the sources that joined it); the masquerade's reads are
// masq-reads.ts', the forwarding check forwarding.ts'. A full pass whose
// masquerade reads fail after its entries' batches ran is reported with
// their ops and the read as its failure (not converged: it backs off).
import { describeError } from '../errors.ts';
import { KeptBatches } from '../exec/kept-batch.ts';
import type { Feeder, Runner } from '../exec/runner.ts';
import type { Logger } from '../log.ts';
import { abortable, Backoff, pause, quietOnAbort } from '../util/abort.ts';
import { applyOps, type ApplyResult } from './apply.ts';
import { ForwardingGuard } from './forwarding.ts';
import {
  masqLaneOps,
  passReads,
  tableOps,
  type Leftovers,
  type MasqReadOptions,
} from './masq-reads.ts';
import { assumedFrom, assumedWithout, diff, foreignRoutesAfter, peerDelta } from './diff.ts';
import {
  everything,
  indexDesired,
  prepareKnown,
  isEmpty,
  reindexDesired,
  judge,
  nothing,
  addWork,
  type Known,
  type Pending,
  joinTrigger,
  type Trigger,
} from './judge.ts';
import type { DesiredState, ObservedState, Op } from './model.ts';
import { logPass, type PassReport, type PassStages } from './pass-report.ts';
import type { Touch } from './kernel-event.ts';
import { observe } from './observe.ts';
import { monotonicMs } from '../util/clock.ts';

/**
 * What a lease change must leave alone for a delta pass: the devices and the chains' inputs, as
 * text (the IPv6 inputs hold bigints, which JSON cannot write as they are).
 */
function setupKey(want: DesiredState): string {
  return JSON.stringify([want.vxlan, want.masq, want.vxlan6, want.masq6], (_k, v: unknown) =>
    typeof v === 'bigint' ? v.toString() : v,
  );
}

/** What a plan with nothing to apply returns. */
const NO_APPLY: ApplyResult = { batches: 0, failures: [] };

export interface ReconcilerOptions {
  readonly runner: Runner;
  /**
   * starts the kept `ip -batch -` and `bridge -batch -` that delta and repair passes feed
   * (kept-batch.ts), and the big batches of observed passes, fed in pieces as they are rendered
   * (apply.ts); without it every batch is rendered whole before its process starts
   */
  readonly feed?: Feeder;
  readonly logger: Logger;
  /** the desired state now (from our lease and the current peers) */
  readonly desired: () => DesiredState;
  /**
   * sets the forwarding sysctls (`forwardingSysctls`) to 1 when they are not; true when it had
   * to; a throw is reported as a failure of the pass, not its end
   */
  readonly ensureForwarding: () => Promise<boolean>;
  /**
   * the sysctls ensureForwarding keeps at 1, as the log names them (default
   * ['net.ipv4.ip_forward']; a dual-stack node adds 'net.ipv6.conf.all.forwarding', which an
   * IPv6-only node has alone)
   */
  readonly forwardingSysctls?: readonly string[];
  /**
   * period of the safety-net full pass (jittered by ±10 %, so nodes started together spread out)
   */
  readonly resyncMs: number;
  /**
   * how long a kernel event's trigger waits for more to coalesce before the pass starts (default
   * 10 ms; a pass for lease changes alone waits LEASE_SETTLE_MS)
   */
  readonly settleMs?: number;
  /** resolves once the peer set is known (the store's first listing); passes wait for it */
  readonly ready?: Promise<void>;
  /**
   * settles when a cold start's early routes are written (early.ts): the first observed pass reads
   * the entries only then (a batch half done would read as routes to add), and runs its masquerade
   * lane meanwhile
   */
  readonly entriesAfter?: Promise<void>;
  readonly onPass?: (report: PassReport) => void;
  /** a pass begins (health: a pass that never ends is a stuck loop) */
  readonly onPassStart?: () => void;
  /** a pass threw (observe failed, say) */
  readonly onPassError?: (err: unknown) => void;
  /**
   * "EnableNFTables": the masquerade lives in twill's nftables tables (nft.ts), which full and
   * chains passes read instead of the iptables chains (default false: iptables mode)
   */
  readonly nftables?: boolean;
  /**
   * iptables mode: the nft command exists, so the first full pass looks for (and removes) the
   * tables an nftables-mode run left
   */
  readonly nftCommand?: boolean;
  /**
   * runs a plan of at least QUIET_MIN_ENTRIES routes, neighbours and FDB entries with `ip monitor`
   * stopped (monitor.ts, MonitorHush): the events of twill's own writes would otherwise slow them
   */
  readonly quietMonitors?: <T>(f: () => Promise<T>) => Promise<T>;
}

/**
 * The entries' lane's outcome with a masquerade lane that ran beside it (reconciler's
 * entriesAfter); its failure fails the pass as runLanes' does.
 */
async function joinMasq(
  lanes: { ops: Op[]; failures: string[] },
  masq: Promise<{ ops: Op[]; failures: readonly string[] }>,
  o: { signal: AbortSignal; entryOps: readonly Op[] },
): Promise<{ ops: Op[]; failures: string[] }> {
  try {
    const m = await masq;
    return { ops: [...lanes.ops, ...m.ops], failures: [...lanes.failures, ...m.failures] };
  } catch (err) {
    if (o.signal.aborted || o.entryOps.length === 0) throw err;
    return { ops: lanes.ops, failures: [...lanes.failures, `masquerade: ${describeError(err)}`] };
  }
}

/**
 * A plan with this many entries (routes, neighbours, FDB entries) runs with `ip monitor` stopped
 * (`quietMonitors`): a cold start, a device recreated, hundreds of nodes joining at once. Below it,
 * restarting the monitor and the full pass its restart asks for would cost more than its events.
 */
export const QUIET_MIN_ENTRIES = 1_000;

/** How long a pass asked for by lease changes alone waits for more (see the loop). */
const LEASE_SETTLE_MS = 1;
/**
 * A resync pass still reading the kernel gives way to a lease change at most this many times in a
 * row (then it reads to the end), so leases changing all the time cannot starve the safety net.
 */
const MAX_YIELDS = 3;
/** Passes that keep finding work this many times in a row are treated as failing. */
const MAX_UNSETTLED = 5;
/**
 * More drifted entries than this at once (a device deleted takes thousands
 * of neighbours and FDB entries with it) are not re-applied blindly: reading
 * the kernel is cheaper than a batch of thousands of lines that may all fail.
 */
const MAX_REPAIRS = 64;

export class Reconciler {
  private readonly o: ReconcilerOptions;
  private pending: Pending = {
    ...nothing(),
    entries: true,
    tables: new Set(['nat', 'filter']),
    first: { source: 'start', at: monotonicMs(), joined: [] },
  };
  private generation = 0;
  private convergedGeneration = -1;
  private known: Known | undefined;
  /**
   * the destinations other programs' routes held at the last observed pass: a delta or repair
   * pass, which reads nothing, leaves a peer's route there to an observed one (diff.ts)
   */
  private foreign: ReadonlySet<string> = new Set();
  /** ends an idle wait: any trigger while idle, only a lease change while backing off */
  private wakeAny: (() => void) | undefined;
  private wakeOnLeases: (() => void) | undefined;
  private last: PassReport | undefined;
  private spawns = 0;
  private readonly runner: Runner;
  /** o.feed, counting its spawns: the kept processes, and a pass's big batches fed in pieces */
  private readonly feed: Feeder | undefined;
  private readonly kept: KeptBatches | undefined;
  /**
   * when the next safety-net full pass is due (monotonicMs()); only a full pass moves it, so
   * other passes cannot put it off
   */
  private fullDueAt = 0;
  /** keeps forwarding on in observed passes; its failure stands in every pass's report */
  private readonly forwarding: ForwardingGuard;
  /**
   * what a run of the other family or masquerade mode may have left and no full pass has yet
   * removed cleanly (masq-reads.ts, Leftovers): the next full pass reads it too
   */
  private leftovers: Leftovers = { v6: true, v4: true, mode: true };
  /** aborts the reading of a resync pass that may give way to a lease change (see the loop) */
  private yieldRead: AbortController | undefined;
  /** resync passes that gave way in a row; at MAX_YIELDS the next one reads to the end */
  private yields = 0;
  /** a resync pass gave way (with the chains or not): it runs right after one delta */
  private resume: { readonly chains: boolean; waited: boolean } | undefined;

  /** ReconcilerOptions.entriesAfter, until the first observed pass has waited for it */
  private entriesAfter: Promise<void> | undefined;

  constructor(o: ReconcilerOptions) {
    this.o = o;
    this.entriesAfter = o.entriesAfter;
    this.runner = (file, args, opts) => {
      this.spawns++;
      return o.runner(file, args, opts);
    };
    const feed = o.feed;
    this.feed =
      feed &&
      ((file, args, opts) => {
        this.spawns++;
        return feed(file, args, opts);
      });
    this.kept = this.feed && new KeptBatches({ feed: this.feed });
    this.forwarding = new ForwardingGuard({
      logger: o.logger,
      ensure: o.ensureForwarding,
      ...(o.forwardingSysctls ? { sysctls: o.forwardingSysctls } : {}),
    });
  }

  /** Asks for a full pass (entries and chains). */
  trigger(source: string): void {
    this.mark(source, everything);
  }

  /**
   * The leases changed: a pass over the entries (ops that follow are not drift), cutting any
   * back-off short.
   */
  leasesChanged(): void {
    this.generation++;
    this.wakeOnLeases?.();
    this.mark('leases', (p) => (p.leases = true));
    this.yieldRead?.abort();
  }

  /**
   * A kernel event: asks for the least work that puts back what it touched (nothing, when it
   * matches the desired state).
   */
  touch(source: string, t: Touch): void {
    const work = judge(t, this.known, this.foreign);
    if (work.length > 0)
      this.mark(source, (p) => {
        work.forEach((w) => addWork(p, w));
        p.fromEvents = true;
      });
  }

  /**
   * Records what the next pass must do; `internal` (resync, verification, retry): not a trigger
   * from outside, not logged as one.
   */
  private mark(source: string, f: (p: Pending) => void, internal = false): void {
    if (!internal) this.o.logger.trace({ source }, 'pass triggered');
    f(this.pending);
    this.pending.first = joinTrigger(this.pending.first, { source, at: monotonicMs() });
    this.wakeAny?.();
  }

  lastPass(): PassReport | undefined {
    return this.last;
  }

  /** One full observe → diff → apply pass. */
  async pass(signal: AbortSignal): Promise<PassReport> {
    const r = await this.observedPass(signal, {
      chains: true,
      first: { source: 'direct', at: monotonicMs(), joined: [] },
    });
    // only a pass that may yield returns without a report
    if (r === undefined) throw new Error('a direct pass gave way');
    return r;
  }

  /**
   * Observe → diff → apply over the entries, and the chains too when `chains` (a full pass).
   * `mayYield`: a lease change while it is still reading the kernel abandons it (undefined; see
   * the loop); once it applies, it runs to the end.
   */
  private async observedPass(
    signal: AbortSignal,
    o: { chains: boolean; first: Trigger; mayYield?: boolean },
  ): Promise<PassReport | undefined> {
    const started = this.begin();
    const generation = this.generation;
    const want = this.o.desired();
    const before = this.known;
    // before applying: the events of our own changes are judged against what this pass wants
    this.known = indexDesired(want, generation);
    // from here until the kernel is read, a lease change may make this pass give way
    const reading = o.mayYield ? new AbortController() : undefined;
    this.yieldRead = reading;
    await this.forwarding.check();
    if (o.chains) this.fullDueAt = monotonicMs() + this.o.resyncMs * (0.9 + Math.random() * 0.2);
    const read = passReads(want, {
      chains: o.chains,
      nftables: this.o.nftables === true,
      nftCommand: this.o.nftCommand === true,
      leftovers: this.leftovers,
    });
    // a cold start's early routes still being written: the masquerade lane runs now, the entries
    // are read once their batch has ended
    const after = this.entriesAfter;
    this.entriesAfter = undefined;
    const masqFirst = after && o.chains ? this.masqLane(want, read.masq, signal) : undefined;
    masqFirst?.catch(() => undefined);
    if (after) await abortable(after, signal);
    const entries = this.readEntries(want, read.masq.families, { signal, reading });
    // its failure is taken below; a failure of the entries' making must not leave it unheard
    entries.catch(() => undefined);
    // the peers' entries (desired.ts makes them when first read) are made while the first read
    // (`ip addr show`) runs: 5,000 dual-stack vxlan peers' took 50-80 ms. Should making them
    // throw, the pass fails as a failed desired() did, with the last pass's indexes kept.
    try {
      void want.routes;
    } catch (err) {
      this.known = before;
      throw err;
    }
    let seen: ObservedState | undefined;
    try {
      seen = await entries;
    } catch (err) {
      // what the masquerade lane applied meanwhile is reported, with the read's failure
      const m = masqFirst && (await masqFirst.catch(() => undefined));
      if (!m || m.ops.length === 0 || signal.aborted) throw err;
      const failures = [...m.failures, `reading the kernel: ${describeError(err)}`];
      return this.finish(
        { kind: 'full', ops: m.ops, failures, converged: false, drift: false },
        { started, observed: monotonicMs(), first: o.first },
      );
    }
    // it gave way having changed nothing: the kernel is still what the last pass left
    if (seen === undefined) {
      this.known = before;
      return undefined;
    }
    const observed = monotonicMs();
    if (seen.foreignRoutes) this.foreign = foreignRoutesAfter(want, seen);
    const entryOps = diff(want, seen);
    const lanes = await this.runLanes(want, entryOps, {
      masq: o.chains && !masqFirst ? read.masq : undefined,
      signal,
    });
    const { ops, failures } = masqFirst
      ? await joinMasq(lanes, masqFirst, { signal, entryOps })
      : lanes;
    const drift = ops.length > 0 && generation === this.convergedGeneration;
    // removed, or there were none: later passes need not look
    const { v6, v4, mode } = read.leftovers;
    if (failures.length === 0)
      this.leftovers = {
        v6: this.leftovers.v6 && !v6,
        v4: this.leftovers.v4 && !v4,
        mode: this.leftovers.mode && !mode,
      };
    if (ops.length === 0) {
      this.convergedGeneration = generation;
      // the next lease change or repair then waits for no process start
      this.kept?.warm(want.vxlan || want.vxlan6 ? ['ip', 'bridge'] : ['ip']);
    }
    const kind = o.chains ? 'full' : 'entries';
    return this.finish(
      { kind, ops, failures, converged: ops.length === 0, drift },
      { started, observed, first: o.first },
    );
  }

  /**
   * The entries' lane's reads (the masquerade's wait until the entries' routes have started, off
   * a cold start's path: its 5,000 routes are the kernel's longest work); undefined when a lease
   * change made the pass give way (`reading` aborted).
   */
  private async readEntries(
    want: DesiredState,
    families: MasqReadOptions['families'],
    o: { signal: AbortSignal; reading: AbortController | undefined },
  ): Promise<ObservedState | undefined> {
    const { signal, reading } = o;
    const readSignal = reading ? AbortSignal.any([signal, reading.signal]) : signal;
    const read = observe(this.runner, want.vxlan?.name, readSignal, {
      chains: false,
      ...families,
      ...(want.masq6 ? { dev6: want.vxlan6?.name } : {}),
    }).finally(() => (this.yieldRead = undefined));
    return read.catch((err: unknown) => {
      if (reading?.signal.aborted && !signal.aborted) return undefined;
      throw err;
    });
  }

  /**
   * Applies the entries' ops, and with `masq` (a full pass) the masquerade's lane once the
   * entries' routes' stage has started. A masquerade lane that fails (a chain or table could not be
   * read) fails the pass, as a failed read always has; when the entries' batches ran first, the
   * pass is reported with their ops and the lane's failure (not converged: the loop backs off and
   * retries a full pass, which finds the entries in place), so what was applied is logged and
   * counted.
   */
  private async runLanes(
    want: DesiredState,
    entryOps: Op[],
    o: { masq: MasqReadOptions | undefined; signal: AbortSignal },
  ): Promise<{ ops: Op[]; failures: string[] }> {
    const { masq, signal } = o;
    // the kernel was not as twill left it (a device made again, by twill or another program, has a
    // new index, which the kept processes would not know): they start afresh once it is
    if (entryOps.length > 0) this.kept?.recycle();
    let batchesStarted = (): void => undefined;
    const entriesStarted = new Promise<void>((resolve) => (batchesStarted = resolve));
    const entries = (
      entryOps.length > 0
        ? this.apply(entryOps, signal, false, batchesStarted)
        : Promise.resolve(NO_APPLY)
    ).finally(batchesStarted);
    const lane = masq
      ? entriesStarted.then(() => this.masqLane(want, masq, signal))
      : Promise.resolve({ ops: [], failures: [] });
    const [e, m] = await Promise.allSettled([entries, lane]);
    if (e.status === 'rejected') throw e.reason;
    if (m.status === 'rejected' && (signal.aborted || entryOps.length === 0)) throw m.reason;
    const done =
      m.status === 'fulfilled'
        ? m.value
        : { ops: [], failures: [`masquerade: ${describeError(m.reason)}`] };
    return { ops: [...entryOps, ...done.ops], failures: [...e.value.failures, ...done.failures] };
  }

  /**
   * Applies a lease change as the difference between the old and new desired states; undefined when
   * an observed pass must do it.
   */
  private async deltaPass(signal: AbortSignal, first: Trigger): Promise<PassReport | undefined> {
    const k = this.known;
    // only from a kernel known to match the last desired state
    if (k === undefined || this.convergedGeneration !== k.generation) return undefined;
    const generation = this.generation;
    const want = this.o.desired();
    if (setupKey(want) !== setupKey(k.want)) return undefined;
    // only the peers whose leases changed, when both states say which (desired.ts): a new lease
    // among 5,000 costs one peer's entries, not a diff of every peer's
    const delta = peerDelta(k.want, want);
    const ops = delta ? diff(delta.want, assumedFrom(delta.had)) : diff(want, assumedFrom(k.want));
    // a changed route is a `route replace`, which would also replace a foreign route the monitors
    // never saw (it has no proto 151): only an observed pass may decide that
    if (ops.some((op) => op.kind === 'route' && op.action === 'change')) return undefined;
    if (this.nearForeign(ops)) return undefined;
    const started = this.begin();
    this.known = delta
      ? reindexDesired(k, delta, want, generation)
      : indexDesired(want, generation);
    if (!(await this.appliedAll(ops, signal, 'lease change'))) return undefined;
    this.convergedGeneration = generation;
    return this.finish(
      { kind: 'delta', ops, failures: [], converged: true, drift: false },
      { started, observed: started, first },
    );
  }

  /**
   * Sorts the indexes kernel events are judged by (judge.ts, prepareKnown), when the last pass left
   * them unsorted: for its caller to run once a pass is done and nothing waits.
   */
  prepareIndexes(): void {
    prepareKnown(this.known);
  }

  /** The kernel is known to match the last desired state: a lease change can be a delta. */
  private deltaReady(): boolean {
    return this.known !== undefined && this.convergedGeneration === this.known.generation;
  }

  /**
   * Whether a route op of a delta or repair pass touches a destination another program's route
   * held at the last observed pass: twill's route there is at metric 0, not the desired state's,
   * which these passes assume, so only an observed pass may decide it.
   */
  private nearForeign(ops: readonly Op[]): boolean {
    return (
      this.foreign.size > 0 &&
      ops.some((op) => op.kind === 'route' && this.foreign.has(op.route.dst))
    );
  }

  /**
   * Re-applies the drifted entries from the last observed pass's desired state; undefined when that
   * is out of date or the repair fails (then an entries pass).
   */
  private async repairPass(
    signal: AbortSignal,
    p: Pending,
    first: Trigger,
  ): Promise<PassReport | undefined> {
    const k = this.known;
    if (k === undefined || k.generation !== this.generation) return undefined;
    const started = this.begin();
    const ops = diff(
      k.want,
      assumedWithout(k.want, { routes: p.routes, neighs: p.neighs, fdbDsts: p.fdbDsts }),
    );
    if (this.nearForeign(ops)) return undefined;
    if (!(await this.appliedAll(ops, signal, 'repair'))) return undefined;
    const converged = this.convergedGeneration === k.generation;
    return this.finish(
      {
        kind: 'repair',
        ops,
        failures: [],
        converged,
        drift: ops.length > 0 && converged,
      },
      { started, observed: started, first },
    );
  }

  /**
   * Observes, diffs and rewrites only the chains of the given tables (nftables mode: twill's
   * tables).
   */
  private async chainsPass(
    signal: AbortSignal,
    tables: ReadonlySet<'nat' | 'filter'>,
    first: Trigger,
  ): Promise<PassReport> {
    const started = this.begin();
    const want = this.known?.want ?? this.o.desired();
    const nftables = this.o.nftables === true;
    const ops = await tableOps(this.runner, want, { nftables, tables }, signal);
    const observed = monotonicMs();
    const { failures } = ops.length > 0 ? await this.apply(ops, signal) : { failures: [] };
    const converged = ops.length === 0 && this.convergedGeneration === this.generation;
    return this.finish(
      {
        kind: 'chains',
        ops,
        failures,
        converged,
        drift: ops.length > 0 && this.convergedGeneration === this.generation,
      },
      { started, observed, first },
    );
  }

  private begin(): number {
    this.o.onPassStart?.();
    this.spawns = 0;
    return monotonicMs();
  }

  private finish(
    r: Omit<PassReport, 'at' | 'durationMs' | 'stages'>,
    t: { started: number; observed: number; first: Trigger },
  ): PassReport {
    const now = monotonicMs();
    const applyMs = r.ops.length > 0 ? now - t.observed : 0;
    const stages: PassStages = {
      trigger: t.first.source,
      ...(t.first.joined.length > 0 ? { joined: t.first.joined } : {}),
      waitedMs: t.started - t.first.at,
      observeMs: t.observed - t.started,
      applyMs,
      spawns: this.spawns,
    };
    // ip_forward is only checked by observed passes; its failure holds for the passes between them
    // too
    const standing = this.forwarding.failure;
    const failures = standing === undefined ? r.failures : [standing, ...r.failures];
    const report: PassReport = {
      ...r,
      failures,
      at: Date.now(),
      durationMs: now - t.started,
      stages,
    };
    logPass(this.o.logger, { report, failures: r.failures });
    this.last = report;
    this.o.onPass?.(report);
    return report;
  }

  /** The masquerade's lane of a full pass: its reads (masq-reads.ts), then what they need. */
  private async masqLane(
    want: DesiredState,
    o: MasqReadOptions,
    signal: AbortSignal,
  ): Promise<{ ops: Op[]; failures: readonly string[] }> {
    const ops = await masqLaneOps(this.runner, want, o, signal);
    const { failures } = ops.length > 0 ? await this.apply(ops, signal) : NO_APPLY;
    return { ops, failures };
  }

  /**
   * Applies a plan; a big one with the monitors quiet (`quietMonitors`); with `kept` (a pass that
   * read nothing) its ip and bridge batches in the kept processes. `started` is called once the
   * links' lane has started its routes' stage (applyOps' `routesStarted`).
   */
  private apply(
    ops: readonly Op[],
    signal: AbortSignal,
    kept = false,
    started?: () => void,
  ): Promise<ApplyResult> {
    const o = {
      runner: this.runner,
      signal,
      ...(kept && this.kept ? { kept: this.kept } : {}),
      ...(this.feed ? { feed: this.feed } : {}),
      ...(started ? { routesStarted: started } : {}),
    };
    const run = (): Promise<ApplyResult> => applyOps(ops, o);
    const quiet = this.o.quietMonitors;
    let entries = 0;
    for (const op of ops)
      if (op.kind === 'route' || op.kind === 'neigh' || op.kind === 'fdb') entries++;
    return quiet !== undefined && entries >= QUIET_MIN_ENTRIES ? quiet(run) : run();
  }

  /**
   * Applies the ops of a pass that did not read the kernel; false when any failed (logged at
   * debug): then an entries pass, which does read it, decides.
   */
  private async appliedAll(
    ops: readonly Op[],
    signal: AbortSignal,
    what: string,
  ): Promise<boolean> {
    if (ops.length === 0) return true;
    const { failures } = await this.apply(ops, signal, true);
    if (failures.length === 0) return true;
    // a stale device index fails both tools' lines: neither is kept
    this.kept?.recycle();
    this.o.logger.debug(
      { failures: failures.slice(0, 5) },
      `${what} did not apply; an entries pass decides`,
    );
    return false;
  }

  /** Runs passes until `signal` aborts (and then ends quietly). */
  run(signal: AbortSignal): Promise<void> {
    return quietOnAbort(signal, () => this.loop(signal)).finally(() => this.kept?.recycle());
  }

  private async loop(signal: AbortSignal): Promise<void> {
    if (this.o.ready) await abortable(this.o.ready, signal);
    const backoff = new Backoff(200, 5_000);
    let unsettled = 0;
    let chainsUnsettled = 0;
    this.fullDueAt = monotonicMs();
    while (!signal.aborted) {
      if (monotonicMs() >= this.fullDueAt) this.mark('resync', everything, true);
      if (isEmpty(this.pending) && this.resume === undefined) {
        const woke = await this.idle(signal, {
          ms: Math.max(0, this.fullDueAt - monotonicMs()),
          anyTrigger: true,
        });
        if (!woke) this.mark('resync', everything, true);
      }
      // kernel events come line by line (a device's neighbours go one after another): wait for
      // the rest; a lease change needs no such wait (a store delivers a burst of changes at once,
      // handled before this timer fires, and more arriving during the pass coalesce into the next),
      // nor does the first pass, which reads everything anyway and answers no event: its wait was
      // 10 ms of every cold start
      const onlyLeases = this.pending.leases && isEmpty({ ...this.pending, leases: false });
      const atStart = this.pending.first?.source === 'start';
      if (!atStart) await pause(onlyLeases ? LEASE_SETTLE_MS : (this.o.settleMs ?? 10), signal);
      const p = this.pending;
      this.pending = nothing();
      // a resync pass that gave way to a lease change (see below) lets one delta go first; it
      // runs next, or now when anything but lease changes is pending
      const resume = this.resume;
      const leasesFirst =
        resume?.waited === false &&
        p.leases &&
        isEmpty({ ...p, leases: false }) &&
        this.deltaReady();
      if (resume) resume.waited = true;
      const first = p.first ?? { source: 'resync', at: monotonicMs(), joined: [] };
      const generation = this.generation;
      let delay = 0;
      try {
        const repairCount = p.routes.size + p.neighs.size + p.fdbDsts.size;
        const repairs = repairCount > 0;
        let observed =
          p.entries || repairCount > MAX_REPAIRS || (resume !== undefined && !leasesFirst);
        // a delta assumes the kernel matches the last desired state: not while a drift is pending
        if (!observed && p.leases)
          observed = repairs || (await this.deltaPass(signal, first)) === undefined;
        if (!observed && repairs)
          observed = (await this.repairPass(signal, p, first)) === undefined;
        if (observed) {
          this.resume = undefined;
          const chains = p.tables.size > 0 || resume?.chains === true;
          // the periodic safety net reads 15,000 entries at 5,000 peers: a lease change that
          // comes meanwhile goes first (a delta), rather than wait for it to end
          const mayYield =
            (first.source === 'resync' || resume !== undefined) &&
            !p.fromEvents &&
            this.yields < MAX_YIELDS &&
            this.deltaReady();
          const r = await this.observedPass(signal, { chains, first, mayYield });
          if (r === undefined) {
            this.yields++;
            this.resume = { chains, waited: false };
            // lease changes it had taken in are still to be applied: by the delta that goes first
            if (p.leases) this.mark('leases', (q) => (q.leases = true), true);
            continue;
          }
          this.yields = 0;
          // leases changing faster than passes run is not a kernel that refuses to settle
          unsettled = r.converged || this.generation !== generation ? 0 : unsettled + 1;
          if (r.failures.length > 0 || unsettled >= MAX_UNSETTLED) delay = backoff.next();
          else backoff.reset();
          if (!r.converged)
            this.mark('verification', (q) => (chains ? everything(q) : (q.entries = true)), true);
        } else if (p.tables.size > 0) {
          const r = await this.chainsPass(signal, p.tables, first);
          // chains that keep needing a rewrite (another program fighting us) back off like a
          // failure
          chainsUnsettled = r.ops.length > 0 ? chainsUnsettled + 1 : 0;
          if (r.failures.length > 0 || chainsUnsettled >= MAX_UNSETTLED) delay = backoff.next();
          // verify what was rewritten (with iptables-legacy no event would say it went wrong)
          if (r.ops.length > 0)
            this.mark('verification', (q) => p.tables.forEach((x) => q.tables.add(x)), true);
        }
      } catch (err) {
        if (signal.aborted) throw err;
        delay = backoff.next();
        this.mark('retry', everything, true);
        this.o.onPassError?.(err);
        this.o.logger.warn(
          { err: describeError(err), retryInMs: delay },
          'dataplane pass failed; retrying',
        );
      }
      if (delay > 0) await this.idle(signal, { ms: delay, anyTrigger: false });
    }
  }

  /**
   * Waits `ms`, or less: until any trigger (`anyTrigger`) or a lease change, or the abort. True
   * when woken early.
   */
  private async idle(
    signal: AbortSignal,
    o: { ms: number; anyTrigger: boolean },
  ): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const done = (early: boolean): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        this.wakeAny = undefined;
        this.wakeOnLeases = undefined;
        resolve(early);
      };
      const onAbort = (): void => done(true);
      const timer = setTimeout(() => done(false), o.ms);
      if (o.anyTrigger) this.wakeAny = () => done(true);
      this.wakeOnLeases = () => done(true);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}
