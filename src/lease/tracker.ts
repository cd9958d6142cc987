// Tracks the peer set from lease events: validates every record against our
// config and subnet, logs joins, changes and leaves once each, logs a bad
// record once per reason, and tells the keeper when our own record is gone
// or no longer ours. Level-triggered: a snapshot replaces the whole set,
// except that a peer missing from a re-list (rather than deleted by an
// event) lingers for `lingerMs`: after an etcd wipe every node re-creates
// its key within seconds, and the dataplane must not drop and re-add routes
// meanwhile. A peer deleted by an event lingers `deleteLingerMs` (500 ms):
// a running node whose key was deleted re-creates it within milliseconds,
// and its peers must not cut its pods off meanwhile; a node that is really
// gone is dropped well within a second, and one whose store says so (a
// deleted Node object) at once.
import type { Logger } from '../log.ts';
import { sameCidr, type Cidr } from '../net/ipv4.ts';
import { sameOptionalCidr6 } from '../net/ipv6.ts';
import { describeLease, encodeLeaseValue, leaseSubnetText } from './codec.ts';
import {
  checkPeer,
  forOurFamilies,
  truncated,
  withoutConflicts,
  type PeerContext,
  type Refusal,
} from './admit.ts';
import { JoinIndex } from './join-index.ts';
import type { Lease, LeaseAttrs, LeaseEvent, LeaseRecord } from './types.ts';

export interface TrackerOptions {
  readonly context: PeerContext;
  /** our lease key; its record is watched for loss rather than treated as a peer */
  readonly selfKey: string;
  /** the attributes our record must carry (the keeper's current lease) */
  readonly selfAttrs: () => LeaseAttrs;
  readonly logger: Logger;
  /** our record vanished or is no longer ours */
  readonly onSelfLost: (why: string) => void;
  /** how long a peer missing from a re-list is kept (default 10 s; 0: drop at once) */
  readonly lingerMs?: number;
  /** how long a peer deleted by an event is kept (default 500 ms; 0: drop at once) */
  readonly deleteLingerMs?: number;
}

/** The set-level stage's outcome (see PeerTracker.admission). */
interface Admission {
  readonly admitted: Lease[];
  readonly refused: Map<string, Refusal>;
  /**
   * the admitted peers by key, and their subnets and VtepMACs indexed for a join's check
   * (join-index.ts): made by the first joined() after a whole stage, not by the stage (a cold
   * start's 5,000 peers need neither)
   */
  quick?: { readonly byKey: Map<string, Lease>; readonly index: JoinIndex };
}

const DEFAULT_LINGER_MS = 10_000;
export const DEFAULT_DELETE_LINGER_MS = 500;
/** snapshots larger than this log one summary line instead of a line per peer */
const QUIET_ABOVE = 20;
/** changes of the peer set between two admissions checked one by one; more redo the whole stage */
const MAX_JOURNAL = 64;

export class PeerTracker {
  private readonly peers = new Map<string, Lease>();
  /** peers missing from the last re-list, kept until their time is up */
  private readonly lingering = new Map<string, { lease: Lease; until: number }>();
  private lingerTimer: NodeJS.Timeout | undefined;
  /** while applying a large snapshot, per-peer lines go to debug and one summary to info */
  private quiet = false;
  /** records refused on their own (checkPeer), by key */
  private readonly invalid = new Map<string, Refusal>();
  /**
   * the set-level stage (conflicts between peers), redone after each change of the set, or
   * updated key by key (joined(): a lease among 5,000 joining cost a filter and a conflict check
   * over all of them, 7-8 ms of the 15 before its pass, 2 cores)
   */
  private admission: Admission = { admitted: [], refused: new Map() };
  /** the set changed since `admission` was computed */
  private admissionStale = true;
  /**
   * what changed since `admission` was computed, key by key (a lease that joined, or null: it
   * left), or 'all' (a re-list, a changed lease, too many changes): how much of the set-level
   * stage must be redone (see admitted())
   */
  private journal: Map<string, Lease | null> | 'all' = 'all';
  private connected: boolean | undefined;
  private readonly listeners: ((peersChanged: boolean) => void)[] = [];
  /** a record was refused, or a refusal ended, without the admitted set changing */
  private refusalsChanged = false;
  private readonly firstListing = Promise.withResolvers<void>();
  private readonly opts: TrackerOptions;

  constructor(opts: TrackerOptions) {
    this.opts = opts;
  }

  /**
   * Resolves at the store's first complete listing: no pass may run before it, or a restart would
   * sweep every peer's entries.
   */
  get listed(): Promise<void> {
    return this.firstListing.promise;
  }

  /**
   * Calls `listener` after each event that changed the admitted peer set (`peersChanged`) or only
   * the refused records (health and status show those too).
   */
  subscribe(listener: (peersChanged: boolean) => void): void {
    this.listeners.push(listener);
  }

  /** The admitted peers: every record that passed both stages of admission (admit.ts). */
  list(): Lease[] {
    return this.admitted().admitted;
  }

  /** Records refused, by key, with why: on their own, or for a conflict with other peers. */
  skipped(): ReadonlyMap<string, Refusal> {
    const conflicts = this.admitted().refused;
    return conflicts.size === 0 ? this.invalid : new Map([...this.invalid, ...conflicts]);
  }

  /**
   * The set-level stage over the peers that passed `checkPeer`, redone once per change of the set
   * (not per event of a snapshot); a refusal is logged when it starts or changes, like a record's.
   */
  private admitted(): Admission {
    if (!this.admissionStale) return this.admission;
    const quick = this.joined();
    this.journal = new Map();
    this.admissionStale = false;
    if (quick) {
      this.admission = { ...this.admission, admitted: quick };
      return this.admission;
    }
    // (the whole stage below drops `quick`, which a failed join may have left half-updated)
    const all = [...this.peers.values(), ...[...this.lingering.values()].map((l) => l.lease)];
    const set = withoutConflicts(all, this.opts.context.config);
    const refused = new Map(set.refused.map((r) => [r.lease.key, r.refusal]));
    const before = this.admission.refused;
    for (const [key, r] of refused) {
      const was = before.get(key);
      if (was?.reason !== r.reason || was.detail !== r.detail)
        this.opts.logger.warn(
          { key: truncated(key), reason: r.reason, detail: r.detail },
          'skipping invalid peer lease',
        );
    }
    const admitted = new Set(set.admitted.map((p) => p.key));
    for (const key of before.keys())
      if (admitted.has(key))
        this.opts.logger.info({ key: truncated(key) }, 'peer no longer conflicts; admitted');
    this.admission = { admitted: set.admitted, refused };
    return this.admission;
  }

  /**
   * Makes what joined() checks a join with (the admitted peers by key, and their index) when it is
   * not made yet: at 5,000 peers that took 20 ms (IPv4) to 90 ms (dual-stack, 2 cores), which the
   * first lease event after a whole stage paid on top of its own time. The daemon calls it once a
   * pass has converged, off any event's path. (A stale admission or one with refusals needs none.)
   */
  prepareJoins(): void {
    if (!this.admissionStale && this.admission.refused.size === 0) this.quickOf(this.admission);
  }

  /** `a`'s quick path, made from its admitted list when it is not. */
  private quickOf(a: Admission): NonNullable<Admission['quick']> {
    a.quick ??= {
      byKey: new Map(a.admitted.map((p) => [p.key, p])),
      index: new JoinIndex(this.opts.context.config, a.admitted),
    };
    return a.quick;
  }

  /**
   * The admitted set without redoing the set-level stage, when that cannot change its outcome:
   * the last one refused no peer, and since then peers only left, or joined without a conflict
   * of their own (JoinIndex). Undefined when it must be redone.
   */
  private joined(): Lease[] | undefined {
    const j = this.journal;
    if (j === 'all' || this.admission.refused.size > 0) return undefined;
    // byKey and the index in place: when a join conflicts, the whole stage is redone from the
    // peers, they with it; the list a copy (the last one may still be read), in the same order:
    // the peers that stay, then those that joined (a copy and an indexOf are the engine's, not a
    // loop of ours), which keeps a delta's compare short (diff.ts, changedPeers)
    const list = this.admission.admitted.slice();
    const { byKey: kept, index } = this.quickOf(this.admission);
    for (const key of j.keys()) {
      const was = kept.get(key);
      if (was === undefined) continue;
      kept.delete(key);
      index.remove(was);
      const at = list.indexOf(was);
      if (at < 0) return undefined;
      list.splice(at, 1);
    }
    for (const [key, lease] of j) {
      if (lease === null) continue;
      if (!index.joins(lease)) return undefined;
      index.add(lease);
      kept.set(key, lease);
      list.push(lease);
    }
    return list;
  }

  /** Records a key joining (its lease) or leaving (null) for admitted(). */
  private note(key: string, lease: Lease | null): void {
    if (this.journal === 'all') return;
    this.journal.set(key, lease);
    // past a handful of changes the whole stage is as cheap as checking each
    if (this.journal.size > MAX_JOURNAL) this.journal = 'all';
  }

  handle(ev: LeaseEvent): void {
    switch (ev.type) {
      case 'snapshot':
        this.snapshot(ev.records, ev.reason);
        this.firstListing.resolve();
        break;
      case 'put':
        if (this.put(ev.record)) this.changed();
        break;
      case 'delete':
        if (ev.key === this.opts.selfKey) this.opts.onSelfLost(`our lease ${ev.key} was deleted`);
        this.forgetRefusal(ev.key);
        this.deleted(ev.key, ev.gone === true);
        break;
      case 'connectivity':
        this.connectivity(ev.connected, ev.detail);
        break;
    }
    if (this.refusalsChanged) this.notify(false);
  }

  private snapshot(records: readonly LeaseRecord[], reason: string): void {
    this.opts.logger.debug({ reason, records: records.length }, 'lease snapshot');
    this.journal = 'all';
    let changed = false;
    const keys = new Set(records.map((r) => r.key));
    const linger = this.opts.lingerMs ?? DEFAULT_LINGER_MS;
    const before = this.peers.size;
    this.quiet = records.length > QUIET_ABOVE || this.peers.size > QUIET_ABOVE;
    for (const [key, lease] of [...this.peers]) {
      if (keys.has(key)) continue;
      if (linger > 0) this.linger(key, lease, linger);
      else changed = this.leave(key) || changed;
    }
    for (const key of [...this.invalid.keys()]) if (!keys.has(key)) this.forgetRefusal(key);
    for (const r of records) changed = this.put(r) || changed;
    const summarize = this.quiet;
    this.quiet = false;
    if (summarize)
      this.opts.logger.info(
        {
          reason,
          peers: this.peers.size,
          before,
          lingering: this.lingering.size,
          invalid: this.invalid.size,
        },
        'peer set re-listed',
      );
    if (!keys.has(this.opts.selfKey))
      this.opts.onSelfLost(`our lease ${this.opts.selfKey} is missing after ${reason}`);
    if (changed) this.changed();
  }

  /** Applies one record; true when the peer set changed. */
  private put(record: LeaseRecord): boolean {
    if (record.key === this.opts.selfKey) {
      this.checkSelf(record);
      return false;
    }
    // a dual-stack peer's IPv6 half, when our config has no IPv6 (or its IPv4 half, when we run
    // IPv6 only), is ignored from here on
    const r: LeaseRecord = record.ok
      ? { ...record, lease: forOurFamilies(record.lease, this.opts.context.config) }
      : record;
    const problem: Refusal | undefined = r.ok
      ? checkPeer(r.lease, this.opts.context)
      : { reason: 'malformed', detail: truncated(r.reason, 200) };
    if (problem !== undefined) {
      const before = this.invalid.get(r.key);
      if (before?.reason !== problem.reason || before.detail !== problem.detail) {
        // once per change, with the field and its (truncated) value in the detail
        this.opts.logger.warn(
          { key: truncated(r.key), reason: problem.reason, detail: problem.detail },
          'skipping invalid peer lease',
        );
        this.invalid.set(r.key, problem);
        this.refusalsChanged = true;
      }
      return this.leave(r.key) || this.unlinger(r.key);
    }
    if (!r.ok) return false;
    this.forgetRefusal(r.key);
    const before = this.peers.get(r.key) ?? this.lingering.get(r.key)?.lease;
    this.lingering.delete(r.key);
    if (!before) {
      this.peers.set(r.key, r.lease);
      this.note(r.key, r.lease);
      this.leaseLog(r.key, r.lease, 'peer joined');
      return true;
    }
    // the same attributes on another subnet (a Node re-created with a new podCIDR) or claimed
    // anew (a deleted key re-created) is a change too: admission and the entries depend on both
    const same =
      encodeLeaseValue(before.attrs) === encodeLeaseValue(r.lease.attrs) &&
      sameOptionalCidr(before.subnet, r.lease.subnet) &&
      sameOptionalCidr6(before.subnet6, r.lease.subnet6) &&
      before.claimedAt === r.lease.claimedAt;
    // the same lease keeps its object: the dataplane tells changed peers by identity
    // (desired.ts's per-peer entries), so a re-put or a re-list must not look like a change
    this.peers.set(r.key, same ? before : r.lease);
    if (same) return false;
    this.journal = 'all';
    this.leaseLog(r.key, r.lease, 'peer changed');
    return true;
  }

  private checkSelf(r: LeaseRecord): void {
    if (!r.ok) {
      this.opts.onSelfLost(`our lease ${r.key} now holds an invalid record (${r.reason})`);
      return;
    }
    const mine = this.opts.selfAttrs();
    if (r.lease.attrs.publicIp !== mine.publicIp)
      this.opts.onSelfLost(`our lease ${r.key} now names PublicIP ${r.lease.attrs.publicIp}`);
    else if (encodeLeaseValue(r.lease.attrs) !== encodeLeaseValue(mine)) {
      // someone rewrote our attributes (a VtepMAC peers would use): publish ours again
      this.opts.onSelfLost(`our lease ${r.key} now carries ${encodeLeaseValue(r.lease.attrs)}`);
    }
  }

  private leave(key: string): boolean {
    const lease = this.peers.get(key);
    if (!lease) return false;
    this.peers.delete(key);
    this.note(key, null);
    this.peerLog({ key, subnet: leaseSubnetText(lease) }, 'peer left');
    return true;
  }

  /** A lingering peer goes; true when there was one. */
  private unlinger(key: string): boolean {
    if (!this.lingering.delete(key)) return false;
    this.note(key, null);
    return true;
  }

  private peerLog(fields: Record<string, unknown>, msg: string): void {
    if (this.quiet) this.opts.logger.debug(fields, msg);
    else this.opts.logger.info(fields, msg);
  }

  /**
   * A peer joined or changed: peerLog's line, with the lease described only when the line is
   * written (5,000 descriptions made to be thrown away cost a cold start 3 ms).
   */
  private leaseLog(key: string, lease: Lease, msg: string): void {
    if (!this.opts.logger.isLevelEnabled(this.quiet ? 'debug' : 'info')) return;
    this.peerLog({ key, lease: describeLease(lease.subnet, lease.attrs, lease.subnet6) }, msg);
  }

  /**
   * A delete event: the peer lingers briefly (its owner may be re-creating the key), or goes at
   * once when it is gone for good.
   */
  private deleted(key: string, gone: boolean): void {
    const ms = gone ? 0 : (this.opts.deleteLingerMs ?? DEFAULT_DELETE_LINGER_MS);
    const lease = this.peers.get(key) ?? this.lingering.get(key)?.lease;
    if (!lease) return;
    if (ms <= 0) {
      if (this.leave(key) || this.unlinger(key)) this.changed();
      return;
    }
    const until = Math.min(this.lingering.get(key)?.until ?? Infinity, Date.now() + ms);
    this.peers.delete(key);
    this.lingering.set(key, { lease, until });
    this.opts.logger.debug(
      { key, keepMs: ms },
      'peer lease deleted; keeping its routes in case it is re-created at once',
    );
    this.scheduleExpiry();
  }

  private linger(key: string, lease: Lease, ms: number): void {
    this.peers.delete(key);
    this.lingering.set(key, { lease, until: Date.now() + ms });
    this.peerLog(
      { key, keepMs: ms },
      'peer missing from the re-list; keeping its routes while it re-registers',
    );
    this.scheduleExpiry();
  }

  /** One timer, at the earliest deadline among lingering peers. */
  private scheduleExpiry(): void {
    if (this.lingerTimer) clearTimeout(this.lingerTimer);
    this.lingerTimer = undefined;
    const next = Math.min(...[...this.lingering.values()].map((l) => l.until));
    // a millisecond past the deadline (a timer that comes early finds nothing due and sets the
    // next); the 5 it was before were 5 of a deleted lease's p50 of 17-25 ms after its grace
    if (Number.isFinite(next))
      this.lingerTimer = setTimeout(
        () => this.expireLingering(),
        Math.max(0, next - Date.now()) + 1,
      ).unref();
  }

  private expireLingering(): void {
    this.lingerTimer = undefined;
    const now = Date.now();
    let changed = false;
    for (const [key, l] of [...this.lingering]) {
      if (l.until > now) continue;
      this.unlinger(key);
      this.opts.logger.info({ key, subnet: leaseSubnetText(l.lease) }, 'peer left');
      changed = true;
    }
    this.scheduleExpiry();
    if (changed) this.changed();
  }

  private forgetRefusal(key: string): void {
    if (this.invalid.delete(key)) this.refusalsChanged = true;
  }

  private changed(): void {
    this.admissionStale = true;
    this.notify(true);
  }

  private notify(peersChanged: boolean): void {
    this.refusalsChanged = false;
    for (const listener of this.listeners) listener(peersChanged);
  }

  private connectivity(connected: boolean, detail: string): void {
    if (connected === this.connected) return;
    this.connected = connected;
    if (connected) this.opts.logger.info({ detail }, 'lease store connected');
    else this.opts.logger.warn({ detail }, 'lease store unreachable; keeping the last known peers');
  }
}

/** Two IPv4 subnets the same, or both absent (IPv6-only leases). */
function sameOptionalCidr(a: Cidr | null, b: Cidr | null): boolean {
  return a && b ? sameCidr(a, b) : !a && !b;
}
