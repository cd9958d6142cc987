// What a kernel event asks of the next pass, judged against the desired
// state of the last pass (pure): nothing when the event shows the kernel as
// twill wants it (its own changes coming back), the touched entries to put
// back when one of twill's routes, neighbours or FDB entries went or changed,
// one table's chains for a rule event, and an observed pass over the entries
// for anything it cannot pin down (or when the desired state it knows is out
// of date, the leases having changed since). Also the pending work itself:
// what triggers have asked of the next pass, merged.
import { sameRoute } from './diff.ts';
import type { DesiredState, FdbSpec, NeighSpec, RouteSpec } from './model.ts';
import type { Touch } from './monitor.ts';

/** The last pass's desired state, indexed for judging kernel events. */
export interface Known {
  readonly want: DesiredState;
  /** the lease generation it was computed for */
  readonly generation: number;
  readonly routes: ReadonlyMap<string, RouteSpec>;
  readonly neighs: ReadonlyMap<string, NeighSpec>;
  /** FDB entries by destination (a peer's public IP) */
  readonly fdb: ReadonlyMap<string, readonly FdbSpec[]>;
}

export function indexDesired(want: DesiredState, generation: number): Known {
  const fdb = new Map<string, FdbSpec[]>();
  for (const f of want.fdb) fdb.set(f.dst, [...(fdb.get(f.dst) ?? []), f]);
  return {
    want,
    generation,
    routes: new Map(want.routes.map((r) => [r.dst, r])),
    neighs: new Map(want.neighs.map((n) => [n.ip, n])),
    fdb,
  };
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

/** The work a kernel event asks for; none when it shows what twill wants. */
export function judge(t: Touch, k: Known | undefined, generation: number): Work[] {
  if (t.kind === 'chains') return [{ kind: 'chains', tables: t.tables }];
  if (t.kind === 'all' || k === undefined || k.generation !== generation) return ENTRIES;
  if (t.kind === 'route') {
    const want = k.routes.get(t.dst);
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
  const fdb = k.fdb.get(t.ip);
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
  /** the first trigger since the last pass started, and when (performance.now()) */
  first: { source: string; at: number } | undefined;
}

export const nothing = (): Pending => ({
  entries: false,
  leases: false,
  tables: new Set(),
  routes: new Set(),
  neighs: new Set(),
  fdbDsts: new Set(),
  first: undefined,
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
