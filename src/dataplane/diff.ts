// diff: desired vs observed → the ordered ops of one pass, pure. Only what
// twill owns is ever deleted: routes with ROUTE_PROTOCOL, vxlan devices
// named twill.*, permanent neighbour and FDB entries on twill's device, and
// twill's chains. An unchanged kernel gives an empty plan.
import { chainSpecs, diffChain } from './masq.ts';
import {
  type DesiredState,
  type LinkSetting,
  type ObservedLink,
  type ObservedState,
  type Op,
  type RouteSpec,
  type VxlanDevice,
} from './model.ts';

function sameDevice(want: VxlanDevice, seen: ObservedLink): boolean {
  return (
    seen.vni === want.vni &&
    seen.local === want.local &&
    seen.underlay === want.underlay &&
    seen.port === want.port &&
    seen.learning === want.learning &&
    seen.gbp === want.gbp
  );
}

function createDevice(d: VxlanDevice): Op[] {
  return [
    { kind: 'link', action: 'add', phase: 'ip-pre', device: d },
    { kind: 'addr', action: 'add', phase: 'ip-pre', dev: d.name, address: d.address },
    { kind: 'link', action: 'change', phase: 'ip-pre', name: d.name, set: { up: true } },
  ];
}

/** Fixes a compatible device in place: MAC, MTU, addresses, up. */
function tuneDevice(d: VxlanDevice, seen: ObservedLink): Op[] {
  const ops: Op[] = [];
  const set = (to: LinkSetting): void =>
    void ops.push({ kind: 'link', action: 'change', phase: 'ip-pre', name: d.name, set: to });
  if (seen.mac !== d.mac) set({ mac: d.mac });
  if (seen.mtu !== d.mtu) set({ mtu: d.mtu });
  for (const a of seen.addresses) {
    if (a !== d.address)
      ops.push({ kind: 'addr', action: 'delete', phase: 'ip-pre', dev: d.name, address: a });
  }
  if (!seen.addresses.includes(d.address))
    ops.push({ kind: 'addr', action: 'add', phase: 'ip-pre', dev: d.name, address: d.address });
  if (!seen.up) set({ up: true });
  return ops;
}

/** Device ops, and whether the device's entries start from empty (created or replaced). */
function diffLinks(want: VxlanDevice | null, seen: ObservedState): { ops: Op[]; fresh: boolean } {
  const ops: Op[] = [];
  for (const l of seen.links) {
    if (l.name !== want?.name)
      ops.push({ kind: 'link', action: 'delete', phase: 'ip-post', name: l.name });
  }
  if (!want) return { ops, fresh: false };
  const current = seen.links.find((l) => l.name === want.name);
  if (current && sameDevice(want, current))
    return { ops: [...ops, ...tuneDevice(want, current)], fresh: false };
  if (current) ops.push({ kind: 'link', action: 'delete', phase: 'ip-pre', name: want.name });
  return { ops: [...ops, ...createDevice(want)], fresh: true };
}

/** Whether a route the kernel reports is exactly the desired one. */
export function sameRoute(a: RouteSpec, b: RouteSpec): boolean {
  return a.dst === b.dst && a.via === b.via && a.dev === b.dev && a.onlink === b.onlink;
}

function diffRoutes(want: readonly RouteSpec[], seen: readonly RouteSpec[]): Op[] {
  const ops: Op[] = [];
  const have = new Map(seen.map((r) => [r.dst, r]));
  const wanted = new Set(want.map((r) => r.dst));
  for (const r of seen) {
    if (!wanted.has(r.dst))
      ops.push({ kind: 'route', action: 'delete', phase: 'ip-pre', route: r });
  }
  for (const r of want) {
    const h = have.get(r.dst);
    if (!h) ops.push({ kind: 'route', action: 'add', phase: 'ip-post', route: r });
    else if (!sameRoute(h, r))
      ops.push({ kind: 'route', action: 'change', phase: 'ip-post', route: r });
  }
  return ops;
}

function diffNeighs(want: DesiredState, seen: ObservedState, fresh: boolean): Op[] {
  const dev = want.vxlan?.name;
  const observed = fresh ? [] : seen.neighs.filter((n) => n.dev === dev);
  const have = new Map(observed.map((n) => [n.ip, n]));
  const wanted = new Set(want.neighs.map((n) => n.ip));
  const ops: Op[] = [];
  for (const n of want.neighs) {
    const h = have.get(n.ip);
    if (h?.permanent && h.mac === n.mac) continue;
    ops.push({ kind: 'neigh', action: h ? 'change' : 'add', phase: 'ip-pre', neigh: n });
  }
  for (const n of observed) {
    if (n.permanent && !wanted.has(n.ip))
      ops.push({
        kind: 'neigh',
        action: 'delete',
        phase: 'ip-post',
        neigh: { ip: n.ip, mac: n.mac, dev: n.dev },
      });
  }
  return ops;
}

function diffFdb(want: DesiredState, seen: ObservedState, fresh: boolean): Op[] {
  const dev = want.vxlan?.name;
  const observed = fresh ? [] : seen.fdb.filter((f) => f.dev === dev && f.permanent);
  const key = (mac: string, dst: string | undefined): string => `${mac} ${dst ?? ''}`;
  const wanted = new Set(want.fdb.map((f) => key(f.mac, f.dst)));
  const have = new Set(observed.map((f) => key(f.mac, f.dst)));
  const ops: Op[] = [];
  for (const f of observed) {
    if (wanted.has(key(f.mac, f.dst))) continue;
    ops.push({
      kind: 'fdb',
      action: 'delete',
      phase: 'bridge',
      fdb: { mac: f.mac, dev: f.dev, dst: f.dst },
    });
  }
  for (const f of want.fdb) {
    if (!have.has(key(f.mac, f.dst)))
      ops.push({ kind: 'fdb', action: 'add', phase: 'bridge', fdb: f });
  }
  return ops;
}

/** Entries a kernel event showed drifting, to be re-applied as they should be (no observing). */
export interface Repairs {
  /** route destinations */
  readonly routes: ReadonlySet<string>;
  /** neighbour IPs */
  readonly neighs: ReadonlySet<string>;
  /** FDB destinations (the peers' public IPs) */
  readonly fdbDsts: ReadonlySet<string>;
}

/**
 * The kernel as it is when it matches `want` (the chains left out): what a
 * lease change is diffed against when the last pass left the kernel matching
 * the desired state, so the change is applied without reading the kernel.
 */
export function assumedFrom(want: DesiredState): ObservedState {
  const d = want.vxlan;
  return {
    links: d
      ? [
          {
            name: d.name,
            vni: d.vni,
            local: d.local,
            underlay: d.underlay,
            port: d.port,
            learning: d.learning,
            gbp: d.gbp,
            mtu: d.mtu,
            mac: d.mac,
            up: true,
            addresses: [d.address],
          },
        ]
      : [],
    routes: want.routes,
    neighs: want.neighs.map((n) => ({ ...n, permanent: true })),
    fdb: want.fdb.map((f) => ({ ...f, permanent: true })),
    postrouting: undefined,
    forward: undefined,
  };
}

/**
 * The kernel as it is when it matches `want` except for the drifted entries,
 * which are missing: diffing `want` against it puts back just those, with
 * the same ops (and order) as any pass: a neighbour replaced, an FDB entry
 * appended, a route added (never replaced, so a foreign route that took its
 * place makes the op fail and an observed pass decide).
 */
export function assumedWithout(want: DesiredState, r: Repairs): ObservedState {
  const s = assumedFrom(want);
  return {
    ...s,
    routes: s.routes.filter((x) => !r.routes.has(x.dst)),
    neighs: s.neighs.filter((n) => !r.neighs.has(n.ip)),
    fdb: s.fdb.filter((f) => !r.fdbDsts.has(f.dst ?? '')),
  };
}

/** The ops that take the kernel from `seen` to `want`, in apply order within each phase. */
export function diff(want: DesiredState, seen: ObservedState): Op[] {
  const links = diffLinks(want.vxlan, seen);
  const chains = chainSpecs(want.masq);
  // a device that is (re)created comes back without the routes it carried
  const routes = links.fresh ? seen.routes.filter((r) => r.dev !== want.vxlan?.name) : seen.routes;
  return [
    ...links.ops.filter((o) => o.phase === 'ip-pre'),
    ...diffRoutes(want.routes, routes),
    ...diffNeighs(want, seen, links.fresh),
    ...diffFdb(want, seen, links.fresh),
    ...links.ops.filter((o) => o.phase === 'ip-post'),
    ...(seen.postrouting ? diffChain(chains.postrouting, seen.postrouting) : []),
    ...(seen.forward ? diffChain(chains.forward, seen.forward) : []),
  ];
}
