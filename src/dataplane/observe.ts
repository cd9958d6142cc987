// observe: what the kernel holds of what twill owns, read with a fixed
// number of processes run in parallel (ip -json link/addr, route, neigh,
// bridge -json fdb, iptables -S of two built-in and two twill chains),
// whatever the number of peers. Parsing is pure; `observe` does the reads.
import { CommandError, isNoDevice, runJson, type Runner } from '../exec/runner.ts';
import { chainRules, FWD_CHAIN, jumpRules, MASQ_CHAIN } from './masq.ts';
import {
  DEVICE_PREFIX,
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

/** `ip -d -json addr show type vxlan` → twill's devices (named twill.*). */
export function parseLinks(json: unknown): ObservedLink[] {
  return arr(json)
    .filter((l) => str(l.ifname)?.startsWith(DEVICE_PREFIX))
    .map((l) => {
      const info =
        (l.linkinfo as { info_data?: Record<string, unknown> } | undefined)?.info_data ?? {};
      const addrs = arr(l.addr_info).filter((a) => a.family === 'inet');
      return {
        name: str(l.ifname) ?? '',
        vni: num(info.id),
        local: str(info.local),
        underlay: str(info.link),
        port: num(info.port),
        learning: info.learning === true,
        gbp: info.gbp === true,
        mtu: num(l.mtu) ?? 0,
        mac: str(l.address) ?? '',
        up: Array.isArray(l.flags) && l.flags.includes('UP'),
        addresses: addrs.map((a) => `${str(a.local) ?? ''}/${num(a.prefixlen) ?? 32}`),
      };
    });
}

/** `ip -json route show table main proto N` → routes. */
export function parseRoutes(json: unknown): RouteSpec[] {
  return arr(json).map((r) => ({
    dst: str(r.dst) ?? '',
    via: str(r.gateway) ?? '',
    dev: str(r.dev) ?? '',
    onlink: Array.isArray(r.flags) && r.flags.includes('onlink'),
  }));
}

/** `ip -json neigh show dev D` → neighbour entries. */
export function parseNeighs(json: unknown, dev: string): ObservedNeigh[] {
  return arr(json).map((n) => ({
    dev,
    ip: str(n.dst) ?? '',
    mac: str(n.lladdr) ?? '',
    permanent: Array.isArray(n.state) && n.state.includes('PERMANENT'),
  }));
}

/** `bridge -json fdb show dev D` → FDB entries. */
export function parseFdb(json: unknown, dev: string): ObservedFdb[] {
  return arr(json).map((f) => ({
    dev,
    mac: str(f.mac) ?? '',
    dst: str(f.dst),
    permanent: f.state === 'permanent',
  }));
}

/** `iptables -S <chain>` text, or null when the chain does not exist (iptables exits 1). */
async function listChain(
  runner: Runner,
  table: string,
  chain: string,
  signal: AbortSignal,
): Promise<string | null> {
  try {
    return (await runner('iptables', ['-w', '5', '-t', table, '-S', chain], { signal })).stdout;
  } catch (err) {
    if (err instanceof CommandError && err.exitCode === 1) return null;
    throw err;
  }
}

export async function observeChain(
  runner: Runner,
  o: { table: string; parent: string; chain: string },
  signal: AbortSignal,
): Promise<ObservedChain> {
  const [parent, own] = await Promise.all([
    listChain(runner, o.table, o.parent, signal),
    listChain(runner, o.table, o.chain, signal),
  ]);
  return {
    jumps: parent === null ? [] : jumpRules(parent, o.parent, o.chain),
    rules: own === null ? null : chainRules(own),
  };
}

/**
 * Reads the kernel's view of what twill owns; `dev` is the vxlan device whose
 * entries matter. Without `chains`, the chains are not read (a lease change
 * cannot have changed them): `postrouting` and `forward` are then undefined.
 */
export async function observe(
  runner: Runner,
  dev: string | undefined,
  signal: AbortSignal,
  o: { chains: boolean } = { chains: true },
): Promise<ObservedState> {
  const opts = { signal, timeoutMs: 30_000 };
  const links = parseLinks(
    await runJson(runner, 'ip', ['-d', '-json', 'addr', 'show', 'type', 'vxlan'], opts),
  );
  const present = dev !== undefined && links.some((l) => l.name === dev);
  let vanished = false;
  // the device may go between the reads (deleted by hand): then it is absent, not a failed pass
  const ofDevice = <T>(read: Promise<T[]>): Promise<T[]> =>
    read.catch((err: unknown) => {
      if (!isNoDevice(err)) throw err;
      vanished = true;
      return [];
    });
  const [routes, neighsRead, fdbRead, postrouting, forward] = await Promise.all([
    runJson(
      runner,
      'ip',
      ['-json', 'route', 'show', 'table', 'main', 'proto', String(ROUTE_PROTOCOL)],
      opts,
    ).then(parseRoutes),
    present
      ? ofDevice(
          runJson(runner, 'ip', ['-json', 'neigh', 'show', 'dev', dev], opts).then((j) =>
            parseNeighs(j, dev),
          ),
        )
      : [],
    present
      ? ofDevice(
          runJson(runner, 'bridge', ['-json', 'fdb', 'show', 'dev', dev], opts).then((j) =>
            parseFdb(j, dev),
          ),
        )
      : [],
    o.chains
      ? observeChain(runner, { table: 'nat', parent: 'POSTROUTING', chain: MASQ_CHAIN }, signal)
      : undefined,
    o.chains
      ? observeChain(runner, { table: 'filter', parent: 'FORWARD', chain: FWD_CHAIN }, signal)
      : undefined,
  ]);
  if (vanished)
    return {
      links: links.filter((l) => l.name !== dev),
      routes,
      neighs: [],
      fdb: [],
      postrouting,
      forward,
    };
  return { links, routes, neighs: neighsRead, fdb: fdbRead, postrouting, forward };
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
