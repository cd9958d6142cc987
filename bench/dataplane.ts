// Dataplane benchmarks, host-gw and vxlan: one node running `twill run` as a
// real process in its own namespace, with 5,000 peer leases in a real etcd.
// Cold convergence (process start → every entry in the kernel) against the
// raw `ip -batch` time for the same entries; drift repair latency for each
// kind of damage; the daemon's RSS at 5,000 peers (settled, 1 s after
// convergence, peak), its floor with no peers and the growth per peer. Then
// twill in nftables mode (`"EnableNFTables": true`), both backends: cold
// convergence against the same yardstick, and the repair of its own nft
// table deleted, flushed, or short of its MASQUERADE rule (the entries'
// repairs and the memory are the same code as in iptables mode, measured
// there). Then the same again dual-stack: 5,000 peers with an IPv6 subnet
// each, so twice the entries, and the IPv6 entries' repair.
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { run } from '../src/exec/runner.ts';
import { ROUTE_PROTOCOL } from '../src/dataplane/model.ts';
import { routeMetric } from '../src/dataplane/peer-entries.ts';
import { parseCidr, type Cidr } from '../src/net/ipv4.ts';
import { NetnsLab, nsRun, sweepStaleNetns } from '../lab/kit/netns.ts';
import { hasEnded, stopProcess } from '../lab/kit/process.ts';
import {
  ETCD_PREFIX,
  logLines,
  ownedRoutes,
  peer,
  POLL_MS,
  putLeases,
  setupNode,
  sh,
  startTwill,
  statusMiB,
  stopNode,
  GROWTH_TARGET_KIB,
  RSS_TARGET_MIB,
  SETTLE_MS,
  type LogLine,
  type Node,
  type PeerSpec,
} from './node.ts';
import { waitFor } from '../lab/kit/wait.ts';
import { twillCommand } from '../lab/kit/twill-command.ts';
import { percentile, type BenchRow, type BenchSuite } from './table.ts';

const PEERS = 5_000;

/**
 * Raw `ip -batch` (and `bridge -batch`) time for the same entries in a fresh namespace (both
 * families for a dual-stack node; `ms6` the IPv6 half's share, 0 without it).
 */
async function rawBatchMs(
  lab: NetnsLab,
  backend: string,
  dualStack: boolean,
  index: number,
): Promise<{ ms: number; ms6: number }> {
  const ns = await lab.add(`raw-${backend}${dualStack ? '-ds' : ''}-${index}`);
  await run('ip', ['-n', ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth1']);
  await run('ip', ['-n', ns, 'addr', 'add', '172.16.0.2/12', 'dev', 'eth0']);
  if (dualStack)
    await run('ip', ['-n', ns, 'addr', 'add', 'fd00:172:16::2/64', 'dev', 'eth0', 'nodad']);
  await run('ip', ['-n', ns, 'link', 'set', 'eth0', 'up']);
  await run('ip', ['-n', ns, 'link', 'set', 'eth1', 'up']);
  const peers = Array.from({ length: PEERS }, (_, i) => peer(i));
  // twill's IPv4 routes carry their destination's block number as metric (peer-entries.ts): the
  // same entries, so the same metrics
  const metric = (p: PeerSpec): string =>
    `metric ${routeMetric(parseCidr(p.subnet, { strict: true }) as Cidr)}`;
  const sh = (file: string, input: string): Promise<unknown> =>
    nsRun(ns, [file, '-batch', '-'], { input, timeoutMs: 60_000 });
  const started = performance.now();
  if (dualStack) await rawBatch6(sh, backend, peers);
  const ms6 = performance.now() - started;
  if (backend === 'vxlan') {
    await sh(
      'ip',
      [
        'link add twill.1 mtu 1450 type vxlan id 1 local 172.16.0.2 dev eth0 dstport 8472 nolearning',
        'link set twill.1 up',
        ...peers.map(
          (p) =>
            `neigh replace ${p.subnet.replace('/24', '')} lladdr ${p.mac} dev twill.1 nud permanent`,
        ),
        '',
      ].join('\n'),
    );
    await sh(
      'bridge',
      `${peers.map((p) => `fdb append ${p.mac} dev twill.1 dst ${p.ip} self permanent`).join('\n')}\n`,
    );
    await sh(
      'ip',
      `${peers.map((p) => `route add ${p.subnet} via ${p.subnet.replace('/24', '')} dev twill.1 onlink proto ${ROUTE_PROTOCOL} ${metric(p)}`).join('\n')}\n`,
    );
  } else {
    await sh(
      'ip',
      `${peers.map((p) => `route add ${p.subnet} via ${p.ip} dev eth0 proto ${ROUTE_PROTOCOL} ${metric(p)}`).join('\n')}\n`,
    );
  }
  return { ms: performance.now() - started, ms6 };
}

/** The IPv6 half of the raw yardstick: the entries twill makes for IPv6 peers. */
async function rawBatch6(
  sh: (file: string, input: string) => Promise<unknown>,
  backend: string,
  peers: readonly PeerSpec[],
): Promise<void> {
  const gw = (p: PeerSpec): string => p.subnet6.replace('/64', '');
  if (backend !== 'vxlan') {
    await sh(
      'ip',
      `${peers.map((p) => `route add ${p.subnet6} via ${p.ip6} dev eth0 proto ${ROUTE_PROTOCOL}`).join('\n')}\n`,
    );
    return;
  }
  await sh(
    'ip',
    [
      'link add twill-v6.1 mtu 1430 type vxlan id 1 local fd00:172:16::2 dev eth0 dstport 8472 nolearning',
      'link set twill-v6.1 up',
      ...peers.map((p) => `neigh replace ${gw(p)} lladdr ${p.mac6} dev twill-v6.1 nud permanent`),
      '',
    ].join('\n'),
  );
  await sh(
    'bridge',
    `${peers.map((p) => `fdb append ${p.mac6} dev twill-v6.1 dst ${p.ip6} self permanent`).join('\n')}\n`,
  );
  await sh(
    'ip',
    `${peers.map((p) => `route add ${p.subnet6} via ${gw(p)} dev twill-v6.1 onlink proto ${ROUTE_PROTOCOL}`).join('\n')}\n`,
  );
}

/** Every peer's routes in the kernel: IPv4, and IPv6 too on a dual-stack node. */
async function allRoutes(n: Node): Promise<boolean> {
  if ((await ownedRoutes(n.ns)) !== PEERS) return false;
  return !n.dualStack || (await ownedRoutes(n.ns, '-6')) === PEERS;
}

/**
 * One cold start's times (ms since the spawn): every route in, the first pass done (the
 * masquerade too), the programming alone (the pass; with routes written early, their batches
 * from the first route sent), our lease.
 */
interface ColdStart {
  readonly fromStartMs: number;
  readonly passDoneMs: number;
  readonly passMs: number;
  readonly leaseMs: number;
}

/** A cold start's writers in its log: the routes written early (host-gw), the first pass. */
interface Writers {
  readonly early: LogLine | undefined;
  /** the line that brought the routes added to every route */
  readonly entries: LogLine;
  /** the first pass's line, at or after `entries` */
  readonly pass: LogLine;
}

/**
 * The log lines that wrote every route (host-gw's routes written early count with the first
 * pass's), once the first pass has logged too.
 */
function writers(lines: readonly LogLine[], routes: number): Writers | undefined {
  let added = 0;
  let entries: LogLine | undefined;
  const early = lines.find((l) => l.msg === 'dataplane written early');
  for (const l of lines) {
    if (l.msg !== 'dataplane written early' && l.msg !== 'dataplane updated') continue;
    added += l.ops?.['route add'] ?? 0;
    if (!entries && added >= routes) entries = l;
    if (entries && l.msg === 'dataplane updated') return { early, entries, pass: l };
  }
  return undefined;
}

/**
 * Process start → the pass that programmed every peer, from the daemon's own log (and checked in
 * the kernel); with host-gw, the routes written early count with the first pass's.
 */
async function coldConvergence(n: Node): Promise<ColdStart> {
  let wrote: Writers | undefined;
  let acquired: LogLine | undefined;
  const routes = n.dualStack ? 2 * PEERS : PEERS;
  const child = n.child;
  await waitFor(
    async () => {
      const lines = await logLines(n.log);
      wrote = writers(lines, routes);
      // the lease comes before any pass: the read that finds the pass holds its line
      acquired = lines.find((l) => l.msg === 'lease acquired');
      // a daemon that ended will not converge: say how, with its log's end, rather than wait
      if (!wrote && child && hasEnded(child))
        throw new Error(
          `bench: the daemon ended (${String(child.exitCode ?? child.signalCode)}) before converging; its log ends:\n${(await readFile(n.log, 'utf8').catch(() => '')).slice(-3000)}`,
        );
      return wrote !== undefined;
    },
    { timeoutMs: 120_000, what: 'cold convergence', everyMs: POLL_MS },
  ).catch(async (err: unknown) => {
    // what the passes did instead, for whoever reads a failed run
    const passes = (await logLines(n.log)).filter((l) => l.msg === 'dataplane updated');
    throw new Error(
      `${err instanceof Error ? err.message : String(err)}; the daemon's passes: ${JSON.stringify(passes.map((l) => l.ops)).slice(0, 2000)}`,
    );
  });
  await waitFor(() => allRoutes(n), {
    timeoutMs: 10_000,
    what: 'every route in the kernel',
    everyMs: POLL_MS,
  });
  if (!acquired) throw new Error(`bench: no "lease acquired" line in ${n.log}`);
  if (!wrote) throw new Error(`bench: no cold start's writers in ${n.log}`);
  const { early, entries, pass } = wrote;
  return {
    fromStartMs: entries.time - n.spawnedAt,
    passDoneMs: pass.time - n.spawnedAt,
    passMs: early ? (early.writeMs ?? 0) : (pass.durationMs ?? 0),
    leaseMs: acquired.time - n.spawnedAt,
  };
}

const START_RUNS = 5;

/**
 * Cold starts per row, and raw batches: one machine's speed moves 10-20 % from minute to minute, so
 * a single sample of either decides a 1.5x target by chance. The cold row and its yardstick are
 * each the median of this many (5 since 2026-11-29: with 3, one slow start of the three moved a
 * row by 60 ms or more, as host-gw in nftables mode's 626, 567, 605 ms that day).
 */
const COLD_RUNS = 5;
const RAW_NAME = `raw ip -batch, median of ${COLD_RUNS}`;

/**
 * Makes the node cold again for the next cold start: the daemon stopped, its kernel state removed
 * by the product's own uninstall step (`twill run --cleanup`), its lease deleted from etcd and its
 * subnet.env removed, as on a node that never ran twill; then the daemon started again.
 */
async function coldAgain(n: Node, peerKeys: ReadonlySet<string>): Promise<void> {
  if (n.child) await stopProcess(n.child);
  await nsRun(n.ns, [...(await twillCommand()), 'run', '--cleanup', '--node-name', 'bench'], {
    timeoutMs: 120_000,
  });
  const ctl = ['etcdctl', '--endpoints', n.etcd.endpoint];
  const prefix = `${ETCD_PREFIX}/subnets/`;
  const keys = await sh(n.etcdNs, [...ctl, 'get', '--prefix', '--keys-only', prefix]);
  for (const key of keys.split('\n').filter(Boolean))
    if (!peerKeys.has(key.slice(prefix.length))) await sh(n.etcdNs, [...ctl, 'del', key]);
  await rm(join(n.dir, 'subnet.env'), { force: true });
  await startTwill(n);
}

/** Median spawn -> exit of a bare Node and of `twill --version`, in `ns`, with twill's flags. */
async function startFloorMs(ns: string): Promise<{ node: number; twill: number }> {
  const command = await twillCommand();
  const median = async (argv: string[]): Promise<number> => {
    const times: number[] = [];
    for (let i = 0; i < START_RUNS; i++) {
      const t = performance.now();
      await nsRun(ns, argv, { timeoutMs: 30_000 });
      times.push(performance.now() - t);
    }
    return times.sort((a, b) => a - b)[Math.floor(START_RUNS / 2)] ?? 0;
  };
  const nodeOnly = [...command.slice(0, -1), '-e', '0'];
  return { node: await median(nodeOnly), twill: await median([...command, '--version']) };
}

/** Where twill keeps its masquerade: iptables chains, or (EnableNFTables) its own nft tables. */
type MasqMode = 'iptables' | 'nftables';

interface Drift {
  readonly name: string;
  readonly backends: readonly string[];
  /** an IPv6 entry: run on the dual-stack node (and only there) */
  readonly ipv6?: boolean;
  /**
   * a break of the masquerade as this mode keeps it, run on a node in that mode only; absent: a
   * kernel entry, the same code in both modes, run in iptables mode
   */
  readonly masq?: MasqMode;
  /**
   * the whole device goes: its repair writes every entry of its family again, which the raw
   * batch of those entries measures (the row's yardstick)
   */
  readonly wholeDevice?: boolean;
  /** the commands that break it (a function: they depend on the node's state, as a handle) */
  readonly breakIt: string[][] | ((ns: string) => Promise<string[][]>);
  readonly healthy: (ns: string) => Promise<boolean>;
}

const P0 = peer(7);
const MASQ_OK = async (ns: string): Promise<boolean> => {
  const chain = await sh(ns, ['iptables', '-t', 'nat', '-S', 'TWILL-POSTRTG']).catch(() => '');
  const parent = await sh(ns, ['iptables', '-t', 'nat', '-S', 'POSTROUTING']).catch(() => '');
  return (
    chain.split('\n').filter((l) => l.startsWith('-A')).length === 6 &&
    parent.includes('-j TWILL-POSTRTG')
  );
};
const MASQ6_OK = async (ns: string): Promise<boolean> => {
  const chain = await sh(ns, ['ip6tables', '-t', 'nat', '-S', 'TWILL-POSTRTG']).catch(() => '');
  const parent = await sh(ns, ['ip6tables', '-t', 'nat', '-S', 'POSTROUTING']).catch(() => '');
  return (
    chain.split('\n').filter((l) => l.startsWith('-A')).length === 6 &&
    parent.includes('-j TWILL-POSTRTG')
  );
};
/** twill's IPv4 nft table in nftables mode (the agreed layout): chains postrtg and forward. */
const NFT_TABLE = ['ip', 'twill-ipv4'] as const;
/** postrtg holds the 6 masquerade rules (TWILL-POSTRTG's), forward its 2 accept rules. */
const NFT_OK = async (ns: string): Promise<boolean> => {
  const json = await sh(ns, ['nft', '-j', 'list', 'table', ...NFT_TABLE]).catch(() => '');
  if (json === '') return false;
  const items = (JSON.parse(json) as { nftables?: { rule?: { chain: string } }[] }).nftables;
  const rules = (chain: string): number =>
    (items ?? []).filter((i) => i.rule?.chain === chain).length;
  return rules('postrtg') === 6 && rules('forward') === 2;
};
/** nftables mode: the first masquerade rule of twill's postrtg chain deleted, by its handle. */
const nftMasqRuleDelete = async (ns: string): Promise<string[][]> => {
  const listing = await sh(ns, ['nft', '-a', 'list', 'chain', ...NFT_TABLE, 'postrtg']);
  const handle = /\bmasquerade\b.*# handle (\d+)/.exec(listing)?.[1];
  if (handle === undefined) throw new Error(`bench: no masquerade rule in ${NFT_TABLE.join(' ')}`);
  return [['nft', 'delete', 'rule', ...NFT_TABLE, 'postrtg', 'handle', handle]];
};
const GW6 = P0.subnet6.replace('/64', '');
const DRIFTS: Drift[] = [
  {
    name: 'IPv6 route deleted',
    backends: ['host-gw', 'vxlan'],
    ipv6: true,
    breakIt: [['ip', '-6', 'route', 'del', P0.subnet6]],
    healthy: async (ns) =>
      (await sh(ns, ['ip', '-6', 'route', 'show', P0.subnet6])).includes(`proto ${ROUTE_PROTOCOL}`),
  },
  {
    name: 'IPv6 neighbour deleted',
    backends: ['vxlan'],
    ipv6: true,
    breakIt: [['ip', '-6', 'neigh', 'del', GW6, 'dev', 'twill-v6.1']],
    healthy: async (ns) =>
      (await sh(ns, ['ip', '-6', 'neigh', 'show', GW6, 'dev', 'twill-v6.1'])).includes('PERMANENT'),
  },
  {
    name: 'IPv6 FDB entry deleted',
    backends: ['vxlan'],
    ipv6: true,
    breakIt: [['bridge', 'fdb', 'del', P0.mac6, 'dev', 'twill-v6.1', 'dst', P0.ip6, 'self']],
    healthy: async (ns) =>
      (await sh(ns, ['bridge', 'fdb', 'show', 'dev', 'twill-v6.1'])).includes(
        `${P0.mac6} dst ${P0.ip6}`,
      ),
  },
  {
    name: 'IPv6 vxlan device deleted',
    wholeDevice: true,
    backends: ['vxlan'],
    ipv6: true,
    breakIt: [['ip', 'link', 'del', 'twill-v6.1']],
    healthy: async (ns) => (await ownedRoutes(ns, '-6')) === PEERS,
  },
  {
    name: 'IPv6 MASQUERADE rule deleted',
    backends: ['host-gw', 'vxlan'],
    ipv6: true,
    masq: 'iptables',
    breakIt: [['ip6tables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '5']],
    healthy: MASQ6_OK,
  },
  {
    name: 'route deleted',
    backends: ['host-gw', 'vxlan'],
    breakIt: [['ip', 'route', 'del', P0.subnet]],
    healthy: async (ns) =>
      (await sh(ns, ['ip', 'route', 'show', P0.subnet])).includes(`proto ${ROUTE_PROTOCOL}`),
  },
  {
    name: 'neighbour deleted',
    backends: ['vxlan'],
    breakIt: [['ip', 'neigh', 'del', P0.subnet.replace('/24', ''), 'dev', 'twill.1']],
    healthy: async (ns) =>
      (
        await sh(ns, ['ip', 'neigh', 'show', P0.subnet.replace('/24', ''), 'dev', 'twill.1'])
      ).includes('PERMANENT'),
  },
  {
    name: 'FDB entry deleted',
    backends: ['vxlan'],
    breakIt: [['bridge', 'fdb', 'del', P0.mac, 'dev', 'twill.1', 'dst', P0.ip, 'self']],
    healthy: async (ns) =>
      (await sh(ns, ['bridge', 'fdb', 'show', 'dev', 'twill.1'])).includes(
        `${P0.mac} dst ${P0.ip}`,
      ),
  },
  {
    name: 'vxlan device deleted',
    wholeDevice: true,
    backends: ['vxlan'],
    breakIt: [['ip', 'link', 'del', 'twill.1']],
    healthy: async (ns) => (await ownedRoutes(ns)) === PEERS,
  },
  {
    name: 'MASQUERADE rule deleted',
    backends: ['host-gw', 'vxlan'],
    masq: 'iptables',
    breakIt: [['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '5']],
    healthy: MASQ_OK,
  },
  {
    name: 'nat table flushed',
    backends: ['host-gw', 'vxlan'],
    masq: 'iptables',
    breakIt: [['iptables', '-t', 'nat', '-F']],
    healthy: MASQ_OK,
  },
  {
    name: "twill's nft table deleted",
    backends: ['host-gw', 'vxlan'],
    masq: 'nftables',
    breakIt: [['nft', 'delete', 'table', ...NFT_TABLE]],
    healthy: NFT_OK,
  },
  {
    name: "twill's nft table flushed",
    backends: ['host-gw', 'vxlan'],
    masq: 'nftables',
    breakIt: [['nft', 'flush', 'table', ...NFT_TABLE]],
    healthy: NFT_OK,
  },
  {
    name: 'MASQUERADE rule deleted',
    backends: ['host-gw', 'vxlan'],
    masq: 'nftables',
    breakIt: nftMasqRuleDelete,
    healthy: NFT_OK,
  },
];

async function repairMs(n: Node, d: Drift): Promise<number> {
  const commands = typeof d.breakIt === 'function' ? await d.breakIt(n.ns) : d.breakIt;
  for (const cmd of commands) await sh(n.ns, cmd);
  const broken = performance.now();
  const brokenAt = Date.now();
  if (d.wholeDevice !== true) {
    await waitFor(() => d.healthy(n.ns), {
      timeoutMs: 10_000,
      what: `repair of ${d.name}`,
      everyMs: POLL_MS,
    });
    return performance.now() - broken;
  }
  // Every entry of the device comes back: listing 5,000 routes every 20 ms would take a core of
  // the two the repair runs on. The kernel is checked every 250 ms instead, and the repair's end
  // is the last pass that added routes since the break, from the daemon's log (as cold
  // convergence reads it).
  await waitFor(() => d.healthy(n.ns), {
    timeoutMs: 10_000,
    what: `repair of ${d.name}`,
    everyMs: 250,
  });
  const passes = (await logLines(n.log)).filter(
    (l) => l.time >= brokenAt && (l.ops?.['route add'] ?? 0) > 0,
  );
  const last = passes.at(-1);
  if (!last)
    throw new Error(`bench: ${d.name}: repaired, but no pass since the break added routes`);
  return last.time - brokenAt;
}

/** The daemon with no peers (Node + libraries floor), MiB; it is stopped after. */
async function floorMiB(n: Node): Promise<number> {
  await startTwill(n);
  await waitFor(async () => (await logLines(n.log)).some((l) => l.msg === 'dataplane updated'), {
    timeoutMs: 30_000,
    what: 'the daemon with no peers',
    everyMs: POLL_MS,
  });
  await new Promise((r) => setTimeout(r, 1000));
  const floor = await statusMiB(n.child?.pid);
  if (n.child) await stopProcess(n.child);
  await sh(n.ns, ['ip', 'link', 'del', `twill.1`]).catch(() => undefined);
  await sh(n.ns, ['ip', 'link', 'del', `twill-v6.1`]).catch(() => undefined);
  return floor;
}

/** RSS after convergence (1 s, settled, peak), the floor, and the growth per peer. */
async function memoryRows(
  n: Node,
  o: { floor: number; entries: string; label: string },
): Promise<BenchRow[]> {
  const { floor, entries, label } = o;
  const rows: BenchRow[] = [];
  await new Promise((r) => setTimeout(r, 1000));
  const early = await statusMiB(n.child?.pid);
  await new Promise((r) => setTimeout(r, SETTLE_MS - 1000));
  const rss = await statusMiB(n.child?.pid);
  const peak = await statusMiB(n.child?.pid, 'VmHWM');
  const growthKiB = ((rss - floor) * 1024) / PEERS;
  rows.push({
    suite: 'dataplane',
    figure: `daemon RSS at ${entries}, ${label} (settled: ${SETTLE_MS / 1000} s after convergence)`,
    value: Math.round(rss),
    unit: 'MiB',
    target: { text: `≤ ${RSS_TARGET_MIB} MiB`, met: rss <= RSS_TARGET_MIB },
  });
  rows.push({
    suite: 'dataplane',
    figure: `  the same, 1 s after convergence (start-up garbage not yet returned), ${label}`,
    value: Math.round(early),
    unit: 'MiB',
  });
  rows.push({
    suite: 'dataplane',
    figure: `  the same, peak (VmHWM, what a memory limit must allow), ${label}`,
    value: Math.round(peak),
    unit: 'MiB',
  });
  rows.push({
    suite: 'dataplane',
    figure: `  the same daemon with no peers (Node + libraries floor), ${label}`,
    value: Math.round(floor),
    unit: 'MiB',
  });
  rows.push({
    suite: 'dataplane',
    figure: `  growth per peer (settled RSS - floor) / ${PEERS}, ${label}`,
    value: Number(growthKiB.toFixed(1)),
    unit: 'KiB',
    target: { text: `≤ ${GROWTH_TARGET_KIB} KiB/peer`, met: growthKiB <= GROWTH_TARGET_KIB },
  });
  return rows;
}

/**
 * The node's network config (setupNode's) with flannel's `"EnableNFTables": true`: twill in
 * nftables mode. Before the daemon starts (it reads the config once).
 */
export async function enableNftables(n: Node): Promise<void> {
  const ctl = ['etcdctl', '--endpoints', n.etcd.endpoint];
  const key = `${ETCD_PREFIX}/config`;
  const text = await sh(n.etcdNs, [...ctl, 'get', '--print-value-only', key]);
  if (text.trim() === '') throw new Error(`bench: no network config at ${key}`);
  const config = JSON.parse(text) as Record<string, unknown>;
  await sh(n.etcdNs, [...ctl, 'put', key, JSON.stringify({ ...config, EnableNFTables: true })]);
}

/**
 * One node's rows: iptables mode (the default) gives them all; nftables mode (`nftables`)
 * gives cold convergence and the repairs of its own table, the rows that differ from iptables
 * mode (its memory and the kernel entries' repairs are the same code, measured there).
 */
async function backendRows(
  backend: string,
  o: { dualStack?: boolean; nftables?: boolean } = {},
): Promise<BenchRow[]> {
  const dualStack = o.dualStack === true;
  const mode: MasqMode = o.nftables === true ? 'nftables' : 'iptables';
  const rows: BenchRow[] = [];
  const name = `bench-${backend}${dualStack ? '-ds' : ''}${mode === 'nftables' ? '-nft' : ''}`;
  const n = await setupNode({ backend, name, dualStack });
  // the dual-stack and nftables rows say so; the IPv4 rows in iptables mode keep their names
  const label = `${dualStack ? `dual-stack ${backend}` : backend}${mode === 'nftables' ? ' in nftables mode' : ''}`;
  const entries = dualStack ? `${PEERS} dual-stack peers` : `${PEERS} peers`;
  try {
    if (mode === 'nftables') await enableNftables(n);
    const floor = mode === 'iptables' ? await floorMiB(n) : undefined;
    await putLeases(n, PEERS);
    const peerKeys = new Set(
      Array.from({ length: PEERS }, (_, i) => (dualStack ? peer(i).dualKey : peer(i).key)),
    );
    const colds: ColdStart[] = [];
    for (let i = 0; i < COLD_RUNS; i++) {
      // every start as cold as the others: the floor's daemon left its lease and masquerade
      if (i > 0 || floor !== undefined) await coldAgain(n, peerKeys);
      else await startTwill(n);
      colds.push(await coldConvergence(n));
    }
    const fromStart = colds.map((c) => c.fromStartMs);
    const passes = colds.map((c) => c.passMs);
    const passDone = colds.map((c) => c.passDoneMs);
    const leases = colds.map((c) => c.leaseMs);
    const cold = {
      fromStartMs: percentile(fromStart, 50),
      passDoneMs: percentile(passDone, 50),
      passMs: percentile(passes, 50),
      leaseMs: percentile(leases, 50),
    };
    if (mode === 'nftables')
      await waitFor(() => NFT_OK(n.ns), {
        timeoutMs: 10_000,
        what: "twill's nft table",
        everyMs: POLL_MS,
      });
    const raws = [];
    for (let i = 0; i < COLD_RUNS; i++) {
      // each batch in a namespace of its own, gone before the next (and before the later rows)
      const rawLab = new NetnsLab();
      try {
        raws.push(await rawBatchMs(rawLab, backend, dualStack, i));
      } finally {
        await rawLab.destroy();
      }
    }
    const [rawMs, rawMs6] = [raws.map((r) => r.ms), raws.map((r) => r.ms6)];
    const [raw, raw6] = [percentile(rawMs, 50), percentile(rawMs6, 50)];
    // the samples behind the medians, for whoever wonders how far they spread
    process.stderr.write(
      `bench: ${label}: cold starts ${fromStart.map(Math.round).join(', ')} ms, first passes done at ${passDone.map(Math.round).join(', ')} ms, passes ${passes.map(Math.round).join(', ')} ms, leases acquired at ${leases.map(Math.round).join(', ')} ms, raw batches ${rawMs.map(Math.round).join(', ')} ms\n`,
    );
    rows.push({
      suite: 'dataplane',
      figure: `cold convergence, ${entries}, ${label} (process start → all entries, median of ${COLD_RUNS})`,
      value: Math.round(cold.fromStartMs),
      unit: 'ms',
      yardstick: { name: RAW_NAME, value: Math.round(raw) },
      target: {
        text: '≤ 1000 ms, ≤ 1.5× raw',
        met: cold.fromStartMs <= 1000 && cold.fromStartMs <= 1.5 * raw,
      },
    });
    // host-gw writes its routes before the first pass (early.ts), which then reads them back and
    // writes the masquerade: when it ends, as /readyz sees the start
    const early = backend === 'host-gw';
    if (early)
      rows.push({
        suite: 'dataplane',
        figure: `  process start → the first pass done (the routes read back, the masquerade written), ${label}, median of ${COLD_RUNS}`,
        value: Math.round(cold.passDoneMs),
        unit: 'ms',
        yardstick: { name: RAW_NAME, value: Math.round(raw) },
      });
    rows.push({
      suite: 'dataplane',
      figure: early
        ? `  the routes' batches alone (written early: the first route sent → every route in), ${label}, median of ${COLD_RUNS}`
        : `  the programming pass alone (observe, diff, apply), ${label}, median of ${COLD_RUNS}`,
      value: Math.round(cold.passMs),
      unit: 'ms',
      yardstick: { name: RAW_NAME, value: Math.round(raw) },
      target: { text: '≤ 1.5× raw', met: cold.passMs <= 1.5 * raw },
    });
    // where the start went before the pass: up to our lease (Node and twill loaded, the interface
    // chosen, the store's listing of every peer decoded, our lease written), from the daemon's log
    rows.push({
      suite: 'dataplane',
      figure: `  process start → our lease acquired (the peers' leases listed and decoded first), ${label}, median of ${COLD_RUNS}`,
      value: Math.round(cold.leaseMs),
      unit: 'ms',
    });
    // the floor under process start -> all entries: what starting Node, and loading twill's
    // bundle, cost before twill does anything (same flags, same namespace, same run)
    const starts = await startFloorMs(n.ns);
    rows.push({
      suite: 'dataplane',
      figure: `  floor: Node's own start (spawn → exit of an empty script, median of ${START_RUNS}), ${label}`,
      value: Math.round(starts.node),
      unit: 'ms',
    });
    rows.push({
      suite: 'dataplane',
      figure: `  floor: Node + twill's code loaded (spawn → exit of twill --version, median of ${START_RUNS}), ${label}`,
      value: Math.round(starts.twill),
      unit: 'ms',
    });
    // what a daemon that did nothing but start and write the raw batch would take: the cold row's
    // floor, and how much of 1.5x raw it leaves to the store, the lease and the kernel's reading
    rows.push({
      suite: 'dataplane',
      figure: `  floor: Node + twill's code loaded + the raw batch, ${label}`,
      value: Math.round(starts.twill + raw),
      unit: 'ms',
      yardstick: { name: RAW_NAME, value: Math.round(raw) },
    });
    if (floor !== undefined) rows.push(...(await memoryRows(n, { floor, entries, label })));
    // the IPv4 repairs on the IPv4 node, the IPv6 ones on the dual-stack node
    const drifts = DRIFTS.filter(
      (x) =>
        x.backends.includes(backend) &&
        (x.ipv6 === true) === dualStack &&
        (x.masq ?? 'iptables') === mode,
    );
    for (const d of drifts) {
      const ms = await repairMs(n, d);
      // a device's entries are those of its family alone: the IPv6 half on a dual-stack node
      const deviceRaw = d.wholeDevice === true ? (d.ipv6 === true ? raw6 : raw) : undefined;
      rows.push({
        suite: 'dataplane',
        figure: `drift repair: ${d.name}, ${label}, ${entries}`,
        value: Math.round(ms),
        unit: 'ms',
        ...(deviceRaw === undefined
          ? {}
          : { yardstick: { name: 'raw ip -batch of its entries', value: Math.round(deviceRaw) } }),
        target: { text: '≤ 1000 ms', met: ms <= 1000 },
      });
      await new Promise((r) => setTimeout(r, 300));
    }
  } finally {
    if (process.env.TWILL_BENCH_KEEP_LOG) await run('cp', [n.log, `/tmp/${name}.log`]);
    await stopNode(n);
  }
  return rows;
}

export const dataplaneSuite: BenchSuite = {
  name: 'dataplane',
  async run() {
    await sweepStaleNetns();
    return [
      ...(await backendRows('host-gw')),
      ...(await backendRows('vxlan')),
      ...(await backendRows('host-gw', { nftables: true })),
      ...(await backendRows('vxlan', { nftables: true })),
      ...(await backendRows('host-gw', { dualStack: true })),
      ...(await backendRows('vxlan', { dualStack: true })),
    ];
  },
};
