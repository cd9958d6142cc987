// What drills observe, through the Cluster interface only: the leases in
// etcd, each node's owned kernel entries, the leftovers check (every node
// holds exactly one entry set per live peer and nothing else), a steady ping
// across an event, and waiting with a bound.
import { ROUTE_PROTOCOL } from '../src/dataplane/model.ts';
import { sleep } from '../src/util/abort.ts';
import { etcdctl, type Cluster } from './cluster.ts';

export interface DrillOutcome {
  /** ms until the drill's own recovery condition held (undefined: never, within the bound) */
  readonly healedMs: number | undefined;
  readonly ok: boolean;
  readonly notes: readonly string[];
}

export interface Drill {
  readonly name: string;
  readonly broke: string;
  /** the bound the time is held to, ms */
  readonly targetMs: number;
  /** only for this backend (others report "n/a") */
  readonly only?: 'vxlan';
  run(c: Cluster): Promise<DrillOutcome>;
}


export interface LeaseView {
  /** "10.244.3.0-24" */
  readonly key: string;
  /** "10.244.3.0/24" */
  readonly subnet: string;
  readonly publicIp: string;
}

export async function leases(c: Cluster): Promise<LeaseView[]> {
  const out = await etcdctl(c, ['get', '--prefix', `${c.etcdPrefix}/subnets/`]);
  const lines = out.split('\n').filter(Boolean);
  const views: LeaseView[] = [];
  for (let i = 0; i + 1 < lines.length; i += 2) {
    const key = (lines[i] ?? '').split('/').at(-1) ?? '';
    const publicIp = String((JSON.parse(lines[i + 1] ?? '{}') as { PublicIP?: string }).PublicIP);
    views.push({ key, subnet: key.replace(/-(\d+)$/, '/$1'), publicIp });
  }
  return views;
}

/** The lease of the node at `ip`, if any. */
export async function leaseOf(c: Cluster, ip: string): Promise<LeaseView | undefined> {
  return (await leases(c)).find((l) => l.publicIp === ip);
}

export async function backendOf(c: Cluster): Promise<string> {
  const conf = JSON.parse(await etcdctl(c, ['get', '--print-value-only', `${c.etcdPrefix}/config`])) as { Backend?: { Type?: string } };
  return conf.Backend?.Type ?? 'vxlan';
}

export interface Entries {
  readonly routes: string[];
  readonly neighs: string[];
  readonly fdb: string[];
}

const lines = (t: string): string[] => t.split('\n').map((l) => l.trim()).filter(Boolean).sort();

/** A node's owned entries: routes with twill's protocol, permanent neighbours and FDB entries on twill.1. */
export async function entries(c: Cluster, node: string): Promise<Entries> {
  const sh = (argv: string[]): Promise<string> => c.sh({ node }, argv).catch(() => '');
  const [routes, neighs, fdb] = await Promise.all([
    sh(['ip', 'route', 'show', 'table', 'main']).then((t) => lines(t).filter((l) => l.includes(`proto ${ROUTE_PROTOCOL}`))),
    sh(['ip', 'neigh', 'show', 'dev', 'twill.1', 'nud', 'permanent']).then(lines),
    sh(['bridge', 'fdb', 'show', 'dev', 'twill.1']).then((t) => lines(t).filter((l) => l.includes('permanent'))),
  ]);
  return { routes, neighs, fdb };
}

/** Everything that should not be there: per node, entries that no live peer explains, missing ones, stray leases. */
export async function leftovers(c: Cluster): Promise<string[]> {
  const [nodes, all, backend] = await Promise.all([c.nodes(), leases(c), backendOf(c)]);
  const problems: string[] = [];
  const ips = new Set(nodes.map((n) => n.ip));
  for (const l of all) if (!ips.has(l.publicIp)) problems.push(`lease ${l.key} of a node that is gone (${l.publicIp})`);
  for (const n of nodes) {
    const peers = all.filter((l) => l.publicIp !== n.ip && ips.has(l.publicIp));
    const e = await entries(c, n.name);
    const want = new Set(peers.map((p) => p.subnet));
    const have = e.routes.map((r) => r.split(' ')[0] ?? '');
    for (const r of have) if (!want.has(r)) problems.push(`${n.name}: route ${r} that no live peer explains`);
    for (const w of want) if (!have.includes(w)) problems.push(`${n.name}: no route to ${w}`);
    const perPeer = backend === 'vxlan' ? peers.length : 0;
    if (e.neighs.length !== perPeer) problems.push(`${n.name}: ${e.neighs.length} permanent neighbours on twill.1, want ${perPeer}`);
    if (e.fdb.length !== perPeer) problems.push(`${n.name}: ${e.fdb.length} FDB entries on twill.1, want ${perPeer}`);
    const chain = await c.sh({ node: n.name }, ['iptables', '-t', 'nat', '-S', 'TWILL-POSTRTG']).catch(() => '');
    if (chain.split('\n').filter((l) => l.startsWith('-A')).length !== 6) problems.push(`${n.name}: TWILL-POSTRTG does not hold its 6 rules`);
  }
  return problems;
}

/** Polls `check` every `everyMs` until true; ms it took from `since`, or undefined after `timeoutMs`. */
export async function until(check: () => Promise<boolean>, o: { timeoutMs: number; since?: number; everyMs?: number }): Promise<number | undefined> {
  const since = o.since ?? performance.now();
  for (;;) {
    if (await check()) return performance.now() - since;
    if (performance.now() - since > o.timeoutMs) return undefined;
    await sleep(o.everyMs ?? 10, AbortSignal.timeout(60_000));
  }
}

export interface PingStats {
  readonly sent: number;
  readonly received: number;
}

/** A steady ping (every 20 ms for `ms`) from one pod to an address; resolves with the counts. */
export async function steadyPing(c: Cluster, o: { from: string; to: string; ms: number }): Promise<PingStats> {
  const count = Math.ceil(o.ms / 20);
  // ping exits 1 on any loss; the summary on stdout is what counts (arguments pass as "$@", never parsed by the shell)
  const argv = ['sh', '-c', 'ping "$@"; exit 0', 'ping', '-q', '-i', '0.02', '-c', String(count), '-W', '1', o.to];
  const out = await c.sh({ pod: o.from }, argv, { timeoutMs: o.ms + 10_000 });
  const m = /(\d+) packets transmitted, (\d+) (packets )?received/.exec(out);
  return { sent: Number(m?.[1] ?? count), received: Number(m?.[2] ?? 0) };
}

/** How many times `msg` appears in a node's twill log. */
export async function logCount(c: Cluster, node: string, msg: string): Promise<number> {
  return (await c.twillLog(node)).split('\n').filter((l) => l.includes(`"msg":"${msg}"`)).length;
}
