// The doctor's only contact with the world: it reads the net sysctls (under
// --proc-sys-net, where the daemon reads them), runs `ip` and `iptables*`
// through the process runner, reads subnet.env and asks the lease store, all
// in parallel, and turns each answer (or its failure) into a fact. No check
// runs here; a read that fails is recorded, not thrown. The IPv6 facts are
// read once the store says the node is dual-stack (EnableIPv6).
import { join } from 'node:path';
import { describeError, hasCode, TwillError } from '../errors.ts';
import { runJson, type Runner } from '../exec/runner.ts';
import { FWD_CHAIN, MASQ_CHAIN } from '../dataplane/masq.ts';
import { ROUTE_PROTOCOL, type RouteSpec } from '../dataplane/model.ts';
import { observeChain, parseIptablesVersion, parseRoutes } from '../dataplane/observe.ts';
import { listLeases } from '../lease/snapshot.ts';
import type { LeaseStore } from '../lease/types.ts';
import { discoverInterface, parseIpAddr, type IfaceRequest } from '../net/iface.ts';
import { readSubnetEnv } from '../subnetenv.ts';
import { childController } from '../util/abort.ts';
import {
  failed,
  got,
  type DoctorFacts,
  type ForeignChain,
  type Ip6ChainsFact,
  type IptablesFact,
  type LinkFact,
  type Read,
  type StoreFact,
  type Underlay6Fact,
} from './facts.ts';
import { dualStack, overlayView } from './overlay.ts';

export interface GatherDeps {
  readonly runner: Runner;
  /** reads a file (under --proc-sys-net); rejects with code ENOENT when it does not exist */
  readonly readText: (path: string) => Promise<string>;
  /** the network config and every lease record; throws when the store cannot answer */
  readonly readStore: (signal: AbortSignal) => Promise<StoreFact>;
}

export interface GatherOptions {
  readonly iface: IfaceRequest;
  readonly subnetFile: string;
  readonly bridge: string;
  /**
   * where the node's /proc/sys/net is (--proc-sys-net: the daemon's sysctls, read where the daemon
   * reads them)
   */
  readonly procSysNet: string;
}

async function attempt<T>(fn: () => Promise<T>): Promise<Read<T>> {
  try {
    return got(await fn());
  } catch (err) {
    return failed(describeError(err));
  }
}

const enoent = (err: unknown): boolean =>
  (err as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';

/** `ip -d -json addr show` → every link with its kind, master, vxlan VNI and port. */
export function parseLinkFacts(json: unknown): LinkFact[] {
  const raw = Array.isArray(json) ? (json as Record<string, unknown>[]) : [];
  return parseIpAddr(json).map((l, i) => {
    const info = (raw[i]?.linkinfo ?? {}) as {
      info_kind?: string;
      info_data?: { id?: number; port?: number; local?: string; local6?: string };
    };
    const master = raw[i]?.master;
    return {
      name: l.name,
      kind: info.info_kind,
      mtu: l.mtu,
      master: typeof master === 'string' ? master : undefined,
      addresses: l.networks,
      vni: info.info_data?.id,
      port: info.info_data?.port,
      local: info.info_data?.local ?? info.info_data?.local6,
    };
  });
}

/** Number of rules in an `iptables-save` dump. */
export function countSavedRules(dump: string): number {
  return dump.split('\n').filter((l) => l.startsWith('-A ')).length;
}

async function iptablesFact(runner: Runner, signal: AbortSignal): Promise<IptablesFact> {
  const info = parseIptablesVersion((await runner('iptables', ['--version'], { signal })).stdout);
  const backend = info.nftables ? 'nf_tables' : 'legacy';
  const save = info.nftables ? 'iptables-legacy-save' : 'iptables-nft-save';
  const otherRules = await attempt(async () =>
    countSavedRules((await runner(save, [], { signal, timeoutMs: 10_000 })).stdout),
  );
  return { backend, otherRules };
}

const FOREIGN = [
  { table: 'nat', parent: 'POSTROUTING', chain: 'FLANNEL-POSTRTG' },
  { table: 'filter', parent: 'FORWARD', chain: 'FLANNEL-FWD' },
] as const;

async function foreignChains(runner: Runner, signal: AbortSignal): Promise<ForeignChain[]> {
  const seen = await Promise.all(
    FOREIGN.map(async (c) => ({ c, o: await observeChain(runner, c, signal) })),
  );
  return seen.flatMap(({ c, o }) =>
    o.rules === null && o.jumps.length === 0
      ? []
      : [{ table: c.table, chain: c.chain, rules: o.rules?.length ?? 0, jumps: o.jumps.length }],
  );
}

/**
 * One net sysctl, `path` under --proc-sys-net (`ipv4/ip_forward`); undefined when it does not
 * exist.
 */
async function sysctl(
  deps: GatherDeps,
  o: GatherOptions,
  path: string,
): Promise<Read<string | undefined>> {
  return attempt(async () => {
    try {
      return (await deps.readText(join(o.procSysNet, path))).trim();
    } catch (err) {
      if (enoent(err)) return undefined;
      throw err;
    }
  });
}

/** rp_filter of all, default and each device overlay traffic crosses (absent devices left out). */
async function rpFilters(
  deps: GatherDeps,
  o: GatherOptions,
  f: DoctorFacts,
): Promise<Map<string, string>> {
  const view = overlayView(f);
  const devs = [
    'all',
    'default',
    ...(f.underlay.ok ? [f.underlay.value.name] : []),
    ...(view.device ? [view.device] : []),
    f.bridge,
  ];
  const values = await Promise.all(devs.map((d) => sysctl(deps, o, `ipv4/conf/${d}/rp_filter`)));
  return new Map(
    devs.flatMap((d, i) => {
      const v = values[i];
      return v?.ok && v.value !== undefined ? [[d, v.value] as [string, string]] : [];
    }),
  );
}

/** twill's two chains in ip6tables. */
async function ip6Chains(runner: Runner, signal: AbortSignal): Promise<Ip6ChainsFact> {
  const [postrouting, forward] = await Promise.all([
    observeChain(
      runner,
      { table: 'nat', parent: 'POSTROUTING', chain: MASQ_CHAIN, ipv6: true },
      signal,
    ),
    observeChain(
      runner,
      { table: 'filter', parent: 'FORWARD', chain: FWD_CHAIN, ipv6: true },
      signal,
    ),
  ]);
  return { postrouting, forward };
}

/** Main-table routes with twill's protocol, of one family (`family`: [] or ['-6']). */
async function readOwnedRoutes(
  runner: Runner,
  family: readonly string[],
  signal: AbortSignal,
): Promise<RouteSpec[]> {
  return parseRoutes(
    await runJson(
      runner,
      'ip',
      [...family, '-json', 'route', 'show', 'table', 'main', 'proto', String(ROUTE_PROTOCOL)],
      { signal, timeoutMs: 10_000 },
    ),
  );
}

/**
 * The IPv6 facts of a dual-stack node: forwarding, the underlay's IPv6 address, the chains, the
 * IPv6 routes with twill's protocol.
 */
async function ipv6Facts(
  deps: GatherDeps,
  o: GatherOptions,
  signal: AbortSignal,
): Promise<Pick<DoctorFacts, 'ipv6Forward' | 'underlay6' | 'ip6Chains' | 'ownedRoutes6'>> {
  const [ipv6Forward, underlay6, chains, routes6] = await Promise.all([
    sysctl(deps, o, 'ipv6/conf/all/forwarding'),
    attempt(async (): Promise<Underlay6Fact> => {
      const c = await discoverInterface(deps.runner, { ...o.iface, ipv6: true }, signal);
      return { ip: c.ifaceIp6 ?? '', publicIp: c.publicIp6 ?? '' };
    }),
    attempt(() => ip6Chains(deps.runner, signal)),
    attempt(() => readOwnedRoutes(deps.runner, ['-6'], signal)),
  ]);
  return { ipv6Forward, underlay6, ip6Chains: chains, ownedRoutes6: routes6 };
}

/** Reads every fact the checks need. */
export async function gather(
  deps: GatherDeps,
  o: GatherOptions,
  signal: AbortSignal,
): Promise<DoctorFacts> {
  const { runner } = deps;
  const opts = { signal, timeoutMs: 10_000 };
  const [
    ipForward,
    bridgeNf,
    iptables,
    inputChain,
    foreign,
    links,
    underlay,
    subnetEnv,
    store,
    ownedRoutes,
  ] = await Promise.all([
    sysctl(deps, o, 'ipv4/ip_forward').then((r) =>
      r.ok && r.value === undefined
        ? failed<string>(`no ${join(o.procSysNet, 'ipv4/ip_forward')}`)
        : (r as Read<string>),
    ),
    sysctl(deps, o, 'bridge/bridge-nf-call-iptables'),
    attempt(() => iptablesFact(runner, signal)),
    attempt(async () => (await runner('iptables', ['-w', '5', '-S', 'INPUT'], opts)).stdout),
    attempt(() => foreignChains(runner, signal)),
    attempt(async () =>
      parseLinkFacts(await runJson(runner, 'ip', ['-d', '-json', 'addr', 'show'], opts)),
    ),
    attempt(async () => {
      const c = await discoverInterface(runner, o.iface, signal);
      return { name: c.iface.name, mtu: c.iface.mtu, publicIp: c.publicIp };
    }),
    attempt(() => readSubnetEnv(o.subnetFile)),
    deps
      .readStore(signal)
      .then(got, (err: unknown) =>
        failed<StoreFact>(
          hasCode(err, 'STORE_UNAVAILABLE')
            ? `lease store unreachable (${describeError(err)})`
            : `store: ${describeError(err)}`,
        ),
      ),
    attempt(() => readOwnedRoutes(runner, [], signal)),
  ]);
  const facts: DoctorFacts = {
    ipForward,
    bridgeNf,
    rpFilter: new Map(),
    iptables,
    inputChain,
    foreignChains: foreign,
    links,
    underlay,
    subnetFile: o.subnetFile,
    subnetEnv,
    store,
    ownedRoutes,
    bridge: o.bridge,
  };
  const [rpFilter, v6] = await Promise.all([
    rpFilters(deps, o, facts),
    dualStack(facts) ? ipv6Facts(deps, o, signal) : {},
  ]);
  return { ...facts, rpFilter, ...v6 };
}

/** The config and one complete listing of the lease records, within `timeoutMs`. */
export async function readLeaseStore(
  store: LeaseStore,
  signal: AbortSignal,
  timeoutMs: number,
): Promise<StoreFact> {
  const ctl = childController(signal);
  // a second beyond the store's own call deadline, so an unreachable store's own error (a
  // deadline, a TLS failure) is what the doctor reports, not this timer
  const timer = setTimeout(() => ctl.abort(), timeoutMs + 1_000);
  try {
    const config = await store.getNetworkConfig(ctl.signal).catch((err: unknown) => {
      if (hasCode(err, 'STORE_UNAVAILABLE') || signal.aborted) throw err;
      throw new TwillError(
        'STORE_UNAVAILABLE',
        `no network config within ${timeoutMs} ms: ${describeError(err)}`,
      );
    });
    const leases = await listLeases(store, ctl.signal).catch((err: unknown) => {
      throw new TwillError(
        'STORE_UNAVAILABLE',
        `no lease listing within ${timeoutMs} ms: ${describeError(err)}`,
      );
    });
    return { config, leases };
  } finally {
    clearTimeout(timer);
    ctl.abort();
  }
}
