// The doctor's only contact with the world: it reads the net sysctls (under
// --proc-sys-net, where the daemon reads them), runs `ip`, `iptables*` and
// `nft` through the process runner, reads subnet.env and asks the lease
// store, all in parallel, and turns each answer (or its failure) into a fact.
// No check runs here; a read that fails is recorded, not thrown. The reads
// that depend on the node's address families wait for the store, subnet.env
// and the links, which tell them (overlay.ts): the IPv6 facts when IPv6 is on
// (dual-stack or IPv6 only), and on an IPv6-only node the underlay by its
// IPv6 address, ip6tables instead of iptables, and the IPv4 leftovers. In
// nftables mode (the store's config says), twill's iptables chains are read
// as leftovers (a tool that is not installed holds none, and is told apart
// from a failed read), and twill's nftables tables in either mode
// (gather-nft.ts).
import { join } from 'node:path';
import { describeError, hasCode, TwillError } from '../errors.ts';
import { isMissingTool, runJson, type Runner } from '../exec/runner.ts';
import { ROUTE_PROTOCOL, type RouteSpec } from '../dataplane/model.ts';
import {
  observeChain,
  parseIptablesVersion,
  parseRoutes,
  readOwnChains,
} from '../dataplane/observe.ts';
import { listLeases } from '../lease/snapshot.ts';
import type { LeaseStore } from '../lease/types.ts';
import { discoverInterface, parseIpAddr, type IfaceRequest } from '../net/iface.ts';
import { readSubnetEnv } from '../subnetenv.ts';
import { childController } from '../util/abort.ts';
import {
  failed,
  got,
  type ChainsFact,
  type DoctorFacts,
  type ForeignChain,
  type IptablesFact,
  type LinkFact,
  type Read,
  type StoreFact,
  type UnderlayFact,
  type Underlay6Fact,
} from './facts.ts';
import { readNftFact } from './gather-nft.ts';
import { families, masqMode, overlayView, type Families } from './overlay.ts';

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

/** Global IPv6 addresses ("addr/len") of one link in `ip -json addr show` output, tentative too. */
function global6(link: Record<string, unknown> | undefined): string[] {
  const info = Array.isArray(link?.addr_info)
    ? (link.addr_info as { family?: string; scope?: string; local?: string; prefixlen?: number }[])
    : [];
  return info.flatMap((a) =>
    a.family === 'inet6' && a.scope === 'global' && typeof a.local === 'string'
      ? [`${a.local}/${a.prefixlen ?? 128}`]
      : [],
  );
}

/**
 * `ip -d -json addr show` → every link with its kind, master, vxlan VNI and port, IPv4 and global
 * IPv6 addresses.
 */
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
      addresses6: global6(raw[i]),
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

/** The backend `tool` (iptables; ip6tables on an IPv6-only node) drives, and the other's rules. */
async function iptablesFact(
  runner: Runner,
  tool: 'iptables' | 'ip6tables',
  signal: AbortSignal,
): Promise<IptablesFact> {
  const info = parseIptablesVersion((await runner(tool, ['--version'], { signal })).stdout);
  const backend = info.nftables ? 'nf_tables' : 'legacy';
  const save = `${tool}-${info.nftables ? 'legacy' : 'nft'}-save`;
  const otherRules = await attempt(async () =>
    countSavedRules((await runner(save, [], { signal, timeoutMs: 10_000 })).stdout),
  );
  return { backend, otherRules };
}

const FOREIGN = [
  { table: 'nat', parent: 'POSTROUTING', chain: 'FLANNEL-POSTRTG' },
  { table: 'filter', parent: 'FORWARD', chain: 'FLANNEL-FWD' },
] as const;

/** flannel's chains in iptables, and on an IPv6-only node (`ipv6`) in ip6tables too. */
async function foreignChains(
  runner: Runner,
  o: { ipv6: boolean },
  signal: AbortSignal,
): Promise<ForeignChain[]> {
  const where = [
    ...FOREIGN.map((c) => ({ ...c, ipv6: false })),
    ...(o.ipv6 ? FOREIGN.map((c) => ({ ...c, ipv6: true })) : []),
  ];
  const seen = await Promise.all(
    where.map(async (c) => ({ c, o: await observeChain(runner, c, signal) })),
  );
  return seen.flatMap(({ c, o }) =>
    o.rules === null && o.jumps.length === 0
      ? []
      : [
          {
            ...(c.ipv6 ? { ipv6: true } : {}),
            table: c.table,
            chain: c.chain,
            rules: o.rules?.length ?? 0,
            jumps: o.jumps.length,
          },
        ],
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

/**
 * twill's two chains in ip6tables (`ipv6`), or in iptables: `strict` where they are the
 * masquerade, `missing-tool-none` where they are another mode's leftovers (nftables mode: a node
 * without the tool has none).
 */
function twillChains(
  runner: Runner,
  o: { ipv6: boolean; nftables: boolean },
  signal: AbortSignal,
): Promise<ChainsFact> {
  const policy = o.nftables ? ('missing-tool-none' as const) : ('strict' as const);
  return readOwnChains(runner, { ipv6: o.ipv6, policy }, signal);
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
 * The underlay: by its IPv4 address, or on an IPv6-only node by its IPv6 address and the IPv6
 * default route (as the daemon picks it there), which one read gives with its IPv6 fact too.
 */
async function underlayFacts(
  runner: Runner,
  o: GatherOptions,
  fam: Families,
  signal: AbortSignal,
): Promise<Pick<DoctorFacts, 'underlay' | 'underlay6'>> {
  if (fam.ipv4)
    return {
      underlay: await attempt(async (): Promise<UnderlayFact> => {
        const c = await discoverInterface(runner, o.iface, signal);
        return { name: c.iface.name, mtu: c.iface.mtu, publicIp: c.publicIp };
      }),
    };
  const req: IfaceRequest = { ...o.iface, ipv4: false, ipv6: true };
  const c = await attempt(() => discoverInterface(runner, req, signal));
  if (!c.ok) return { underlay: c, underlay6: c };
  const { iface, ifaceIp6, publicIp6 } = c.value;
  return {
    underlay: got({ name: iface.name, mtu: iface.mtu, publicIp: null }),
    underlay6: got({ ip: ifaceIp6 ?? '', publicIp: publicIp6 ?? '' }),
  };
}

/**
 * The IPv6 facts of a dual-stack or IPv6-only node: forwarding, the underlay's IPv6 address (read
 * already on an IPv6-only node), the chains, the IPv6 routes with twill's protocol; on an
 * IPv6-only node also bridge-nf-call-ip6tables and twill's iptables chains (leftovers there).
 */
async function ipv6Facts(
  deps: GatherDeps,
  o: GatherOptions,
  fam: Families & { readonly nftables: boolean },
  underlay6: DoctorFacts['underlay6'],
  signal: AbortSignal,
): Promise<
  Pick<
    DoctorFacts,
    'ipv6Forward' | 'underlay6' | 'ip6Chains' | 'ownedRoutes6' | 'bridgeNf6' | 'ip4Chains'
  >
> {
  const only = !fam.ipv4;
  const [ipv6Forward, u6, chains, routes6, bridgeNf6, chains4] = await Promise.all([
    sysctl(deps, o, 'ipv6/conf/all/forwarding'),
    underlay6 ??
      attempt(async (): Promise<Underlay6Fact> => {
        const c = await discoverInterface(deps.runner, { ...o.iface, ipv6: true }, signal);
        return { ip: c.ifaceIp6 ?? '', publicIp: c.publicIp6 ?? '' };
      }),
    // nftables mode: twill's chains are leftovers, and a node without ip6tables has none
    attempt(() => twillChains(deps.runner, { ipv6: true, nftables: fam.nftables }, signal)),
    attempt(() => readOwnedRoutes(deps.runner, ['-6'], signal)),
    only ? sysctl(deps, o, 'bridge/bridge-nf-call-ip6tables') : undefined,
    only
      ? attempt(() => twillChains(deps.runner, { ipv6: false, nftables: fam.nftables }, signal))
      : undefined,
  ]);
  return {
    ipv6Forward,
    underlay6: u6,
    ip6Chains: chains,
    ownedRoutes6: routes6,
    ...(bridgeNf6 ? { bridgeNf6 } : {}),
    ...(chains4 ? { ip4Chains: chains4 } : {}),
  };
}

/** Reads every fact the checks need. */
export async function gather(
  deps: GatherDeps,
  o: GatherOptions,
  signal: AbortSignal,
): Promise<DoctorFacts> {
  const { runner } = deps;
  const opts = { signal, timeoutMs: 10_000 };
  const storeRead = deps
    .readStore(signal)
    .then(got, (err: unknown) =>
      failed<StoreFact>(
        hasCode(err, 'STORE_UNAVAILABLE')
          ? `lease store unreachable (${describeError(err)})`
          : `store: ${describeError(err)}`,
      ),
    );
  const envRead = attempt(() => readSubnetEnv(o.subnetFile));
  const linksRead = attempt(async () =>
    parseLinkFacts(await runJson(runner, 'ip', ['-d', '-json', 'addr', 'show'], opts)),
  );
  // the reads of one family or the other wait for what tells the node's families
  const famRead = Promise.all([storeRead, envRead, linksRead]).then(([store, subnetEnv, links]) =>
    families({ store, subnetEnv, links }),
  );
  const byFamily = Promise.all([famRead, storeRead]).then(async ([fam, store]) => {
    // IPv6 only: its packets, vxlan's among them, meet ip6tables' rules alone
    const tool = fam.ipv4 ? 'iptables' : 'ip6tables';
    const nftables = masqMode({ store }) === 'nftables';
    let noIptables = false;
    const [iptables, inputChain, foreign, under, chains4] = await Promise.all([
      attempt(() =>
        iptablesFact(runner, tool, signal).catch((err: unknown) => {
          noIptables = isMissingTool(err);
          throw err;
        }),
      ),
      attempt(async () => (await runner(tool, ['-w', '5', '-S', 'INPUT'], opts)).stdout),
      attempt(() => foreignChains(runner, { ipv6: !fam.ipv4 }, signal)),
      underlayFacts(runner, o, fam, signal),
      // nftables mode: twill's iptables chains are an iptables-mode run's leftovers (IPv6 only:
      // read with the IPv6 facts, as ever)
      nftables && fam.ipv4
        ? attempt(() => twillChains(runner, { ipv6: false, nftables }, signal))
        : undefined,
    ]);
    return { fam: { ...fam, nftables }, iptables, noIptables, inputChain, foreign, under, chains4 };
  });
  const [ipForward, bridgeNf, links, subnetEnv, store, ownedRoutes, read, nft] = await Promise.all([
    sysctl(deps, o, 'ipv4/ip_forward').then((r) =>
      r.ok && r.value === undefined
        ? failed<string>(`no ${join(o.procSysNet, 'ipv4/ip_forward')}`)
        : (r as Read<string>),
    ),
    sysctl(deps, o, 'bridge/bridge-nf-call-iptables'),
    linksRead,
    envRead,
    storeRead,
    attempt(() => readOwnedRoutes(runner, [], signal)),
    byFamily,
    attempt(() => readNftFact(runner, signal)),
  ]);
  const { fam, under } = read;
  const facts: DoctorFacts = {
    ipForward,
    bridgeNf,
    rpFilter: new Map(),
    iptables: read.iptables,
    ...(read.noIptables ? { noIptables: true as const } : {}),
    inputChain: read.inputChain,
    foreignChains: read.foreign,
    links,
    underlay: under.underlay,
    subnetFile: o.subnetFile,
    subnetEnv,
    store,
    ownedRoutes,
    bridge: o.bridge,
    nft,
    ...(read.chains4 ? { ip4Chains: read.chains4 } : {}),
  };
  const [rpFilter, v6] = await Promise.all([
    // rp_filter filters IPv4 only: nothing to read with IPv4 off
    fam.ipv4 ? rpFilters(deps, o, facts) : new Map<string, string>(),
    fam.ipv6 ? ipv6Facts(deps, o, fam, under.underlay6, signal) : {},
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
