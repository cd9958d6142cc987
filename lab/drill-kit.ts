// What drills are and observe, through the Cluster interface only: each
// node's owned kernel entries, the leftovers check (every node holds exactly
// one entry set per live peer and nothing else), a steady ping across an
// event, log counts, and names for new nodes. The leases come from
// store-view.ts, whichever the store.
import { ROUTE_PROTOCOL } from '../src/dataplane/model.ts';
import type { Cluster, LabMode } from './cluster.ts';
import { backendOf, leases } from './store-view.ts';

export interface DrillOutcome {
  /** ms until the drill's own recovery condition held (undefined: never, within the bound) */
  readonly healedMs: number | undefined;
  /**
   * it healed, and did what it must (no lost pings, same subnet…): the time is judged apart,
   * against the target
   */
  readonly ok: boolean;
  readonly notes: readonly string[];
}

export const BOTH_STORES: readonly LabMode[] = ['etcd', 'kube'];

export interface Drill {
  readonly name: string;
  readonly broke: string;
  /** the bound the time is held to, ms */
  readonly targetMs: number;
  /** only for this backend (others report "n/a") */
  readonly only?: 'vxlan';
  /** only on a dual-stack lab (`up --dual-stack`; others report "n/a") */
  readonly dualStackOnly?: boolean;
  /** the lab modes it applies to (`drill all` runs these; others report "n/a") */
  readonly stores: readonly LabMode[];
  /**
   * pods may get new addresses (their sandboxes are made anew); the runner then checks they stay in
   * their node's subnet
   */
  readonly podsRecreated?: boolean;
  run(c: Cluster): Promise<DrillOutcome>;
}

export interface Entries {
  /** both families */
  readonly routes: string[];
  /** on twill.1 */
  readonly neighs: string[];
  readonly fdb: string[];
  /** on twill-v6.1 (dual-stack vxlan) */
  readonly neighs6: string[];
  readonly fdb6: string[];
}

const lines = (t: string): string[] =>
  t
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .sort();

/** twill's IPv4 and IPv6 vxlan devices for the lab's VNI */
export const VXLAN_DEV = 'twill.1';
export const VXLAN6_DEV = 'twill-v6.1';

/**
 * A node's routes with twill's protocol, both families (two `ip route`s, cheap enough to poll),
 * sorted lines.
 */
export async function ownRoutes(c: Cluster, node: string): Promise<string[]> {
  const show = (family: string): Promise<string> =>
    c.sh({ node }, ['ip', family, 'route', 'show', 'table', 'main']).catch(() => '');
  const [v4, v6] = await Promise.all([show('-4'), show('-6')]);
  return lines(`${v4}\n${v6}`).filter((l) => l.includes(`proto ${ROUTE_PROTOCOL}`));
}

/**
 * A node's owned entries: routes with twill's protocol, permanent neighbours and FDB entries on
 * twill.1 and (dual-stack) twill-v6.1; a device that is not there has none.
 */
export async function entries(c: Cluster, node: string): Promise<Entries> {
  const sh = (argv: string[]): Promise<string> => c.sh({ node }, argv).catch(() => '');
  const neigh = (dev: string): Promise<string[]> =>
    sh(['ip', 'neigh', 'show', 'dev', dev, 'nud', 'permanent']).then(lines);
  const fdbOf = (dev: string): Promise<string[]> =>
    sh(['bridge', 'fdb', 'show', 'dev', dev]).then((t) =>
      lines(t).filter((l) => l.includes('permanent')),
    );
  const [routes, neighs, fdb, neighs6, fdb6] = await Promise.all([
    ownRoutes(c, node),
    neigh(VXLAN_DEV),
    fdbOf(VXLAN_DEV),
    neigh(VXLAN6_DEV),
    fdbOf(VXLAN6_DEV),
  ]);
  return { routes, neighs, fdb, neighs6, fdb6 };
}

/**
 * What twill keeps on a node, as one comparable text: its entries and both
 * chains with the jumps to them (a drill's "whole again" is this, as before).
 */
export async function ownState(c: Cluster, node: string): Promise<string> {
  const sh = (argv: string[]): Promise<string> => c.sh({ node }, argv).catch(() => '');
  const chains = async (cmd: 'iptables' | 'ip6tables'): Promise<Record<string, string[]>> => {
    const chain = (table: string, name: string): Promise<string[]> =>
      sh([cmd, '-w', '5', '-t', table, '-S', name]).then((t) =>
        t.split('\n').filter((l) => l.startsWith('-A')),
      );
    const [masq, post, fwd, forward] = await Promise.all([
      chain('nat', 'TWILL-POSTRTG'),
      chain('nat', 'POSTROUTING').then((r) => r.filter((l) => l.includes('TWILL-'))),
      chain('filter', 'TWILL-FWD'),
      chain('filter', 'FORWARD').then((r) => r.filter((l) => l.includes('TWILL-'))),
    ]);
    return { masq, post, fwd, forward };
  };
  const [e, v4, v6] = await Promise.all([
    entries(c, node),
    chains('iptables'),
    chains('ip6tables'),
  ]);
  return JSON.stringify({ ...e, ...v4, v6 });
}

/**
 * Everything that should not be there: per node, entries that no live peer explains, missing ones,
 * stray leases.
 */
export async function leftovers(c: Cluster): Promise<string[]> {
  const [nodes, all, backend] = await Promise.all([c.nodes(), leases(c), backendOf(c)]);
  const problems: string[] = [];
  const ips = new Set(nodes.map((n) => n.ip));
  for (const l of all)
    if (!ips.has(l.publicIp))
      problems.push(`lease ${l.key} of a node that is gone (${l.publicIp})`);
  for (const n of nodes) {
    const peers = all.filter((l) => l.publicIp !== n.ip && ips.has(l.publicIp));
    const e = await entries(c, n.name);
    const peers6 = peers.filter((p) => p.subnet6 !== undefined);
    const want = new Set(peers.flatMap((p) => [p.subnet, ...(p.subnet6 ? [p.subnet6] : [])]));
    const have = e.routes.map((r) => r.split(' ')[0] ?? '');
    for (const r of have)
      if (!want.has(r)) problems.push(`${n.name}: route ${r} that no live peer explains`);
    for (const w of want) if (!have.includes(w)) problems.push(`${n.name}: no route to ${w}`);
    const perPeer = backend === 'vxlan' ? peers.length : 0;
    if (e.neighs.length !== perPeer)
      problems.push(
        `${n.name}: ${e.neighs.length} permanent neighbours on twill.1, want ${perPeer}`,
      );
    if (e.fdb.length !== perPeer)
      problems.push(`${n.name}: ${e.fdb.length} FDB entries on twill.1, want ${perPeer}`);
    const perPeer6 = backend === 'vxlan' ? peers6.length : 0;
    if (e.neighs6.length !== perPeer6)
      problems.push(
        `${n.name}: ${e.neighs6.length} permanent neighbours on ${VXLAN6_DEV}, want ${perPeer6}`,
      );
    if (e.fdb6.length !== perPeer6)
      problems.push(`${n.name}: ${e.fdb6.length} FDB entries on ${VXLAN6_DEV}, want ${perPeer6}`);
    const own = all.find((l) => l.publicIp === n.ip);
    for (const cmd of own?.subnet6 === undefined ? ['iptables'] : ['iptables', 'ip6tables']) {
      const chain = await c
        .sh({ node: n.name }, [cmd, '-t', 'nat', '-S', 'TWILL-POSTRTG'])
        .catch(() => '');
      if (chain.split('\n').filter((l) => l.startsWith('-A')).length !== 6)
        problems.push(`${n.name}: ${cmd}'s TWILL-POSTRTG does not hold its 6 rules`);
    }
  }
  return problems;
}

export interface PingStats {
  readonly sent: number;
  readonly received: number;
}

/** A steady ping (every 20 ms for `ms`) from one pod to an address; resolves with the counts. */
export async function steadyPing(
  c: Cluster,
  o: { from: string; to: string; ms: number },
): Promise<PingStats> {
  const count = Math.ceil(o.ms / 20);
  // ping exits 1 on any loss; the summary on stdout is what counts (arguments pass as "$@", never
  // parsed by the shell)
  const argv = [
    'sh',
    '-c',
    'ping "$@"; exit 0',
    'ping',
    '-q',
    '-i',
    '0.02',
    '-c',
    String(count),
    '-W',
    '1',
    o.to,
  ];
  const out = await c.sh({ pod: o.from }, argv, { timeoutMs: o.ms + 10_000 });
  const m = /(\d+) packets transmitted, (\d+) (packets )?received/.exec(out);
  return { sent: Number(m?.[1] ?? count), received: Number(m?.[2] ?? 0) };
}

/** How many times `msg` appears in a node's twill log. */
export async function logCount(c: Cluster, node: string, msg: string): Promise<number> {
  return (await c.twillLog(node)).split('\n').filter((l) => l.includes(`"msg":"${msg}"`)).length;
}

export async function snapshot(c: Cluster): Promise<Map<string, Entries>> {
  const nodes = await c.nodes();
  return new Map(
    await Promise.all(nodes.map(async (n) => [n.name, await entries(c, n.name)] as const)),
  );
}

const CHURN = ['dataplane updated', 'repaired dataplane drift'];

/** How many dataplane passes changed something so far, on all nodes together (their log lines). */
export async function churn(c: Cluster): Promise<number> {
  let total = 0;
  for (const n of await c.nodes()) for (const m of CHURN) total += await logCount(c, n.name, m);
  return total;
}

export interface Stillness {
  /** every node's owned kernel entries are as they were */
  readonly unchanged: boolean;
  /** no dataplane pass changed anything */
  readonly quiet: boolean;
  readonly note: string;
}

/** Takes every node's entries and the churn now; the function says later whether either changed. */
export async function stillSince(c: Cluster): Promise<() => Promise<Stillness>> {
  const [before, passes] = await Promise.all([snapshot(c), churn(c)]);
  return async () => {
    const unchanged = JSON.stringify([...(await snapshot(c))]) === JSON.stringify([...before]);
    const quiet = (await churn(c)) === passes;
    return {
      unchanged,
      quiet,
      note: `kernel entries ${unchanged ? 'unchanged' : 'CHANGED'}, ${quiet ? 'no dataplane pass changed anything' : 'dataplane passes changed entries'}`,
    };
  };
}

/**
 * Names for `count` new nodes: spare machines where nodes cannot be made on the fly, else the next
 * free numbers.
 */
export async function nextNames(c: Cluster, count: number): Promise<string[]> {
  if (c.spareNodes) {
    const spare = await c.spareNodes();
    if (spare.length < count)
      throw new Error(
        `${c.description}: this drill needs ${count} spare node(s), there are ${spare.length}`,
      );
    return spare.slice(0, count);
  }
  const nodes = await c.nodes();
  const prefix = /^\D+/.exec(nodes[0]?.name ?? '')?.[0] ?? 'n';
  const max = Math.max(0, ...nodes.map((n) => Number(n.name.replace(/^\D+/, '')) || 0));
  return Array.from({ length: count }, (_, i) => `${prefix}${max + 1 + i}`);
}

/** How many pods the first node has (what a new node gets), at least 1. */
export async function podsPerNode(c: Cluster): Promise<number> {
  const first = (await c.nodes())[0]?.name;
  return (await c.pods()).filter((p) => p.node === first).length || 1;
}

/**
 * True when no node but `victim` holds a route, neighbour or FDB entry for
 * its subnet. Routes first (one `ip route` per node, cheap enough to poll
 * every few ms without slowing the nodes down); the rest once they are gone.
 */
export async function goneEverywhere(
  c: Cluster,
  victim: { name: string; ip: string; subnet: string },
): Promise<boolean> {
  const net = victim.subnet.split('/')[0] ?? '?';
  const others = (await c.nodes()).filter((n) => n.name !== victim.name);
  const routes = await Promise.all(others.map((n) => ownRoutes(c, n.name)));
  if (routes.some((rs) => rs.some((r) => r.startsWith(`${net}/`)))) return false;
  const all = await Promise.all(others.map((n) => entries(c, n.name)));
  return all.every(
    (e) =>
      !e.routes.some((r) => r.startsWith(`${net}/`)) &&
      !e.neighs.some((x) => x.startsWith(`${net} `)) &&
      !e.fdb.some((f) => f.includes(`dst ${victim.ip} `)),
  );
}
