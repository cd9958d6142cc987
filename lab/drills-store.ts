// Drills that break the lease store or the membership: a node's own lease
// deleted, etcd stopped for a minute, etcd wiped, hostile leases put in
// etcd, a node removed (all five
// etcd only), a node added, twenty nodes started at once (both stores), the
// etcd leader killed in a three-member cluster (etcd, `up --etcd-members 3`).
import { readFile } from 'node:fs/promises';
import { pause } from '../src/util/abort.ts';
import { etcdctl } from './cluster.ts';
import { DEFAULT_DELETE_LINGER_MS } from '../src/lease/tracker.ts';
import type { Cluster } from './cluster.ts';
import {
  BOTH_STORES,
  goneNode,
  ownRoutes,
  churn,
  leftovers,
  logCount,
  nextNames,
  podsPerNode,
  steadyPing,
  stillSince,
  type Drill,
} from './drill-kit.ts';
import { connectivity, untilFull } from './matrix.ts';
import { timeGoneFromPeers } from './kernel-watch.ts';
import { firstLogTime, passesBetween, renderStages } from './pass-log.ts';
import { backendOf, isLeaseOf, leaseOf, leases, subnetsOf, type LeaseView } from './store-view.ts';
import { SLOW_MACHINE_FACTOR, until } from './kit/wait.ts';

const ETCD_OUTAGE_MS = 60_000;

const HOSTILE_KINDS = ['loopback', 'inNetwork', 'nodeIp', 'junk'] as const;
type HostileKeys = Record<(typeof HOSTILE_KINDS)[number], string>;

/**
 * Keys for the hostile leases among the lab Network's /24s that no node
 * holds (`held`: the leased IPv4 subnets, "10.244.3.0/24"): a fixed choice
 * would sometimes be a real node's subnet, and the drill would overwrite
 * (then delete) that node's own lease — or, on a dual-stack lab, whose keys
 * also name the IPv6 subnet, sit beside it, so that the node's peers rightly
 * route the subnet the drill expects refused.
 */
export function hostileKeys(held: readonly (string | null)[]): HostileKeys {
  const free: string[] = [];
  for (let x = 254; x > 0 && free.length < HOSTILE_KINDS.length; x--) {
    if (!held.includes(`10.244.${x}.0/24`)) free.push(`10.244.${x}.0-24`);
  }
  const [loopback, inNetwork, nodeIp, junk] = free;
  if (
    loopback === undefined ||
    inNetwork === undefined ||
    nodeIp === undefined ||
    junk === undefined
  )
    throw new Error('no free subnets for the hostile leases');
  return { loopback, inNetwork, nodeIp, junk };
}

/** A key's subnet as routes show it: "10.244.200.0-24" → "10.244.200.0/24". */
const subnetOf = (key: string): string => key.replace(/-(\d+)$/, '/$1');

const hostileLease: Drill = {
  name: 'hostile-lease',
  broke:
    "leases put straight into etcd: PublicIP 127.0.0.1, PublicIP inside the pod Network, a node's own PublicIP, a value that is not JSON",
  targetMs: 2_000,
  stores: ['etcd'],
  async run(c) {
    const nodes = await c.nodes();
    const first = nodes[0];
    if (!first) throw new Error('no nodes');
    const vxlan = (ip: string, n: number): string =>
      JSON.stringify({
        PublicIP: ip,
        BackendType: 'vxlan',
        BackendData: { VNI: 1, VtepMAC: `7e:66:00:00:00:${n.toString(16).padStart(2, '0')}` },
      });
    const put = (key: string, value: string): Promise<string> =>
      etcdctl(c, ['put', `${c.etcdPrefix}/subnets/${key}`, value]);
    const HOSTILE = hostileKeys((await leases(c)).map((l) => l.subnet));
    // the drill may run again on the same lab: read only what this run logs
    const logStart = new Map(
      await Promise.all(
        nodes.map(async (n) => [n.name, (await c.twillLog(n.name)).length] as const),
      ),
    );
    const freshLog = async (node: string): Promise<string> =>
      (await c.twillLog(node)).slice(logStart.get(node) ?? 0);
    const since = performance.now();
    await put(HOSTILE.loopback, vxlan('127.0.0.1', 1));
    await put(HOSTILE.inNetwork, vxlan('10.244.9.9', 2));
    await put(HOSTILE.nodeIp, vxlan(first.ip, 3));
    await put(HOSTILE.junk, `{"PublicIP": ${'9'.repeat(3000)}`);
    try {
      // every node refuses the three it must (the first node the fourth too: its own address), and
      // logs it once
      const refusedBy = async (node: string, keys: readonly string[]): Promise<boolean> => {
        const log = await freshLog(node);
        return keys.every(
          (k) => log.includes(`"key":"${k}"`) && log.includes('skipping invalid peer lease'),
        );
      };
      const must = (name: string): string[] => [
        HOSTILE.loopback,
        HOSTILE.inNetwork,
        HOSTILE.junk,
        ...(name === first.name ? [HOSTILE.nodeIp] : []),
      ];
      const healedMs = await until(
        async () =>
          (await Promise.all(nodes.map((n) => refusedBy(n.name, must(n.name))))).every(Boolean),
        { timeoutMs: SLOW_MACHINE_FACTOR * 2_000, since, everyMs: 50 },
      );
      const notes = [
        `refused and logged on every node ${Math.round(healedMs ?? -1)} ms after the puts`,
      ];
      let ok = healedMs !== undefined;
      for (const n of nodes) {
        const routes = await ownRoutes(c, n.name);
        const stray = must(n.name)
          .map(subnetOf)
          .filter((s) => routes.some((r) => r.startsWith(`${s} `)));
        if (stray.length > 0) {
          ok = false;
          notes.push(`${n.name} routes a refused subnet: ${stray.join(', ')}`);
        }
        const lines = (await freshLog(n.name))
          .split('\n')
          .filter((l) => l.includes('skipping invalid peer lease') && l.includes(HOSTILE.junk));
        if (lines.length !== 1 || lines.some((l) => l.length > 1_000)) {
          ok = false;
          notes.push(
            `${n.name} logged the junk value ${lines.length} times, longest line ${Math.max(0, ...lines.map((l) => l.length))} characters (want once, truncated)`,
          );
        }
      }
      const m = await connectivity(c);
      if (m.failures.length > 0) {
        ok = false;
        notes.push(`with the hostile leases in place: ${m.failures.join(', ')}`);
      } else
        notes.push(
          'every pod still reaches every pod and outside with the hostile leases in place',
        );
      return { healedMs, ok, notes };
    } finally {
      for (const key of Object.values(HOSTILE))
        await etcdctl(c, ['del', `${c.etcdPrefix}/subnets/${key}`]).catch(() => '');
    }
  },
};

const ownLeaseDeleted: Drill = {
  name: 'own-lease',
  broke: "a node's own lease deleted",
  targetMs: 2_000,
  stores: ['etcd'],
  async run(c) {
    const [node, other] = await c.nodes();
    const pods = await c.pods();
    const [to, from] = [
      pods.find((p) => p.node === node?.name),
      pods.find((p) => p.node === other?.name),
    ];
    const before = await leaseOf(c, node);
    const ping = steadyPing(c, { from: from?.name ?? '', to: to?.ip ?? '', ms: 3_000 });
    await pause(300);
    const since = performance.now();
    await etcdctl(c, ['del', `${c.etcdPrefix}/subnets/${before?.key ?? ''}`]);
    const healedMs = await until(async () => (await leaseOf(c, node))?.key === before?.key, {
      timeoutMs: 10_000,
      since,
      everyMs: 20,
    });
    const stats = await ping;
    const notes = [
      `${node?.name} took ${before?.key} back in ${Math.round(healedMs ?? -1)} ms; steady ping ${from?.name} → ${to?.name}: ${stats.received}/${stats.sent}`,
    ];
    return { healedMs, ok: healedMs !== undefined && stats.received === stats.sent, notes };
  },
};

const etcdOutage: Drill = {
  name: 'etcd-outage',
  broke: `etcd stopped for ${ETCD_OUTAGE_MS / 1000} s`,
  targetMs: 30_000,
  stores: ['etcd'],
  async run(c) {
    const still = await stillSince(c);
    const connected = await Promise.all(
      (await c.nodes()).map((n) => logCount(c, n.name, 'lease store connected')),
    );
    await c.stopEtcd();
    await pause(ETCD_OUTAGE_MS / 2);
    const during = await connectivity(c);
    await pause(ETCD_OUTAGE_MS / 2);
    const since = performance.now();
    await c.startEtcd({ wipe: false });
    const nodes = await c.nodes();
    const healedMs = await until(
      async () =>
        (
          await Promise.all(
            nodes.map((n, i) =>
              logCount(c, n.name, 'lease store connected').then((k) => k > (connected[i] ?? 0)),
            ),
          )
        ).every(Boolean),
      { timeoutMs: 30_000, since, everyMs: 100 },
    );
    const s = await still();
    const notes = [
      `matrix while etcd was down: ${during.failures.length === 0 ? 'full' : during.failures.join(', ')}`,
      s.note,
      `every twill reconnected ${Math.round(healedMs ?? -1)} ms after etcd came back`,
    ];
    return {
      healedMs,
      ok: healedMs !== undefined && s.unchanged && s.quiet && during.failures.length === 0,
      notes,
    };
  },
};

const etcdWipe: Drill = {
  name: 'etcd-wipe',
  broke: 'etcd wiped, restarted empty, config put back',
  targetMs: 5_000,
  stores: ['etcd'],
  async run(c) {
    const before = await leases(c);
    const config = await etcdctl(c, ['get', '--print-value-only', `${c.etcdPrefix}/config`]);
    const passes = await churn(c);
    await c.stopEtcd();
    const since = performance.now();
    await c.startEtcd({ wipe: true });
    await etcdctl(c, ['put', `${c.etcdPrefix}/config`, config.trim()]);
    const same = async (): Promise<boolean> => {
      const now = await leases(c);
      return (
        before.every((b) => now.some((l) => l.key === b.key && l.publicIp === b.publicIp)) &&
        (await leftovers(c)).length === 0
      );
    };
    const healedMs = await until(same, { timeoutMs: 30_000, since, everyMs: 100 });
    const quiet = (await churn(c)) === passes;
    const notes = [
      `every node holds its old subnet and every peer's entries ${Math.round(healedMs ?? -1)} ms after etcd came back empty`,
      quiet ? 'no dataplane pass changed anything' : 'some dataplane passes changed entries',
    ];
    return { healedMs, ok: healedMs !== undefined, notes };
  },
};

const nodeRemoved: Drill = {
  name: 'node-removed',
  broke: 'a node removed (twill stopped, its lease deleted)',
  targetMs: 1_000,
  stores: ['etcd'],
  async run(c) {
    const victim = (await c.nodes()).at(-1);
    const lease = await leaseOf(c, victim);
    if (!victim || !lease)
      throw new Error(`no node with a lease to remove (last node ${victim?.name ?? '-'})`);
    await c.removeNode(victim.name);
    const del = (): Promise<string> => etcdctl(c, ['del', `${c.etcdPrefix}/subnets/${lease.key}`]);
    return timeGoneFromPeers(c, {
      victim: goneNode(victim, lease),
      remove: del,
      what: 'etcdctl del',
      graceMs: DEFAULT_DELETE_LINGER_MS,
    });
  },
};

const nodeAdded: Drill = {
  name: 'node-added',
  broke: 'a node added to the running lab',
  targetMs: 2_000,
  stores: BOTH_STORES,
  async run(c) {
    const [name] = await nextNames(c, 1);
    const perNode = await podsPerNode(c);
    const peers = (await c.nodes()).map((n) => n.name);
    const [since, epoch] = [performance.now(), Date.now()];
    await c.addNodes([name ?? 'n99'], perNode);
    const wiredMs = performance.now() - since;
    // 0.1 s pings: a failed round then costs 0.1 s of lateness, not 0.3 (a reply inside the lab
    // takes well under 1 ms)
    const healedMs = await untilFull(c, SLOW_MACHINE_FACTOR * 2_000, since, { timeoutS: 0.1 });
    const notes = [
      `${name} started, its ${perNode} pods wired and reachable from every pod in ${Math.round(healedMs ?? -1)} ms`,
    ];
    // where the time went: the new twill's start-up, the lab wiring its pods, the peers' passes,
    // the matrix
    const at = async (node: string, msg: string): Promise<string> => {
      const t = firstLogTime(await c.twillLog(node), msg, epoch);
      return t === undefined ? 'never' : `+${Math.round(t - epoch)} ms`;
    };
    const own = name ?? 'n99';
    notes.push(
      `stages: ${own} twill starting ${await at(own, 'twill starting')}, lease acquired ${await at(own, 'lease acquired')}, its first pass ${await at(own, 'dataplane updated')}; pods wired (the lab's CNI calls) +${Math.round(wiredMs)} ms`,
    );
    for (const p of peers)
      notes.push(
        ...renderStages(
          passesBetween(await c.twillLog(p), epoch, epoch + (healedMs ?? 0)),
          epoch,
        ).map((l) => `${p}: ${l}`),
      );
    return { healedMs, ok: healedMs !== undefined, notes };
  },
};

const twentyNodes: Drill = {
  name: 'twenty-nodes',
  broke: '20 nodes started at once',
  targetMs: 90_000,
  stores: BOTH_STORES,
  async run(c) {
    const tooSmall = await neighbourTableTooSmall(c, (await c.nodes()).length + 20);
    if (tooSmall !== undefined) return { healedMs: undefined, ok: true, notes: [tooSmall] };
    const names = await nextNames(c, 20);
    const since = performance.now();
    await c.addNodes(names, 1);
    const bound = SLOW_MACHINE_FACTOR * 90_000;
    // every node's routes first (one `ip route` a node a round), then the 700-ping matrix: polling
    // the matrix
    // while 23 daemons converge would take the CPU they converge with
    await until(() => everyNodeRoutesEveryLease(c), { timeoutMs: bound, since, everyMs: 500 });
    const healedMs = await untilFull(
      c,
      Math.max(30_000, bound - (performance.now() - since)),
      since,
    );
    const all = await leases(c);
    const nodes = await c.nodes();
    const duplicates = duplicateSubnets(all);
    const missing = nodes.filter((n) => !all.some((l) => isLeaseOf(l, n))).map((n) => n.name);
    const notes = [
      `${nodes.length} nodes, ${all.length} leases, ${duplicates} duplicate subnets, full matrix in ${Math.round(healedMs ?? -1)} ms`,
    ];
    if (missing.length > 0) notes.push(`nodes without a lease: ${missing.join(', ')}`);
    if (healedMs === undefined) {
      // what never converged, for whoever reads a failed run
      const gaps = await routesMissing(c);
      if (gaps.length > 0)
        notes.push(
          `routes never made (${gaps.length}): ${firstOf(gaps, 10)}; see each node's twill log for the failed route add`,
        );
      const failed = (await connectivity(c)).failures;
      if (failed.length > 0)
        notes.push(`pings that fail (${failed.length}): ${firstOf(failed, 20)}`);
    }
    if (healedMs !== undefined)
      notes.push(
        await idleCpu(
          c,
          nodes.map((n) => n.name),
        ),
      );
    // leave the lab as it was: the twenty go, with their leases (kube: removeNode deletes the Node)
    for (const name of names) {
      const lease = await leaseOf(
        c,
        nodes.find((n) => n.name === name),
      );
      await c.removeNode(name);
      if (lease && c.store === 'etcd')
        await etcdctl(c, ['del', `${c.etcdPrefix}/subnets/${lease.key}`]);
    }
    return {
      healedMs,
      ok: healedMs !== undefined && duplicates === 0 && missing.length === 0,
      notes,
    };
  },
};

/**
 * How many leases share a subnet with another, each family apart (an IPv6-only lease has no IPv4
 * subnet: its null is no duplicate).
 */
export function duplicateSubnets(all: readonly LeaseView[]): number {
  const extra = (subnets: readonly string[]): number => subnets.length - new Set(subnets).size;
  return (
    extra(all.flatMap((l) => (l.subnet === null ? [] : [l.subnet]))) +
    extra(all.flatMap((l) => (l.subnet6 === undefined ? [] : [l.subnet6])))
  );
}

/**
 * "n/a: …" when a lab of `nodes` nodes whose nodes talk to each other over IPv6 cannot fit this
 * machine's IPv6 neighbour table: a host-gw lab with IPv6 (dual-stack or IPv6-only), or a vxlan
 * lab that is IPv6-only (its tunnels run over the nodes' IPv6 addresses). The kernel keeps one
 * table for all network namespaces (gc_thresh3, 1,024 entries by default, counts them all), and
 * there every node resolves every peer's IPv6 address twice: its global one, and the link-local
 * one its peer solicits from when it re-confirms a stale entry; so does each for the lab's router,
 * and the router for each node. 24 nodes need about 2 × 24 × 25 = 1,200 entries (1,567 were
 * counted, 1,025 of them not permanent, at gc_thresh3 1,024): the table overflows ("neighbor
 * table overflow" in the kernel log), and packets wait on neighbours that are never made (a lab
 * artifact: a real node has the table to itself; vxlan's permanent entries for the pod side are
 * not counted). The drill says so, and changes nothing on the host.
 */
export function neighbourBudget(
  lab: { readonly outsideIp6?: string; readonly ipv6Only?: boolean },
  backend: string,
  nodes: number,
): number | undefined {
  if (lab.outsideIp6 === undefined) return undefined;
  if (backend !== 'host-gw' && lab.ipv6Only !== true) return undefined;
  // each node: its peers and the router, twice; the router: each node, twice
  return 2 * nodes * (nodes - 1) + 2 * nodes + 2 * nodes;
}

async function neighbourTableTooSmall(c: Cluster, nodes: number): Promise<string | undefined> {
  const backend = await backendOf(c);
  const need = neighbourBudget(c, backend, nodes);
  if (need === undefined) return undefined;
  const file = '/proc/sys/net/ipv6/neigh/default/gc_thresh3';
  const limit = Number((await readFile(file, 'utf8').catch(() => '')).trim());
  if (!Number.isFinite(limit) || limit >= need) return undefined;
  const over =
    backend === 'host-gw'
      ? `${nodes} host-gw nodes with IPv6`
      : `${nodes} vxlan nodes over IPv6 alone`;
  return `n/a: ${over} need about ${need} IPv6 neighbour entries in this machine's one shared table, and ${file} is ${limit} (raise it with sysctl -w net.ipv6.neigh.default.gc_thresh3=${need * 2} to run this drill here)`;
}

/**
 * True when every node holds a route (twill's protocol) to every other node's leased subnets,
 * each family the lease has.
 */
export async function everyNodeRoutesEveryLease(c: Cluster): Promise<boolean> {
  return (await routesMissing(c)).length === 0;
}

/** "node → subnet" for each leased subnet a node holds no route (twill's protocol) to. */
async function routesMissing(c: Cluster): Promise<string[]> {
  const [nodes, all] = await Promise.all([c.nodes(), leases(c)]);
  const missing: string[] = [];
  for (const n of nodes) {
    const want = all.filter((l) => !isLeaseOf(l, n)).flatMap(subnetsOf);
    const have = await ownRoutes(c, n.name);
    for (const w of want)
      if (!have.some((r) => r.startsWith(`${w} `))) missing.push(`${n.name} → ${w}`);
  }
  return missing;
}

/** The first `n` of `items`, comma-separated, with "…" when there are more. */
const firstOf = (items: readonly string[], n: number): string =>
  `${items.slice(0, n).join(', ')}${items.length > n ? ', …' : ''}`;

/** How long the idle daemons are watched, after a short settle. */
const IDLE_WINDOW_MS = 10_000;

/**
 * Each twill's CPU over IDLE_WINDOW_MS of a converged, untouched lab (% of one core, with what it
 * spawned).
 */
async function idleCpu(c: Cluster, nodes: readonly string[]): Promise<string> {
  await pause(2_000);
  const sample = (): Promise<(number | undefined)[]> =>
    Promise.all(nodes.map((n) => c.twillCpuMs(n)));
  const [before, t0] = [await sample(), performance.now()];
  await pause(IDLE_WINDOW_MS);
  const [after, t1] = [await sample(), performance.now()];
  const pct = nodes
    .flatMap((_, i) => {
      const [a, b] = [before[i], after[i]];
      return a === undefined || b === undefined ? [] : [((b - a) / (t1 - t0)) * 100];
    })
    .sort((x, y) => x - y);
  if (pct.length === 0) return 'idle CPU: not measurable here';
  const f = (x: number | undefined): string => `${(x ?? 0).toFixed(2)} %`;
  const sum = pct.reduce((x, y) => x + y, 0);
  return `idle CPU per twill over ${IDLE_WINDOW_MS / 1000} s (of one core, with the processes it spawned): median ${f(pct[Math.floor(pct.length / 2)])}, max ${f(pct.at(-1))}; all ${pct.length} together ${f(sum)}`;
}

/**
 * The etcd members of a lab that runs several (the netns lab's `up --etcd-members`,
 * netns-cluster.ts).
 */
interface EtcdMembers {
  readonly etcdMembers: number;
  etcdLeader(): Promise<number | undefined>;
  stopEtcdMember(k: number, how: 'term' | 'kill'): Promise<void>;
  startEtcdMember(k: number): Promise<void>;
}

const withMembers = (c: Cluster): (Cluster & EtcdMembers) | undefined =>
  'etcdLeader' in c && typeof (c as Partial<EtcdMembers>).etcdMembers === 'number'
    ? (c as Cluster & EtcdMembers)
    : undefined;

/** How long the steady ping runs across the leader's death (election included). */
const LEADER_LOSS_WATCH_MS = 10_000;

const etcdLeaderLoss: Drill = {
  name: 'etcd-leader-loss',
  broke:
    'the etcd leader of a three-member cluster killed (SIGKILL), then a node added, then the member started again',
  targetMs: 2_000,
  stores: ['etcd'],
  async run(c) {
    const m = withMembers(c);
    if (!m || m.etcdMembers < 3)
      return {
        healedMs: undefined,
        ok: true,
        notes: [
          `n/a: needs an etcd cluster of three members (npm run lab -- up --etcd-members 3); this lab has ${m?.etcdMembers ?? 1}`,
        ],
      };
    let leader: number | undefined;
    await until(async () => (leader = await m.etcdLeader()) !== undefined, {
      timeoutMs: 10_000,
      everyMs: 200,
    });
    if (leader === undefined) throw new Error('the etcd members do not agree on a leader');
    const nodes = await c.nodes();
    const pods = await c.pods();
    const [from, to] = [
      pods.find((p) => p.node === nodes[0]?.name),
      pods.find((p) => p.node === nodes[1]?.name),
    ];
    const before = await leases(c);
    const still = await stillSince(c);
    const count = (msg: string): Promise<number[]> =>
      Promise.all(nodes.map((n) => logCount(c, n.name, msg)));
    const [starts, renewFailed, unreachable] = [
      await count('twill starting'),
      await count('renewal failed; retrying'),
      await count('lease store unreachable; keeping the last known peers'),
    ];
    const ping = steadyPing(c, {
      from: from?.name ?? '',
      to: to?.ip ?? '',
      ms: LEADER_LOSS_WATCH_MS,
    });
    await pause(300);
    const killed = leader;
    const notes: string[] = [];
    try {
      const killedAt = performance.now();
      await m.stopEtcdMember(leader, 'kill');
      let next: number | undefined;
      const electedMs = await until(async () => (next = await m.etcdLeader()) !== undefined, {
        timeoutMs: 10_000,
        since: killedAt,
        everyMs: 100,
      });
      const stats = await ping;
      const after = await leases(c);
      const changed = before
        .filter((b) => !after.some((a) => a.key === b.key && a.publicIp === b.publicIp))
        .map((b) => b.key);
      const s = await still();
      const startsAfter = await count('twill starting');
      const again = nodes
        .filter((_, i) => (startsAfter[i] ?? 0) !== (starts[i] ?? 0))
        .map((n) => n.name);
      const sum = (xs: number[], base: number[]): number =>
        xs.reduce((t, x, i) => t + x - (base[i] ?? 0), 0);
      const failedRenewals = sum(await count('renewal failed; retrying'), renewFailed);
      const unreachableNow = sum(
        await count('lease store unreachable; keeping the last known peers'),
        unreachable,
      );
      notes.push(
        `killed etcd member ${leader} (the leader); member ${next ?? '?'} leads ${Math.round(electedMs ?? -1)} ms later`,
        `steady ping ${from?.name} → ${to?.name} over ${LEADER_LOSS_WATCH_MS / 1000} s: ${stats.received}/${stats.sent}`,
        changed.length === 0
          ? `every lease unchanged (${after.length})`
          : `leases changed or gone: ${changed.join(', ')}`,
        s.note,
        again.length === 0 ? 'no twill restarted' : `twill restarted on ${again.join(', ')}`,
        `twill logs since the kill: ${failedRenewals} failed renewals, ${unreachableNow} times the store unreachable`,
      );
      // a node added with a member down: its twill reaches a live member, its lease every node
      const [name = 'n99'] = await nextNames(c, 1);
      const since = performance.now();
      await c.addNodes([name], await podsPerNode(c));
      const healedMs = await untilFull(c, SLOW_MACHINE_FACTOR * 2_000, since, { timeoutS: 0.1 });
      notes.push(
        `${name} added after the kill: started, its pods wired and reachable from every pod in ${Math.round(healedMs ?? -1)} ms`,
      );
      // leave the lab as it was: the node goes with its lease, the member comes back with its data
      const added = (await c.nodes()).find((n) => n.name === name);
      const lease = await leaseOf(c, added);
      await c.removeNode(name);
      if (lease) await etcdctl(c, ['del', `${c.etcdPrefix}/subnets/${lease.key}`]);
      const ok =
        stats.sent > 0 &&
        stats.received === stats.sent &&
        changed.length === 0 &&
        s.unchanged &&
        again.length === 0 &&
        healedMs !== undefined;
      return { healedMs, ok, notes };
    } finally {
      // the member comes back with its data, whatever happened
      const back = performance.now();
      await m.startEtcdMember(killed);
      notes.push(
        `member ${killed} started again and healthy in ${Math.round(performance.now() - back)} ms`,
      );
    }
  },
};

export const STORE_DRILLS: readonly Drill[] = [
  ownLeaseDeleted,
  etcdOutage,
  etcdWipe,
  hostileLease,
  nodeRemoved,
  nodeAdded,
  twentyNodes,
  etcdLeaderLoss,
];
