// observe: what the kernel holds of what twill owns, read with a fixed
// number of processes run in parallel (ip -d -json addr of every link, which
// gives twill's vxlan devices and the bridges' addresses, where a CNI gateway
// of an earlier lease may linger; route, neigh, bridge -json fdb, iptables -S
// of two built-in and two twill chains; with IPv6 also ip -6 route, the IPv6
// device's neighbours and FDB, and the same four ip6tables -S; without IPv6,
// the first pass after a start reads the IPv6 routes and chains a dual-stack
// run may have left, a failure counting as nothing there; with IPv4 off (IPv6
// only), the same the other way round: no IPv4 route or iptables chain but on
// the first pass, tolerantly), whatever the number of peers. Parsing is pure;
// `observe` does the reads.
import { CommandError, isMissingTool, isNoDevice, runJson, type Runner } from '../exec/runner.ts';
import { canonicalIpv6 } from '../net/ipv6.ts';
import { chainRules, FWD_CHAIN, jumpRules, MASQ_CHAIN } from './masq.ts';
import {
  DEVICE_PREFIX,
  DEVICE6_PREFIX,
  ROUTE_PROTOCOL,
  type ObservedAddr,
  type ObservedChain,
  type ObservedChains,
  type ObservedFdb,
  type ObservedLink,
  type ObservedNeigh,
  type ObservedState,
  type ForeignRoute,
  type RouteSpec,
} from './model.ts';

const arr = (json: unknown): Record<string, unknown>[] =>
  Array.isArray(json) ? (json as Record<string, unknown>[]) : [];
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' ? v : undefined);

/**
 * An address (or "addr/len") as desired states write it: IPv6 in canonical form (the tools print
 * it so already; this only guards the comparison), IPv4 untouched.
 */
function canon(text: string | undefined): string | undefined {
  if (text === undefined || !text.includes(':')) return text;
  const [addr = '', len] = text.split('/');
  const c = canonicalIpv6(addr) ?? addr;
  return len === undefined ? c : `${c}/${len}`;
}

/** A link's kind ("vxlan", "bridge", "veth"…) in `ip -d -json` output; undefined without -d. */
function kindOf(l: Record<string, unknown>): string | undefined {
  return str((l.linkinfo as { info_kind?: unknown } | undefined)?.info_kind);
}

/**
 * `ip -d -json addr show` → twill's devices: vxlan devices named twill.* or twill-v6.* (a link of
 * another kind with such a name is not twill's, and is not seen, as when only vxlan links were
 * read).
 */
export function parseLinks(json: unknown): ObservedLink[] {
  return arr(json)
    .filter((l) => {
      const name = str(l.ifname);
      const ours =
        name?.startsWith(DEVICE_PREFIX) === true || name?.startsWith(DEVICE6_PREFIX) === true;
      return ours && kindOf(l) === 'vxlan';
    })
    .map((l) => {
      const info =
        (l.linkinfo as { info_data?: Record<string, unknown> } | undefined)?.info_data ?? {};
      // the IPv6 device's addresses are its global IPv6 ones (a link-local, were there one, is
      // the kernel's, not twill's)
      const v6 = str(l.ifname)?.startsWith(DEVICE6_PREFIX) === true;
      const addrs = arr(l.addr_info).filter((a) =>
        v6 ? a.family === 'inet6' && a.scope === 'global' : a.family === 'inet',
      );
      return {
        name: str(l.ifname) ?? '',
        vni: num(info.id),
        local: canon(str(info.local) ?? str(info.local6)),
        underlay: str(info.link),
        port: num(info.port),
        learning: info.learning === true,
        gbp: info.gbp === true,
        mtu: num(l.mtu) ?? 0,
        mac: str(l.address) ?? '',
        up: Array.isArray(l.flags) && l.flags.includes('UP'),
        addresses: addrs.map(
          (a) => canon(`${str(a.local) ?? ''}/${num(a.prefixlen) ?? (v6 ? 128 : 32)}`) ?? '',
        ),
      };
    });
}

/**
 * `ip -d -json addr show` → every address on a bridge (linkinfo kind "bridge", not its ports), both
 * families, as "addr/len"; diff decides which are stale gateways.
 */
export function parseBridgeAddrs(json: unknown): ObservedAddr[] {
  return arr(json)
    .filter((l) => kindOf(l) === 'bridge')
    .flatMap((l) => {
      const dev = str(l.ifname) ?? '';
      return arr(l.addr_info).flatMap((a) => {
        const local = str(a.local);
        const len = num(a.prefixlen);
        if (dev === '' || local === undefined || len === undefined) return [];
        if (a.family !== 'inet' && a.family !== 'inet6') return [];
        return [{ dev, address: canon(`${local}/${len}`) ?? '' }];
      });
    });
}

/** One route of `ip [-N] [-6] -json route show`. */
function parseRoute(r: Record<string, unknown>): RouteSpec {
  const dst = canon(str(r.dst)) ?? '';
  const metric = num(r.metric);
  return {
    dst,
    via: canon(str(r.gateway)) ?? '',
    dev: str(r.dev) ?? '',
    onlink: Array.isArray(r.flags) && r.flags.includes('onlink'),
    // an IPv6 route's metric is the kernel's default (1024), not one of twill's
    ...(metric && !dst.includes(':') ? { metric } : {}),
  };
}

/** `ip [-6] -json route show table main proto N` → routes. */
export function parseRoutes(json: unknown): RouteSpec[] {
  return arr(json).map(parseRoute);
}

/**
 * `ip [-6] -N -json route show table main` (protocols as numbers) → twill's routes (protocol
 * ROUTE_PROTOCOL) and the destinations of every other program's.
 */
export function splitRoutes(json: unknown): { own: RouteSpec[]; foreign: ForeignRoute[] } {
  const own: RouteSpec[] = [];
  const foreign: ForeignRoute[] = [];
  for (const r of arr(json)) {
    if (String(r.protocol) === String(ROUTE_PROTOCOL)) own.push(parseRoute(r));
    else foreign.push({ dst: canon(str(r.dst)) ?? '', dev: str(r.dev) ?? '' });
  }
  return { own, foreign };
}

/** `ip -json neigh show dev D` → neighbour entries. */
export function parseNeighs(json: unknown, dev: string): ObservedNeigh[] {
  return arr(json).map((n) => ({
    dev,
    ip: canon(str(n.dst)) ?? '',
    mac: str(n.lladdr) ?? '',
    permanent: Array.isArray(n.state) && n.state.includes('PERMANENT'),
  }));
}

/** `bridge -json fdb show dev D` → FDB entries. */
export function parseFdb(json: unknown, dev: string): ObservedFdb[] {
  return arr(json).map((f) => ({
    dev,
    mac: str(f.mac) ?? '',
    dst: canon(str(f.dst)),
    permanent: f.state === 'permanent',
  }));
}

/**
 * `iptables -S <chain>` (`ip6tables` with `ipv6`) text, or null when the chain does not exist
 * (the tool exits 1).
 */
async function listChain(
  runner: Runner,
  o: { table: string; chain: string; ipv6: boolean },
  signal: AbortSignal,
): Promise<string | null> {
  const file = o.ipv6 ? 'ip6tables' : 'iptables';
  try {
    return (await runner(file, ['-w', '5', '-t', o.table, '-S', o.chain], { signal })).stdout;
  } catch (err) {
    if (err instanceof CommandError && err.exitCode === 1) return null;
    throw err;
  }
}

/** One of twill's chains and its parent's jumps, from iptables (ip6tables with `ipv6`). */
export async function observeChain(
  runner: Runner,
  o: { table: string; parent: string; chain: string; ipv6?: boolean },
  signal: AbortSignal,
): Promise<ObservedChain> {
  const ipv6 = o.ipv6 === true;
  const [parent, own] = await Promise.all([
    listChain(runner, { table: o.table, chain: o.parent, ipv6 }, signal),
    listChain(runner, { table: o.table, chain: o.chain, ipv6 }, signal),
  ]);
  return {
    jumps: parent === null ? [] : jumpRules(parent, o.parent, o.chain),
    rules: own === null ? null : chainRules(own),
  };
}

/** twill's two chains in one tool (iptables, or ip6tables), each with its parent's jumps. */
export interface OwnChains {
  readonly postrouting: ObservedChain;
  readonly forward: ObservedChain;
}

/**
 * What a failed read of twill's chains means (an abort always throws):
 * - `strict`: the read fails (the chains of a family that is on: a pass, the doctor's checks);
 * - `missing-tool-none`: a tool that is not installed holds none of them, any other failure
 *   throws (the cleanup, the doctor's look for another mode's leftovers);
 * - `tolerant`: a tool that is not installed holds none, any other failure is "not read"
 *   (undefined: a pass leaves such chains as they are, `twill status` shows them unknown).
 */
export type ChainReadPolicy = 'strict' | 'missing-tool-none' | 'tolerant';

const NO_CHAIN: ObservedChain = { jumps: [], rules: null };

/**
 * twill's chains TWILL-POSTRTG (nat, from POSTROUTING) and TWILL-FWD (filter, from FORWARD) in
 * iptables, or with `ipv6` in ip6tables: the one reader of both, for the passes, the cleanup,
 * `twill status` and `twill doctor`, each choosing what a failed read means (`policy`).
 */
export function readOwnChains(
  runner: Runner,
  o: { readonly ipv6: boolean; readonly policy: 'tolerant' },
  signal: AbortSignal,
): Promise<OwnChains | undefined>;
export function readOwnChains(
  runner: Runner,
  o: { readonly ipv6: boolean; readonly policy: 'strict' | 'missing-tool-none' },
  signal: AbortSignal,
): Promise<OwnChains>;
export function readOwnChains(
  runner: Runner,
  o: { readonly ipv6: boolean; readonly policy: ChainReadPolicy },
  signal: AbortSignal,
): Promise<OwnChains | undefined>;
export async function readOwnChains(
  runner: Runner,
  o: { readonly ipv6: boolean; readonly policy: ChainReadPolicy },
  signal: AbortSignal,
): Promise<OwnChains | undefined> {
  const v6 = o.ipv6 ? { ipv6: true } : {};
  try {
    const [postrouting, forward] = await Promise.all([
      observeChain(
        runner,
        { table: 'nat', parent: 'POSTROUTING', chain: MASQ_CHAIN, ...v6 },
        signal,
      ),
      observeChain(runner, { table: 'filter', parent: 'FORWARD', chain: FWD_CHAIN, ...v6 }, signal),
    ]);
    return { postrouting, forward };
  } catch (err) {
    if (signal.aborted || o.policy === 'strict') throw err;
    if (isMissingTool(err)) return { postrouting: NO_CHAIN, forward: NO_CHAIN };
    if (o.policy === 'missing-tool-none') throw err;
    return undefined;
  }
}

export interface ObserveOptions {
  /** read the chains (a lease change cannot have changed them) */
  readonly chains: boolean;
  /**
   * IPv6 is on: read the IPv6 routes (and, with `chains`, the ip6tables chains) too; `dev6` is the
   * IPv6 vxlan device whose neighbours and FDB entries matter
   */
  readonly ipv6?: boolean;
  readonly dev6?: string | undefined;
  /**
   * IPv6 is off, but what a dual-stack run may have left is read too, tolerantly: the IPv6 routes
   * and (with `chains`) the ip6tables chains. A read that fails (a kernel without IPv6, no
   * ip6tables) counts as nothing there. For the first pass after a start only: a steady IPv4-only
   * pass spawns what it always did.
   */
  readonly leftovers6?: boolean;
  /**
   * false: IPv4 is off (IPv6 only): no IPv4 route, no iptables chain and no entry of `dev` (there
   * is no IPv4 device whose entries matter) is read
   */
  readonly ipv4?: boolean;
  /**
   * IPv4 is off, but what an IPv4 or dual-stack run may have left is read too, tolerantly: the IPv4
   * routes and (with `chains`) the iptables chains. A read that fails (no iptables, no IPv4
   * netfilter) counts as nothing there. For the first pass after a start only.
   */
  readonly leftovers4?: boolean;
}

/**
 * Reads the kernel's view of what twill owns; `dev` is the vxlan device whose
 * entries matter. Without `chains`, the chains are not read (a lease change
 * cannot have changed them): `postrouting` and `forward` are then undefined.
 * Without `ipv6` (or `leftovers6`), no IPv6 route or chain is read (IPv4-only
 * passes spawn what they always did); twill-v6.* devices are seen either way,
 * so one left from dual-stack is removed. With `ipv4` false (and no
 * `leftovers4`), no IPv4 route or iptables chain is read, `postrouting` and
 * `forward` are undefined; twill.* devices are seen either way, so one left
 * from an IPv4 run is removed.
 */
export async function observe(
  runner: Runner,
  dev: string | undefined,
  signal: AbortSignal,
  o: ObserveOptions = { chains: true },
): Promise<ObservedState> {
  const opts = { signal, timeoutMs: 30_000 };
  // every link, not just vxlan ones: the bridges' addresses come with the same process. Read
  // before the routes, not beside them: a device deleted meanwhile (by hand) shows its routes for
  // a moment as through "if<N>", which a routes read started first caught and the pass then tried
  // to delete (test/netns/drift-ipv6only.test.ts caught it; reconciler-engine.test.ts's abort
  // test pins the order: only this read is in flight when it is held)
  const all = await runJson(runner, 'ip', ['-d', '-json', 'addr', 'show'], opts);
  const links = parseLinks(all);
  const ipv6 = o.ipv6 === true;
  const leftovers6 = !ipv6 && o.leftovers6 === true;
  const ipv4 = o.ipv4 !== false;
  const leftovers4 = !ipv4 && o.leftovers4 === true;
  const vanished = new Set<string>();
  // the device may go between the reads (deleted by hand): then it is absent, not a failed pass
  const ofDevice = <T>(d: string | undefined, read: (d: string) => Promise<T[]>): Promise<T[]> => {
    if (d === undefined || !links.some((l) => l.name === d)) return Promise.resolve([]);
    return read(d).catch((err: unknown) => {
      if (!isNoDevice(err)) throw err;
      vanished.add(d);
      return [];
    });
  };
  const neighsOf = (d: string): Promise<ObservedNeigh[]> =>
    runJson(runner, 'ip', ['-json', 'neigh', 'show', 'dev', d], opts).then((j) =>
      parseNeighs(j, d),
    );
  const fdbOf = (d: string): Promise<ObservedFdb[]> =>
    runJson(runner, 'bridge', ['-json', 'fdb', 'show', 'dev', d], opts).then((j) => parseFdb(j, d));
  // the whole main table, protocols as numbers: twill's routes, and which destinations other
  // programs' routes hold (on a node, a handful beside twill's)
  const routesOf = (family: string[]): Promise<{ own: RouteSpec[]; foreign: ForeignRoute[] }> =>
    runJson(runner, 'ip', [...family, '-N', '-json', 'route', 'show', 'table', 'main'], opts).then(
      splitRoutes,
    );
  const NONE: { own: RouteSpec[]; foreign: ForeignRoute[] } = { own: [], foreign: [] };
  const dev6 = ipv6 ? o.dev6 : undefined;
  // leftovers: a read that fails is nothing there (a chain not read is left alone)
  const tolerant = <T>(read: Promise<T>, none: T): Promise<T> =>
    read.catch((err: unknown) => {
      if (signal.aborted) throw err;
      return none;
    });
  const read6 = ipv6 || leftovers6;
  const dev4 = ipv4 ? dev : undefined;
  const [routes, routes6, neighs, neighs6, fdb, fdb6, chains] = await Promise.all([
    ipv4 ? routesOf([]) : leftovers4 ? tolerant(routesOf([]), NONE) : NONE,
    ipv6 ? routesOf(['-6']) : leftovers6 ? tolerant(routesOf(['-6']), NONE) : NONE,
    ofDevice(dev4, neighsOf),
    ofDevice(dev6, neighsOf),
    ofDevice(dev4, fdbOf),
    ofDevice(dev6, fdbOf),
    o.chains ? observeChains(runner, signal, o) : NOT_READ,
  ]);
  const gone = (x: { dev: string }): boolean => vanished.has(x.dev);
  return {
    links: links.filter((l) => !vanished.has(l.name)),
    routes: read6 ? [...routes.own, ...routes6.own] : routes.own,
    foreignRoutes: [...routes.foreign, ...routes6.foreign],
    neighs: [...neighs, ...neighs6].filter((n) => !gone(n)),
    fdb: [...fdb, ...fdb6].filter((f) => !gone(f)),
    ...chains,
    bridgeAddrs: parseBridgeAddrs(all),
  };
}

/** No chain read: each is left as it is. */
export const NOT_READ: ObservedChains = { postrouting: undefined, forward: undefined };

/**
 * The chains part of `observe` alone (its options but `chains`): a full pass reads them in the
 * masquerade's lane, after the entries' batches have started.
 */
export async function observeChains(
  runner: Runner,
  signal: AbortSignal,
  o: Omit<ObserveOptions, 'chains' | 'dev6'>,
): Promise<ObservedChains> {
  const ipv6 = o.ipv6 === true;
  const ipv4 = o.ipv4 !== false;
  const read6 = ipv6 || o.leftovers6 === true;
  const read4 = ipv4 || o.leftovers4 === true;
  // a family that is on is read as always; its leftovers (the family off) tolerantly
  const chains = (v6: boolean, on: boolean): Promise<OwnChains | undefined> =>
    readOwnChains(runner, { ipv6: v6, policy: on ? 'strict' : 'tolerant' }, signal);
  const [chains4, chains6] = await Promise.all([
    read4 ? chains(false, ipv4) : undefined,
    read6 ? chains(true, ipv6) : undefined,
  ]);
  return {
    postrouting: chains4?.postrouting,
    forward: chains4?.forward,
    ...(read6 ? { postrouting6: chains6?.postrouting, forward6: chains6?.forward } : {}),
  };
}

export interface IptablesInfo {
  /**
   * iptables drives nf_tables and the `nft` command is there (then `nft monitor` sees rule changes)
   */
  readonly nftables: boolean;
  /** MASQUERADE --random-fully is available (iptables ≥ 1.6.2) */
  readonly randomFully: boolean;
}

/** Parses `iptables --version` ("iptables v1.8.9 (nf_tables)"). */
export function parseIptablesVersion(text: string): IptablesInfo {
  const m = /v(\d+)\.(\d+)\.(\d+)/.exec(text);
  const [maj, min, patch] = m ? [Number(m[1]), Number(m[2]), Number(m[3])] : [0, 0, 0];
  const randomFully = maj > 1 || (maj === 1 && (min > 6 || (min === 6 && patch >= 2)));
  return { nftables: text.includes('nf_tables'), randomFully };
}

/**
 * Which iptables this node has: asks `iptables --version`, or with IPv4 off (`ipv4` false: only
 * ip6tables is used) `ip6tables --version`, which prints the same.
 */
export async function detectIptables(
  runner: Runner,
  signal: AbortSignal,
  o: { ipv4?: boolean } = {},
): Promise<IptablesInfo> {
  const file = o.ipv4 === false ? 'ip6tables' : 'iptables';
  const info = parseIptablesVersion((await runner(file, ['--version'], { signal })).stdout);
  // without the nft command there is no event stream: the chains are polled instead
  return { ...info, nftables: info.nftables && (await nftCommandExists(runner, signal)) };
}

/** Whether the nft command runs here (`nft --version`). */
export async function nftCommandExists(runner: Runner, signal: AbortSignal): Promise<boolean> {
  try {
    await runner('nft', ['--version'], { signal });
    return true;
  } catch (err) {
    if (signal.aborted) throw err;
    return false;
  }
}
