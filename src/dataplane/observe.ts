// observe: what the kernel holds of what twill owns, read with a fixed
// number of processes run in parallel (ip -json link/addr, route, neigh,
// bridge -json fdb, iptables -S of two built-in and two twill chains; with
// IPv6 also ip -6 route, the IPv6 device's neighbours and FDB, and the same
// four ip6tables -S; without IPv6, the first pass after a start reads the
// IPv6 routes and chains a dual-stack run may have left, a failure counting
// as nothing there), whatever the number of peers. Parsing is pure;
// `observe` does the reads.
import { CommandError, isNoDevice, runJson, type Runner } from '../exec/runner.ts';
import { canonicalIpv6 } from '../net/ipv6.ts';
import { chainRules, FWD_CHAIN, jumpRules, MASQ_CHAIN } from './masq.ts';
import {
  DEVICE_PREFIX,
  DEVICE6_PREFIX,
  ROUTE_PROTOCOL,
  type ObservedChain,
  type ObservedFdb,
  type ObservedLink,
  type ObservedNeigh,
  type ObservedState,
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

/** `ip -d -json addr show type vxlan` → twill's devices (named twill.* or twill-v6.*). */
export function parseLinks(json: unknown): ObservedLink[] {
  return arr(json)
    .filter((l) => {
      const name = str(l.ifname);
      return name?.startsWith(DEVICE_PREFIX) === true || name?.startsWith(DEVICE6_PREFIX) === true;
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

/** `ip [-6] -json route show table main proto N` → routes. */
export function parseRoutes(json: unknown): RouteSpec[] {
  return arr(json).map((r) => ({
    dst: canon(str(r.dst)) ?? '',
    via: canon(str(r.gateway)) ?? '',
    dev: str(r.dev) ?? '',
    onlink: Array.isArray(r.flags) && r.flags.includes('onlink'),
  }));
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
}

/**
 * Reads the kernel's view of what twill owns; `dev` is the vxlan device whose
 * entries matter. Without `chains`, the chains are not read (a lease change
 * cannot have changed them): `postrouting` and `forward` are then undefined.
 * Without `ipv6` (or `leftovers6`), no IPv6 route or chain is read (IPv4-only
 * passes spawn what they always did); twill-v6.* devices are seen either way,
 * so one left from dual-stack is removed.
 */
export async function observe(
  runner: Runner,
  dev: string | undefined,
  signal: AbortSignal,
  o: ObserveOptions = { chains: true },
): Promise<ObservedState> {
  const opts = { signal, timeoutMs: 30_000 };
  const links = parseLinks(
    await runJson(runner, 'ip', ['-d', '-json', 'addr', 'show', 'type', 'vxlan'], opts),
  );
  const ipv6 = o.ipv6 === true;
  const leftovers6 = !ipv6 && o.leftovers6 === true;
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
  const routesOf = (family: string[]): Promise<RouteSpec[]> =>
    runJson(
      runner,
      'ip',
      [...family, '-json', 'route', 'show', 'table', 'main', 'proto', String(ROUTE_PROTOCOL)],
      opts,
    ).then(parseRoutes);
  const chain = (table: string, parent: string, name: string, v6: boolean) =>
    observeChain(runner, { table, parent, chain: name, ...(v6 ? { ipv6: true } : {}) }, signal);
  const dev6 = ipv6 ? o.dev6 : undefined;
  // leftovers: a read that fails is nothing there (a chain not read is left alone)
  const tolerant = <T>(read: Promise<T>, none: T): Promise<T> =>
    read.catch((err: unknown) => {
      if (signal.aborted) throw err;
      return none;
    });
  const read6 = ipv6 || leftovers6;
  const chain6 = (table: string, parent: string, name: string) =>
    ipv6
      ? chain(table, parent, name, true)
      : tolerant<ObservedChain | undefined>(chain(table, parent, name, true), undefined);
  const [routes, routes6, neighs, neighs6, fdb, fdb6, postrouting, forward, post6, fwd6] =
    await Promise.all([
      routesOf([]),
      ipv6 ? routesOf(['-6']) : leftovers6 ? tolerant(routesOf(['-6']), []) : [],
      ofDevice(dev, neighsOf),
      ofDevice(dev6, neighsOf),
      ofDevice(dev, fdbOf),
      ofDevice(dev6, fdbOf),
      o.chains ? chain('nat', 'POSTROUTING', MASQ_CHAIN, false) : undefined,
      o.chains ? chain('filter', 'FORWARD', FWD_CHAIN, false) : undefined,
      o.chains && read6 ? chain6('nat', 'POSTROUTING', MASQ_CHAIN) : undefined,
      o.chains && read6 ? chain6('filter', 'FORWARD', FWD_CHAIN) : undefined,
    ]);
  const gone = (x: { dev: string }): boolean => vanished.has(x.dev);
  return {
    links: links.filter((l) => !vanished.has(l.name)),
    routes: read6 ? [...routes, ...routes6] : routes,
    neighs: [...neighs, ...neighs6].filter((n) => !gone(n)),
    fdb: [...fdb, ...fdb6].filter((f) => !gone(f)),
    postrouting,
    forward,
    ...(read6 ? { postrouting6: post6, forward6: fwd6 } : {}),
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

export async function detectIptables(runner: Runner, signal: AbortSignal): Promise<IptablesInfo> {
  const info = parseIptablesVersion((await runner('iptables', ['--version'], { signal })).stdout);
  // without the nft command there is no event stream: the chains are polled instead
  const nft =
    info.nftables &&
    (await runner('nft', ['--version'], { signal }).then(
      () => true,
      () => false,
    ));
  return { ...info, nftables: nft };
}
