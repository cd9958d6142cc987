// What drills are and observe, through the Cluster interface only: each
// node's owned kernel entries, the leftovers check (every node holds exactly
// one entry set per live peer and nothing else), a steady ping across an
// event, log counts, and names for new nodes. The leases come from
// store-view.ts, whichever the store.
import { ROUTE_PROTOCOL } from '../src/dataplane/model.ts';
import type { Cluster, LabMode, LabNode } from './cluster.ts';
import { backendOf, isLeaseOf, leases, subnetsOf, type LeaseView } from './store-view.ts';

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
  /** what it breaks on a lab in nftables mode (`up --nftables`), when that is not `broke` */
  readonly nftBroke?: string;
  /** the bound the time is held to, ms */
  readonly targetMs: number;
  /** only for this backend (others report "n/a") */
  readonly only?: 'vxlan';
  /**
   * breaks IPv6: only on a lab with IPv6, dual-stack (`up --dual-stack`) or IPv6-only (`up
   * --ipv6-only`); an IPv4 lab reports "n/a"
   */
  readonly dualStackOnly?: boolean;
  /**
   * breaks IPv4 (its rules, routes, neighbours, FDB entries, device): an IPv6-only lab, where
   * twill keeps none of them, reports "n/a"
   */
  readonly ipv4Only?: boolean;
  /** the lab modes it applies to (`drill all` runs these; others report "n/a") */
  readonly stores: readonly LabMode[];
  /**
   * pods may get new addresses (their sandboxes are made anew); the runner then checks they stay in
   * their node's subnet
   */
  readonly podsRecreated?: boolean;
  run(c: Cluster): Promise<DrillOutcome>;
}

/** What the drill breaks on this lab: in nftables mode its `nftBroke`, when it has one. */
export function brokeOn(
  d: Pick<Drill, 'broke' | 'nftBroke'>,
  c: Pick<Cluster, 'nftables'>,
): string {
  return masqMode(c) === 'nftables' ? (d.nftBroke ?? d.broke) : d.broke;
}

/**
 * Where twill keeps its masquerade: iptables chains (TWILL-POSTRTG, TWILL-FWD, in both
 * families), or (`up --nftables`) its own nftables tables.
 */
export type MasqMode = 'iptables' | 'nftables';

export function masqMode(c: Pick<Cluster, 'nftables'>): MasqMode {
  return c.nftables === true ? 'nftables' : 'iptables';
}

/** One value for each masquerade mode: how a drill breaks or checks the rules, by the mode. */
export type ByMode<T> = Readonly<Record<MasqMode, T>>;

/**
 * twill's nftables table of each family, as the agreed layout names them (src/dataplane/nft*.ts
 * writes them; the lab checks them on its own): base chains `postrtg` (the 6 masquerade rules,
 * as TWILL-POSTRTG) and `forward` (2 accept rules, as TWILL-FWD).
 */
export const NFT_TABLES = {
  4: { family: 'ip', name: 'twill-ipv4' },
  6: { family: 'ip6', name: 'twill-ipv6' },
} as const;
export type Family = keyof typeof NFT_TABLES;
const NFT_RULES = { postrtg: 6, forward: 2 } as const;

/**
 * `nft list table` of twill's table in family `f` on a node, as comparable text (should a rule
 * carry a counter, its values left out: traffic moves them): '' when there is no such table.
 */
export async function nftTableText(c: Cluster, node: string, f: Family): Promise<string> {
  const t = NFT_TABLES[f];
  const text = await c.sh({ node }, ['nft', 'list', 'table', t.family, t.name]).catch(() => '');
  return text.replace(/counter packets \d+ bytes \d+/g, 'counter').trim();
}

/**
 * How many rules each chain of twill's table in family `f` holds on a node (`nft -j`), or
 * undefined when there is no such table.
 */
export async function nftRuleCounts(
  c: Cluster,
  node: string,
  f: Family,
): Promise<Record<string, number> | undefined> {
  const t = NFT_TABLES[f];
  const json = await c
    .sh({ node }, ['nft', '-j', 'list', 'table', t.family, t.name])
    .catch(() => '');
  if (json.trim() === '') return undefined;
  const items = (JSON.parse(json) as { nftables?: NftItem[] }).nftables ?? [];
  if (!items.some((i) => i.table?.name === t.name)) return undefined;
  const counts: Record<string, number> = {};
  for (const i of items) if (i.chain) counts[i.chain.name] ??= 0;
  for (const i of items) if (i.rule) counts[i.rule.chain] = (counts[i.rule.chain] ?? 0) + 1;
  return counts;
}

interface NftItem {
  readonly table?: { readonly name: string };
  readonly chain?: { readonly name: string };
  readonly rule?: { readonly chain: string };
}

/** Which of twill's nftables tables a node holds (`nft list tables`), by family. */
async function nftTablesOn(c: Cluster, node: string): Promise<Family[]> {
  const out = await c.sh({ node }, ['nft', 'list', 'tables']).catch(() => '');
  const has = new Set(out.split('\n').map((l) => l.trim()));
  return ([4, 6] as const).filter((f) =>
    has.has(`table ${NFT_TABLES[f].family} ${NFT_TABLES[f].name}`),
  );
}

export interface Entries {
  /** both families */
  readonly routes: string[];
  /** on twill.1 */
  readonly neighs: string[];
  readonly fdb: string[];
  /** on twill-v6.1 (vxlan with IPv6: dual-stack or IPv6-only) */
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
 * twill.1 and (with IPv6) twill-v6.1; a device that is not there (IPv6-only: twill.1) has none.
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
 * What twill keeps on a node, as one comparable text: its entries, both
 * chains with the jumps to them and its nftables tables, whatever the lab's
 * mode (a drill's "whole again" is this, as before; what the mode does not
 * use stays absent).
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
  const [e, v4, v6, nft4, nft6] = await Promise.all([
    entries(c, node),
    chains('iptables'),
    chains('ip6tables'),
    nftTableText(c, node, 4),
    nftTableText(c, node, 6),
  ]);
  return JSON.stringify({ ...e, ...v4, v6, nft4, nft6 });
}

/**
 * Everything that should not be there: per node, entries that no live peer explains, missing ones,
 * stray leases.
 */
export async function leftovers(c: Cluster): Promise<string[]> {
  const [nodes, all, backend] = await Promise.all([c.nodes(), leases(c), backendOf(c)]);
  const problems: string[] = [];
  const live = all.filter((l) => nodes.some((n) => isLeaseOf(l, n)));
  for (const l of all)
    if (!live.includes(l))
      problems.push(`lease ${l.key} of a node that is gone (${l.publicIp ?? l.publicIp6})`);
  for (const n of nodes) {
    const peers = live.filter((l) => !isLeaseOf(l, n));
    const e = await entries(c, n.name);
    // an IPv6-only lease has no IPv4 half: nothing on twill.1 for it (nor a twill.1 at all)
    const peers4 = peers.filter((p) => p.subnet !== null);
    const peers6 = peers.filter((p) => p.subnet6 !== undefined);
    const want = new Set(peers.flatMap(subnetsOf));
    const have = e.routes.map((r) => r.split(' ')[0] ?? '');
    for (const r of have)
      if (!want.has(r)) problems.push(`${n.name}: route ${r} that no live peer explains`);
    for (const w of want) if (!have.includes(w)) problems.push(`${n.name}: no route to ${w}`);
    const perPeer = backend === 'vxlan' ? peers4.length : 0;
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
    problems.push(
      ...(await familyLeftovers(
        c,
        n,
        live.find((l) => isLeaseOf(l, n)),
      )),
    );
  }
  return problems;
}

/**
 * Each family the node's lease has holds twill's masquerade, as the lab's mode keeps it
 * (iptablesLeftovers, nftablesLeftovers), and the other mode's leaves nothing; an IPv6-only node
 * (no IPv4 half) holds no IPv4 rule and no twill.1 at all. A node without a lease yet: as the
 * lab's families say.
 */
async function familyLeftovers(
  c: Cluster,
  n: LabNode,
  lease: LeaseView | undefined,
): Promise<string[]> {
  const want = {
    4: lease === undefined ? c.ipv6Only !== true : lease.subnet !== null,
    6: lease === undefined ? c.outsideIp6 !== undefined : lease.subnet6 !== undefined,
  };
  const problems =
    masqMode(c) === 'nftables'
      ? await nftablesLeftovers(c, n.name, want)
      : await iptablesLeftovers(c, n.name, want);
  if (!want[4]) {
    const dev = await c.sh({ node: n.name }, ['ip', '-o', 'link', 'show', 'dev', VXLAN_DEV]).then(
      () => true,
      () => false,
    );
    if (dev) problems.push(`${n.name}: ${VXLAN_DEV} on a node without IPv4`);
  }
  return problems;
}

/** iptables mode: TWILL-POSTRTG holds its 6 rules in each wanted family; no twill nft table. */
async function iptablesLeftovers(
  c: Cluster,
  node: string,
  want: Readonly<Record<Family, boolean>>,
): Promise<string[]> {
  const problems: string[] = [];
  const rules = async (cmd: 'iptables' | 'ip6tables'): Promise<number> =>
    (await c.sh({ node }, [cmd, '-t', 'nat', '-S', 'TWILL-POSTRTG']).catch(() => ''))
      .split('\n')
      .filter((l) => l.startsWith('-A')).length;
  const v4Rules = await rules('iptables');
  if (want[4] && v4Rules !== 6)
    problems.push(`${node}: iptables's TWILL-POSTRTG does not hold its 6 rules`);
  if (!want[4] && v4Rules !== 0)
    problems.push(`${node}: ${v4Rules} IPv4 masquerade rule(s) on a node without IPv4`);
  if (want[6] && (await rules('ip6tables')) !== 6)
    problems.push(`${node}: ip6tables's TWILL-POSTRTG does not hold its 6 rules`);
  for (const f of await nftTablesOn(c, node))
    problems.push(
      `${node}: nftables table ${NFT_TABLES[f].family} ${NFT_TABLES[f].name} in iptables mode`,
    );
  return problems;
}

/**
 * nftables mode: each wanted family's table holds its chains' rules (postrtg 6, forward 2), the
 * other family has no table, and neither iptables nor ip6tables holds a TWILL-* chain or a jump
 * to one.
 */
async function nftablesLeftovers(
  c: Cluster,
  node: string,
  want: Readonly<Record<Family, boolean>>,
): Promise<string[]> {
  const problems: string[] = [];
  for (const f of [4, 6] as const) {
    const t = `${NFT_TABLES[f].family} ${NFT_TABLES[f].name}`;
    const counts = await nftRuleCounts(c, node, f);
    if (!want[f]) {
      if (counts !== undefined) problems.push(`${node}: table ${t} on a node without IPv${f}`);
      continue;
    }
    if (counts === undefined) {
      problems.push(`${node}: no table ${t}`);
      continue;
    }
    const wrong = Object.entries(NFT_RULES).filter(([chain, k]) => counts[chain] !== k);
    if (wrong.length > 0)
      problems.push(
        `${node}: table ${t} holds ${wrong.map(([chain, k]) => `${counts[chain] ?? 'no'} ${chain} rule(s), want ${k}`).join(', ')}`,
      );
  }
  for (const cmd of ['iptables-save', 'ip6tables-save'] as const) {
    const saved = await c.sh({ node }, [cmd]).catch(() => '');
    const chains = new Set(
      [...saved.matchAll(/(?:^:|-j )(TWILL-[\w-]+)/gm)].map((m) => m[1] ?? ''),
    );
    for (const chain of chains) problems.push(`${node}: ${cmd} shows ${chain} in nftables mode`);
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
export async function goneEverywhere(c: Cluster, victim: GoneNode): Promise<boolean> {
  const net = (cidr: string | null | undefined): string | undefined =>
    cidr == null ? undefined : (cidr.split('/')[0] ?? '?');
  const [net4, net6] = [net(victim.subnet), net(victim.subnet6)];
  const nets = [net4, net6].filter((x) => x !== undefined);
  const routed = (rs: readonly string[]): boolean =>
    rs.some((r) => nets.some((x) => r.startsWith(`${x}/`)));
  const others = (await c.nodes()).filter((n) => n.name !== victim.name);
  const routes = await Promise.all(others.map((n) => ownRoutes(c, n.name)));
  if (routes.some(routed)) return false;
  const all = await Promise.all(others.map((n) => entries(c, n.name)));
  return all.every(
    (e) =>
      !routed(e.routes) &&
      (net4 === undefined ||
        (!e.neighs.some((x) => x.startsWith(`${net4} `)) &&
          !e.fdb.some((f) => f.includes(`dst ${victim.ip} `)))) &&
      (net6 === undefined ||
        (!e.neighs6.some((x) => x.startsWith(`${net6} `)) &&
          !e.fdb6.some((f) => victim.ip6 !== undefined && f.includes(`dst ${victim.ip6} `)))),
  );
}

/**
 * A node that went away, as goneEverywhere looks for it: its underlay addresses and its lease's
 * subnets (null: an IPv6-only lease's IPv4 half).
 */
export interface GoneNode {
  readonly name: string;
  readonly ip: string;
  readonly ip6?: string;
  readonly subnet: string | null;
  readonly subnet6?: string;
}

/** Node `n` gone with lease `l`, for goneEverywhere and timeGoneFromPeers. */
export function goneNode(n: LabNode, l: LeaseView): GoneNode {
  return {
    name: n.name,
    ip: n.ip,
    ...(n.ip6 === undefined ? {} : { ip6: n.ip6 }),
    subnet: l.subnet,
    ...(l.subnet6 === undefined ? {} : { subnet6: l.subnet6 }),
  };
}
