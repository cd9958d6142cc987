// diff: desired vs observed → the ordered ops of one pass, pure. Only what
// twill owns is ever deleted: routes with ROUTE_PROTOCOL, vxlan devices
// named twill.* and twill-v6.*, permanent neighbour and FDB entries on
// twill's devices, and twill's chains (in ip6tables too when IPv6 is on, or
// when a pass without IPv6 read them to remove what a dual-stack run left;
// in iptables only when IPv4 is on, or when a pass with IPv4 off read them to
// remove what an IPv4 run left). The one exception: a bridge's address in
// the pod network and outside our subnet, a CNI gateway of an earlier lease
// of ours (PodRange), is deleted. An unchanged kernel gives an empty plan.
import { containsAddr, formatCidr, parseCidr, parseIpv4 } from '../net/ipv4.ts';
import { containsAddr6, formatCidr6, parseCidr6, parseIpv6 } from '../net/ipv6.ts';
import { withEntries } from './peer-entries.ts';
import { chainSpecs, chainSpecs6, diffChain, noChainSpecs, noChainSpecs6 } from './masq.ts';
import {
  type DesiredState,
  type LinkSetting,
  type ObservedChains,
  type ObservedLink,
  type ObservedState,
  type Op,
  type PeerEntries,
  type PodRange,
  type RouteSpec,
  type VxlanDevice,
  setupOf,
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

/** The devices `want` asks for: the IPv4 one, then the IPv6 one. */
function devicesOf(want: DesiredState): VxlanDevice[] {
  return [...(want.vxlan ? [want.vxlan] : []), ...(want.vxlan6 ? [want.vxlan6] : [])];
}

/** Device ops, and the devices whose entries start from empty (created or replaced). */
function diffLinks(
  want: readonly VxlanDevice[],
  seen: ObservedState,
): { ops: Op[]; fresh: Set<string> } {
  const ops: Op[] = [];
  const names = new Set(want.map((d) => d.name));
  for (const l of seen.links) {
    if (!names.has(l.name))
      ops.push({ kind: 'link', action: 'delete', phase: 'ip-post', name: l.name });
  }
  const fresh = new Set<string>();
  for (const d of want) {
    const current = seen.links.find((l) => l.name === d.name);
    if (current && sameDevice(d, current)) {
      ops.push(...tuneDevice(d, current));
      continue;
    }
    if (current) ops.push({ kind: 'link', action: 'delete', phase: 'ip-pre', name: d.name });
    ops.push(...createDevice(d));
    fresh.add(d.name);
  }
  return { ops, fresh };
}

/** Whether a route the kernel reports is exactly the desired one. */
export function sameRoute(a: RouteSpec, b: RouteSpec): boolean {
  return (
    a.dst === b.dst &&
    a.via === b.via &&
    a.dev === b.dev &&
    a.onlink === b.onlink &&
    (a.metric ?? 0) === (b.metric ?? 0)
  );
}

/** A route as twill writes it where another program's route holds its destination: metric 0. */
export function atMetric0(r: RouteSpec): RouteSpec {
  const { metric: _, ...rest } = r;
  return rest;
}

const NO_KEYS: ReadonlySet<string> = new Set();

function diffRoutes(
  want: readonly RouteSpec[],
  seen: readonly RouteSpec[],
  foreign: ReadonlySet<string>,
): Op[] {
  const ops: Op[] = [];
  // twill's routes by destination: one, or while an older twill's metric-0 route is taken over two
  const have = new Map<string, RouteSpec[]>();
  for (const r of seen) {
    const list = have.get(r.dst);
    if (list) list.push(r);
    else have.set(r.dst, [r]);
  }
  // none of twill's routes seen (a cold start: 10,000 wanted): nothing to index or delete
  const wanted = seen.length > 0 ? new Set(want.map((r) => r.dst)) : NO_KEYS;
  for (const r of seen) {
    if (!wanted.has(r.dst))
      ops.push({ kind: 'route', action: 'delete', phase: 'ip-pre', route: r });
  }
  for (const w of want) {
    // Another program's route to the same destination: twill's goes in at metric 0, as it always
    // did, so a metric-0 one makes the add fail (visibly, on every pass) rather than win over
    // twill's in silence, and one of a higher metric loses to it; twill's route of its own metric
    // stays (it does not route while the other is there; it is what the destination needs after).
    const taken = w.metric !== undefined && foreign.size > 0 && foreign.has(w.dst);
    const r = taken ? atMetric0(w) : w;
    const list = have.size > 0 ? have.get(r.dst) : undefined;
    const metric = r.metric ?? 0;
    const h = list?.find((x) => (x.metric ?? 0) === metric);
    if (!h) ops.push({ kind: 'route', action: 'add', phase: 'ip-post', route: r });
    else if (!sameRoute(h, r) && r.dst.includes(':') && h.dev !== r.dev) {
      // IPv6 refuses to replace a route with an onlink one whose gateway the route being replaced
      // covers through another device ("Nexthop has invalid gateway or device mismatch": host-gw's
      // fd00:0:0:1::/64 via the underlay, to go through twill-v6.<VNI>), so such a replace would
      // fail on every pass. The old route is deleted, as observed, in the first ip batch with the
      // routes that go, and the new one added in the last with the routes that come (its device,
      // neighbour and FDB entry exist by then); IPv4 replaces such a route in place, as always.
      ops.push({ kind: 'route', action: 'delete', phase: 'ip-pre', route: h });
      ops.push({ kind: 'route', action: 'add', phase: 'ip-post', route: r });
    } else if (!sameRoute(h, r))
      // a replace matches the metric too: it changes this route, never another's
      ops.push({ kind: 'route', action: 'change', phase: 'ip-post', route: r });
    // twill's routes to it at another metric (an older twill's, at 0) go once the new one is seen
    // in: in the pass after the one that added it (its verification), so the destination is never
    // without a route, whether the add failed or ran in another of a spread plan's processes
    if (taken || !h || !list) continue;
    for (const o of list)
      if ((o.metric ?? 0) !== metric)
        ops.push({ kind: 'route', action: 'delete', phase: 'ip-post', route: o });
  }
  return ops;
}

/** IPv6 link-local (fe80::/10): the kernel's on every device, never a stale gateway. */
const linkLocal6 = (a: bigint): boolean => a >> 118n === 0x3fan;

/**
 * Whether an address on a bridge is a stale gateway: on the CNI bridge (never another bridge, such
 * as docker0, lxdbr0 or virbr0, whose address may well lie inside a wide pod network), shaped as
 * the CNI plugin makes a gateway (the first host of a block as long as our subnet, with that
 * prefix), inside its family's pod network and outside our subnet of that family. A family without
 * a PodRange (our subnet of it unknown) has none.
 */
export function isStaleGateway(
  a: { readonly dev: string; readonly address: string },
  ranges: readonly PodRange[],
): boolean {
  const [ip = '', lenText = ''] = a.address.split('/');
  const len = Number(lenText);
  for (const r of ranges) {
    if (a.dev !== r.bridge || len !== r.subnet.prefix) continue;
    if (r.family === 4) {
      const x = parseIpv4(ip);
      if (x === undefined || x % 2 ** (32 - len) !== 1) continue;
      if (containsAddr(r.network, x) && !containsAddr(r.subnet, x)) return true;
    } else {
      const x = parseIpv6(ip);
      if (x === undefined || linkLocal6(x) || x % (1n << BigInt(128 - len)) !== 1n) continue;
      if (containsAddr6(r.network, x) && !containsAddr6(r.subnet, x)) return true;
    }
  }
  return false;
}

/**
 * Deletes the bridges' stale gateways (read only by observed passes): an address removed takes its
 * connected route with it, before the batch that adds twill's route to that subnet's holder now.
 */
function diffBridgeAddrs(want: DesiredState, seen: ObservedState): Op[] {
  return (seen.bridgeAddrs ?? [])
    .filter((a) => isStaleGateway(a, want.podRanges))
    .map((a) => ({
      kind: 'addr',
      action: 'delete',
      phase: 'ip-pre',
      dev: a.dev,
      address: a.address,
      stale: true,
    }));
}

/** The connected route's destination an address brings ("10.244.216.1/24" → "10.244.216.0/24"). */
function connectedDst(address: string): string | undefined {
  if (address.includes(':')) {
    const c = parseCidr6(address, { strict: false });
    return c && formatCidr6(c);
  }
  const c = parseCidr(address, { strict: false });
  return c && formatCidr(c);
}

/**
 * The other programs' route destinations as they are once this pass's stale gateways are deleted
 * (in its first batch, before any route is added): a gateway's connected route goes with it. What
 * a delta or repair pass after an observed one takes as the kernel's.
 */
export function foreignRoutesAfter(want: DesiredState, seen: ObservedState): ReadonlySet<string> {
  return foreignAfter(seen, diffBridgeAddrs(want, seen));
}

function foreignAfter(seen: ObservedState, gateways: readonly Op[]): ReadonlySet<string> {
  const foreign = seen.foreignRoutes ?? [];
  if (foreign.length === 0) return NO_KEYS;
  const going = new Set<string>();
  for (const op of gateways)
    if (op.kind === 'addr') going.add(`${connectedDst(op.address) ?? ''} ${op.dev}`);
  const left = new Set<string>();
  for (const r of foreign) if (!going.has(`${r.dst} ${r.dev}`)) left.add(r.dst);
  return left;
}

/** Which devices' entries are compared: twill's wanted devices, unless just (re)created. */
interface EntryScope {
  readonly devices: ReadonlySet<string>;
  readonly fresh: ReadonlySet<string>;
}

const inScope = (scope: EntryScope, dev: string): boolean =>
  scope.devices.has(dev) && !scope.fresh.has(dev);

function diffNeighs(want: DesiredState, seen: ObservedState, scope: EntryScope): Op[] {
  const observed = seen.neighs.filter((n) => inScope(scope, n.dev));
  // none seen (a cold start: 10,000 wanted): each is added, with no key made for it
  if (observed.length === 0)
    return want.neighs.map((neigh) => ({ kind: 'neigh', action: 'add', phase: 'ip-post', neigh }));
  const key = (n: { dev: string; ip: string }): string => `${n.dev} ${n.ip}`;
  const have = new Map(observed.map((n) => [key(n), n]));
  const wanted = new Set(want.neighs.map(key));
  const ops: Op[] = [];
  for (const n of want.neighs) {
    const h = have.get(key(n));
    if (h?.permanent && h.mac === n.mac) continue;
    ops.push({ kind: 'neigh', action: h ? 'change' : 'add', phase: 'ip-post', neigh: n });
  }
  for (const n of observed) {
    if (n.permanent && !wanted.has(key(n)))
      ops.push({
        kind: 'neigh',
        action: 'delete',
        phase: 'ip-pre',
        neigh: { ip: n.ip, mac: n.mac, dev: n.dev },
      });
  }
  return ops;
}

function diffFdb(want: DesiredState, seen: ObservedState, scope: EntryScope): Op[] {
  const observed = seen.fdb.filter((f) => inScope(scope, f.dev) && f.permanent);
  // none seen (a cold start: 10,000 wanted): each is added, with no key made for it
  if (observed.length === 0)
    return want.fdb.map((fdb) => ({ kind: 'fdb', action: 'add', phase: 'bridge', fdb }));
  const key = (dev: string, mac: string, dst: string | undefined): string =>
    `${dev} ${mac} ${dst ?? ''}`;
  const wanted = new Set(want.fdb.map((f) => key(f.dev, f.mac, f.dst)));
  const have = new Set(observed.map((f) => key(f.dev, f.mac, f.dst)));
  const ops: Op[] = [];
  for (const f of observed) {
    if (wanted.has(key(f.dev, f.mac, f.dst))) continue;
    ops.push({
      kind: 'fdb',
      action: 'delete',
      phase: 'bridge',
      fdb: { mac: f.mac, dev: f.dev, dst: f.dst },
    });
  }
  for (const f of want.fdb) {
    if (!have.has(key(f.dev, f.mac, f.dst)))
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
  return {
    links: devicesOf(want).map((d) => ({
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
    })),
    routes: want.routes,
    neighs: want.neighs.map((n) => ({ ...n, permanent: true })),
    fdb: want.fdb.map((f) => ({ ...f, permanent: true })),
    postrouting: undefined,
    forward: undefined,
  };
}

/**
 * What a lease change changed, peer by peer: the entries of the peers whose lease objects went
 * (`had`, the old states' setup with only those) and came (`want`, the new one's), told apart by
 * identity (the tracker keeps one object per unchanged lease, desired.ts one entries object per
 * lease). `diff(want, assumedFrom(had))` then plans what diffing the whole states would, over a
 * few entries instead of every peer's. Undefined when either state lacks its per-peer view.
 */
export function peerDelta(
  before: DesiredState,
  after: DesiredState,
): { had: DesiredState; want: DesiredState; gone: PeerEntries[]; came: PeerEntries[] } | undefined {
  if (!before.peers || !after.peers) return undefined;
  const { gone, came } = changedPeers(before.peers, after.peers);
  return {
    had: withEntries(setupOf(before), () => gone),
    want: withEntries(setupOf(after), () => came),
    gone,
    came,
  };
}

/**
 * The peers of `before` that are not in `after` (in `before`'s order) and those of `after` not in
 * `before` (in its order), by identity, for lists that each hold a peer once (a state's peers do,
 * one per admitted lease; with repeats the answer may differ from two sets'). The peer set keeps
 * its order from one change to the next (the tracker appends what joined), so the common head and
 * tail are skipped by a compare each, and only what is between them is set against the other: a
 * lease event among 5,000 peers compares, where two sets of all and two filters cost it 2-3 ms.
 */
export function changedPeers<T>(
  before: readonly T[],
  after: readonly T[],
): { gone: T[]; came: T[] } {
  let head = 0;
  const most = Math.min(before.length, after.length);
  while (head < most && before[head] === after[head]) head++;
  let tail = 0;
  while (tail < most - head && before[before.length - 1 - tail] === after[after.length - 1 - tail])
    tail++;
  const was = before.slice(head, before.length - tail);
  const now = after.slice(head, after.length - tail);
  if (was.length === 0 || now.length === 0) return { gone: was, came: now };
  const [wasSet, nowSet] = [new Set(was), new Set(now)];
  return { gone: was.filter((p) => !nowSet.has(p)), came: now.filter((p) => !wasSet.has(p)) };
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
  const devices = devicesOf(want);
  const links = diffLinks(devices, seen);
  // a device that is (re)created comes back without the routes it carried
  const routes =
    links.fresh.size > 0 ? seen.routes.filter((r) => !links.fresh.has(r.dev)) : seen.routes;
  const scope = { devices: new Set(devices.map((d) => d.name)), fresh: links.fresh };
  const gateways = diffBridgeAddrs(want, seen);
  const routeOps = diffRoutes(want.routes, routes, foreignAfter(seen, gateways));
  const neighOps = diffNeighs(want, seen, scope);
  const pre = (o: Op): boolean => o.phase === 'ip-pre';
  const post = (o: Op): boolean => o.phase === 'ip-post';
  // a peer's route goes first and comes last (route, neighbour, FDB on delete; FDB, neighbour,
  // route on add), so no packet takes a route whose next hop is not known yet; of the peers'
  // entries the first ip batch only deletes and the second only adds, so a lease that comes (or
  // goes) costs one bridge and one ip process
  return [
    ...links.ops.filter(pre),
    ...gateways,
    ...routeOps.filter(pre),
    ...neighOps.filter(pre),
    ...diffFdb(want, seen, scope),
    ...neighOps.filter(post),
    ...routeOps.filter(post),
    ...links.ops.filter(post),
    ...diffChains(want, seen),
  ];
}

/** The chains' part of `diff`: the iptables and ip6tables chains, each only when it was read. */
export function diffChains(want: DesiredState, seen: ObservedChains): Op[] {
  // IPv4 off (IPv6 only): iptables chains that were read (the first pass after a start) must not
  // exist
  const chains = want.masq ? chainSpecs(want.masq) : noChainSpecs();
  // IPv6 off: ip6tables chains that were read (the first pass after a start) must not exist
  const chains6 = want.masq6 ? chainSpecs6(want.masq6) : noChainSpecs6();
  return [
    ...(seen.postrouting ? diffChain(chains.postrouting, seen.postrouting) : []),
    ...(seen.forward ? diffChain(chains.forward, seen.forward) : []),
    ...(seen.postrouting6 ? diffChain(chains6.postrouting, seen.postrouting6) : []),
    ...(seen.forward6 ? diffChain(chains6.forward, seen.forward6) : []),
  ];
}
