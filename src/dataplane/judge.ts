// What a kernel event asks of the next pass, judged against the desired
// state of the last pass (pure): nothing when the event shows the kernel as
// twill wants it (its own changes coming back), the touched entries to put
// back when one of twill's routes, neighbours or FDB entries went or changed,
// one table's chains for a rule event, and an observed pass over the entries
// for anything it cannot pin down. The desired state it knows may be older
// than the leases (a delta is pending): an event that shows the kernel as that
// state wants it still needs nothing, since the delta starts from it; one that
// does not asks for work, which the pass loop turns into an observed pass while
// a lease change is pending. Also the pending work itself: what triggers have
// asked of the next pass, merged.
import { atMetric0, sameRoute } from './diff.ts';
import type { DesiredState, FdbSpec, NeighSpec, PeerEntries, RouteSpec } from './model.ts';
import type { Touch } from './kernel-event.ts';
import { both } from './peer-entries.ts';
import { SortedIndex } from '../util/sorted-index.ts';

/**
 * The last pass's desired state, indexed for judging kernel events: sorted arrays, not Maps (a
 * dual-stack vxlan node's three indexes hold 10,000 entries each: 1.3 MiB as Maps, 0.2 as arrays).
 */
export interface Known {
  readonly want: DesiredState;
  /** the lease generation it was computed for */
  readonly generation: number;
  /** routes by destination */
  readonly routes: SortedIndex<RouteSpec>;
  /** neighbours by IP */
  readonly neighs: SortedIndex<NeighSpec>;
  /** FDB entries by destination (a peer's public IP; several peers may share one) */
  readonly fdb: SortedIndex<FdbSpec>;
}

const routeKey = (r: RouteSpec): string => r.dst;
const neighKey = (n: NeighSpec): string => n.ip;
const fdbKey = (f: FdbSpec): string => f.dst;

/**
 * Peers gone and come at once (a changed peer counts twice: its old entries go, its new ones come)
 * past which a delta pass indexes its state anew: each moves the entries after it in the sorted
 * arrays, where a rebuild sorts them once.
 */
const REINDEX_CHANGES = 64;

/**
 * The Known of `want`, its indexes sorted when first read: a cold start's pass sets it before
 * applying (the events of its own changes are judged against it) but hears no event until its
 * batches have ended (the monitor is stopped), so the sort of its 30,000 entries (20-30 ms at
 * 5,000 dual-stack vxlan peers) waits for `prepareKnown` (the daemon's, once a pass has
 * converged) or the first event, whichever comes first.
 */
export function indexDesired(want: DesiredState, generation: number): Known {
  let routes: SortedIndex<RouteSpec> | undefined;
  let neighs: SortedIndex<NeighSpec> | undefined;
  let fdb: SortedIndex<FdbSpec> | undefined;
  return {
    want,
    generation,
    get routes() {
      return (routes ??= new SortedIndex(want.routes, routeKey));
    },
    get neighs() {
      return (neighs ??= new SortedIndex(want.neighs, neighKey));
    },
    get fdb() {
      return (fdb ??= new SortedIndex(want.fdb, fdbKey));
    },
  };
}

/** Sorts the indexes of `k` not yet sorted (indexDesired), off the path of the next event. */
export function prepareKnown(k: Known | undefined): void {
  if (k) void [k.routes, k.neighs, k.fdb];
}

/**
 * The Known of a delta pass: the last pass's indexes with the entries of the peers that went
 * taken out and of those that came put in (diff.ts, peerDelta), for `want`, the new whole state;
 * indexed anew when many peers changed. The indexes are updated in place, not copied (5,000
 * peers' worth on every lease event): the Known given is out of date afterwards, which is fine
 * for its one holder, the reconciler, which replaces it with the one returned.
 */
export function reindexDesired(
  k: Known,
  d: { readonly gone: readonly PeerEntries[]; readonly came: readonly PeerEntries[] },
  want: DesiredState,
  generation: number,
): Known {
  if (d.gone.length + d.came.length > REINDEX_CHANGES) return indexDesired(want, generation);
  const { routes, neighs, fdb } = k;
  for (const p of d.gone) {
    for (const r of both(p.route, p.route6)) routes.remove(r);
    for (const n of both(p.neigh, p.neigh6)) neighs.remove(n);
    for (const f of both(p.fdb, p.fdb6)) fdb.remove(f);
  }
  for (const p of d.came) {
    for (const r of both(p.route, p.route6)) routes.add(r);
    for (const n of both(p.neigh, p.neigh6)) neighs.add(n);
    for (const f of both(p.fdb, p.fdb6)) fdb.add(f);
  }
  return { want, generation, routes, neighs, fdb };
}

/** One thing for the next pass to do. */
export type Work =
  | { readonly kind: 'entries' }
  | { readonly kind: 'chains'; readonly tables: readonly ('nat' | 'filter')[] }
  /**
   * put back one entry: a route (its destination), a neighbour (its IP), the FDB entries towards a
   * destination
   */
  | { readonly kind: 'route' | 'neigh' | 'fdb'; readonly key: string };

const ENTRIES: Work[] = [{ kind: 'entries' }];
const NO_DSTS: ReadonlySet<string> = new Set();

/**
 * The work a kernel event asks for; none when it shows what twill wants. `foreign`: the
 * destinations other programs' routes held at the last observed pass, where twill's route is at
 * metric 0 (diff.ts).
 */
export function judge(
  t: Touch,
  k: Known | undefined,
  foreign: ReadonlySet<string> = NO_DSTS,
): Work[] {
  if (t.kind === 'chains') return [{ kind: 'chains', tables: t.tables }];
  if (t.kind === 'all' || k === undefined) return ENTRIES;
  if (t.kind === 'route') {
    const wanted = k.routes.get(t.dst);
    const want = wanted && foreign.size > 0 && foreign.has(t.dst) ? atMetric0(wanted) : wanted;
    if (t.deleted) {
      // a route going that is not the wanted one needs nothing (the old route an IPv6 pass deletes
      // before it adds the new one through another device)
      if (!want || (t.route && !sameRoute(want, t.route))) return [];
      return [{ kind: 'route', key: t.dst }];
    }
    // one of ours exactly as wanted (our own change coming back) needs nothing
    return want && t.route && sameRoute(want, t.route) ? [] : ENTRIES;
  }
  if (t.dev !== k.want.vxlan?.name && t.dev !== k.want.vxlan6?.name) return ENTRIES;
  const neigh = k.neighs.get(t.ip);
  const fdb = k.fdb.all(t.ip);
  // the kernel's own entries come and go; a permanent one twill does not want is for an observed
  // pass to remove
  if (neigh === undefined && fdb === undefined) return t.deleted || !t.permanent ? [] : ENTRIES;
  const asWanted = (mac: string): boolean =>
    !t.deleted && t.permanent && t.mac === mac.toLowerCase();
  const work: Work[] = [];
  if (neigh && !asWanted(neigh.mac)) work.push({ kind: 'neigh', key: t.ip });
  if (fdb) {
    const ours = t.mac === undefined || fdb.some((f) => f.mac.toLowerCase() === t.mac);
    // an FDB entry with another MAC towards a peer is not ours: gone, nothing to do; added, an
    // observed pass judges it
    if (ours && !fdb.some((f) => asWanted(f.mac))) work.push({ kind: 'fdb', key: t.ip });
    else if (!ours && !t.deleted && t.permanent) work.push(...ENTRIES);
  }
  return work;
}

/**
 * What asked for a pass: the first source since the last pass started, when (monotonicMs(),
 * util/clock.ts), and the other sources that joined it before it started (distinct, at most
 * MAX_JOINED): why a chains event may be answered by a full pass, say.
 */
export interface Trigger {
  readonly source: string;
  readonly at: number;
  readonly joined: readonly string[];
}

export const MAX_JOINED = 4;

/**
 * What asks for the pass once `ask` (a source, at a time) comes: a trigger of its own when none is
 * pending, else the pending one with `ask.source` joined. The start's pass reads everything
 * anyway: nothing that comes before it says why it is full, and none joins it.
 */
export function joinTrigger(t: Trigger | undefined, ask: { source: string; at: number }): Trigger {
  if (t === undefined) return { source: ask.source, at: ask.at, joined: [] };
  const { source } = ask;
  if (t.source === 'start' || source === t.source || t.joined.includes(source)) return t;
  return t.joined.length < MAX_JOINED ? { ...t, joined: [...t.joined, source] } : t;
}

/** What the next pass must look at. */
export interface Pending {
  /** links, routes, neighbours and FDB entries: observe and diff them all */
  entries: boolean;
  /** the leases changed: apply the change to the desired state */
  leases: boolean;
  /** the chains of these tables: observe and diff them */
  readonly tables: Set<'nat' | 'filter'>;
  readonly routes: Set<string>;
  readonly neighs: Set<string>;
  readonly fdbDsts: Set<string>;
  /** the first trigger since the last pass started, and those that joined it */
  first: Trigger | undefined;
  /**
   * a kernel event asked for some of it (a drift may be pending): the pass must not give way to a
   * delta, which assumes none is
   */
  fromEvents: boolean;
}

export const nothing = (): Pending => ({
  entries: false,
  leases: false,
  tables: new Set(),
  routes: new Set(),
  neighs: new Set(),
  fdbDsts: new Set(),
  first: undefined,
  fromEvents: false,
});
export const isEmpty = (p: Pending): boolean =>
  !p.entries && !p.leases && p.tables.size + p.routes.size + p.neighs.size + p.fdbDsts.size === 0;
export const everything = (p: Pending): void => {
  p.entries = true;
  p.tables.add('nat').add('filter');
};

export function addWork(p: Pending, w: Work): void {
  if (w.kind === 'entries') p.entries = true;
  else if (w.kind === 'chains') w.tables.forEach((x) => p.tables.add(x));
  else (w.kind === 'route' ? p.routes : w.kind === 'neigh' ? p.neighs : p.fdbDsts).add(w.key);
}
