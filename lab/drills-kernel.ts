// Drills that break a node's kernel state or its twill process: the
// masquerade rule, the nat table, twill's masquerade chain or table, a peer's
// route, neighbour and FDB entry, the vxlan device; twill killed and
// restarted under a steady ping; on a lab with IPv6 the same breaks again in
// IPv6 (the IPv6 masquerade rule, route, neighbour and FDB entry,
// twill-v6.1); on an IPv6-only lab those alone, the IPv4 ones say n/a. They
// apply to both store modes. The masquerade breaks are parameterised by the
// lab's mode (ByMode): iptables (TWILL-POSTRTG) or, on a lab made with `up
// --nftables`, twill's own nftables tables; the rest run as they are in both.
import type { Cluster, LabNode } from './cluster.ts';
import {
  BOTH_STORES,
  entries,
  logCount,
  masqMode,
  NFT_TABLES,
  ownState,
  steadyPing,
  VXLAN6_DEV,
  type ByMode,
  type Drill,
  type Family,
} from './drill-kit.ts';
import { QUIET_MS, timeRepair, watchKernel, type Healing } from './kernel-watch.ts';
import { passesBetween, renderStages } from './pass-log.ts';
import { leaseOf, subnetsOf, type LeaseView } from './store-view.ts';
import { SLOW_MACHINE_FACTOR, until } from './kit/wait.ts';

export const first = async (c: Cluster, i: number): Promise<string> =>
  (await c.nodes())[i]?.name ?? '';

/** A break: a command run on the node, with what it reads on stdin (iptables-restore's input). */
export interface BreakCommand {
  readonly argv: readonly string[];
  readonly input?: string;
}

/** How a kernel drill breaks `node`: a command line, or one with input. */
export type Breaker = (c: Cluster, node: string) => Promise<readonly string[] | BreakCommand>;

/**
 * Break something on one node and time the repair from the node's kernel
 * (kernel-watch.ts): the break's event to the last repair event before the
 * node held exactly what it held before. Connectivity, no changed pod IP and
 * no leftovers are checked after, by the runner (drills.ts). A masquerade
 * break gives what it breaks and how for each mode (ByMode).
 */
function kernelDrill(o: {
  name: string;
  broke: string | ByMode<string>;
  only?: 'vxlan';
  dualStackOnly?: boolean;
  ipv4Only?: boolean;
  argv: Breaker | ByMode<Breaker>;
}): Drill {
  const broke = typeof o.broke === 'string' ? { broke: o.broke } : byModeText(o.broke);
  return {
    name: o.name,
    ...broke,
    targetMs: 1_000,
    stores: BOTH_STORES,
    ...(o.only ? { only: o.only } : {}),
    ...(o.dualStackOnly === true ? { dualStackOnly: true } : {}),
    ...(o.ipv4Only === true ? { ipv4Only: true } : {}),
    async run(c) {
      const node = await first(c, 0);
      const breaker = typeof o.argv === 'function' ? o.argv : o.argv[masqMode(c)];
      const made = await breaker(c, node);
      const cmd: BreakCommand = isArgv(made) ? { argv: made } : made;
      const before = await ownState(c, node);
      const w = await watchKernel(c, node);
      try {
        const h = await timeRepair(w, {
          breakIt: () =>
            c.sh({ node }, cmd.argv, cmd.input === undefined ? {} : { input: cmd.input }),
          whole: async () => (await ownState(c, node)) === before,
          boundMs: SLOW_MACHINE_FACTOR * 1_000,
        });
        const notes = [`on ${node}: ${renderBreak(cmd)}`, observed(h)];
        if (h.brokeAt !== undefined && h.healedAt !== undefined)
          notes.push(
            ...renderStages(
              passesBetween(await c.twillLog(node), h.brokeAt, h.healedAt + 2_000),
              h.brokeAt,
            ),
          );
        return { healedMs: h.healedMs, ok: h.healedMs !== undefined, notes };
      } finally {
        await w.stop();
      }
    },
  };
}

const isArgv = (x: readonly string[] | BreakCommand): x is readonly string[] => Array.isArray(x);

/** A drill's `broke` (iptables mode) and `nftBroke` from one text per mode. */
const byModeText = (t: ByMode<string>): { broke: string; nftBroke: string } => ({
  broke: t.iptables,
  nftBroke: t.nftables,
});

/** The break as the notes print it: the command line, then its input's lines, if any. */
export function renderBreak(cmd: BreakCommand): string {
  const input = (cmd.input ?? '').split('\n').filter(Boolean);
  return `${cmd.argv.join(' ')}${input.length > 0 ? ` <<< ${input.join('; ')}` : ''}`;
}

/** How the time was taken, and what taking it cost. */
function observed(h: Healing): string {
  const lag =
    h.breakLagMs === undefined
      ? 'no break event seen'
      : `break event stamped ${Math.round(h.breakLagMs)} ms after the break command started`;
  return `timed by ip/nft monitors in the node's namespace: ${lag}; ${h.checks} state check(s), each after ${QUIET_MS} ms without events`;
}

/** The second node's lease's IPv4 subnet (an IPv4 or dual-stack lab). */
const peerSubnet = async (c: Cluster): Promise<string> => {
  const l = await leaseOf(c, (await c.nodes())[1]);
  if (l?.subnet == null) throw new Error('the second node holds no lease with an IPv4 subnet');
  return l.subnet;
};

/** The second node's lease's IPv6 subnet and PublicIPv6 (a dual-stack or IPv6-only lab). */
const peer6 = async (c: Cluster): Promise<{ subnet6: string; ip6: string }> => {
  const l = await leaseOf(c, (await c.nodes())[1]);
  if (l?.subnet6 === undefined || l.publicIp6 === undefined)
    throw new Error('the second node holds no lease with IPv6');
  return { subnet6: l.subnet6, ip6: l.publicIp6 };
};

/**
 * nftables mode: deletes the first masquerade rule of twill's postrtg chain in family `f` (the
 * 5th rule, net → !multicast, as `iptables -D TWILL-POSTRTG 5` deletes in iptables mode), by its
 * handle.
 */
export function nftMasqRuleDelete(f: Family): Breaker {
  return async (c, node) => {
    const t = NFT_TABLES[f];
    const listing = await c.sh({ node }, [
      'nft',
      '-a',
      'list',
      'chain',
      t.family,
      t.name,
      'postrtg',
    ]);
    const handle = /\bmasquerade\b.*# handle (\d+)/.exec(listing)?.[1];
    if (handle === undefined)
      throw new Error(`${node}: no masquerade rule in ${t.family} ${t.name} postrtg`);
    return ['nft', 'delete', 'rule', t.family, t.name, 'postrtg', 'handle', handle];
  };
}

/**
 * iptables mode: twill's masquerade chain deleted whole, its jump from POSTROUTING first, in one
 * iptables-restore transaction (so twill never sees the jump gone and the chain still there):
 * what deleting twill's nftables table is in nftables mode.
 */
export const iptablesMasqChainDelete: Breaker = async (c, node) => {
  const jumps = (await c.sh({ node }, ['iptables', '-w', '5', '-t', 'nat', '-S', 'POSTROUTING']))
    .split('\n')
    .filter((l) => l.startsWith('-A POSTROUTING ') && /-j TWILL-POSTRTG\b/.test(l));
  return {
    argv: ['iptables-restore', '-w', '5', '--noflush'],
    input: [
      '*nat',
      ...jumps.map((l) => `-D ${l.slice('-A '.length)}`),
      '-F TWILL-POSTRTG',
      '-X TWILL-POSTRTG',
      'COMMIT',
      '',
    ].join('\n'),
  };
};

/** A fixed command line, whatever the node. */
const fixed =
  (argv: readonly string[]): Breaker =>
  async () =>
    argv;

/** `nft <verb> table` on twill's table in family `f` (flush: its chains stay, rules gone). */
const nftTable = (verb: 'flush' | 'delete', f: Family): Breaker =>
  fixed(['nft', verb, 'table', NFT_TABLES[f].family, NFT_TABLES[f].name]);

/** The same breaks as the IPv4 drills, in IPv6: on a lab with IPv6 (dual-stack or IPv6-only). */
const IPV6_DRILLS: readonly Drill[] = [
  kernelDrill({
    name: 'masq6-rule',
    broke: {
      iptables: 'IPv6 MASQUERADE rule deleted',
      nftables: "IPv6 masquerade rule deleted from twill's nft table",
    },
    dualStackOnly: true,
    argv: {
      iptables: fixed(['ip6tables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '5']),
      nftables: nftMasqRuleDelete(6),
    },
  }),
  kernelDrill({
    name: 'peer-route6',
    broke: 'a peer IPv6 route deleted',
    dualStackOnly: true,
    argv: async (c) => ['ip', '-6', 'route', 'del', (await peer6(c)).subnet6],
  }),
  kernelDrill({
    name: 'peer-neigh6',
    broke: 'a peer IPv6 neighbour deleted',
    only: 'vxlan',
    dualStackOnly: true,
    argv: async (c) => [
      'ip',
      '-6',
      'neigh',
      'del',
      (await peer6(c)).subnet6.split('/')[0] ?? '',
      'dev',
      VXLAN6_DEV,
    ],
  }),
  kernelDrill({
    name: 'peer-fdb6',
    broke: 'a peer IPv6 FDB entry deleted',
    only: 'vxlan',
    dualStackOnly: true,
    argv: async (c) => {
      const { ip6 } = await peer6(c);
      const line =
        (await entries(c, await first(c, 0))).fdb6.find((f) => f.includes(`dst ${ip6} `)) ?? '';
      const mac = line.split(' ')[0] ?? '';
      return ['bridge', 'fdb', 'del', mac, 'dev', VXLAN6_DEV, 'dst', ip6, 'self'];
    },
  }),
  kernelDrill({
    name: 'vxlan6-device',
    broke: 'the IPv6 vxlan device deleted',
    only: 'vxlan',
    dualStackOnly: true,
    argv: async () => ['ip', 'link', 'del', VXLAN6_DEV],
  }),
];

export const KERNEL_DRILLS: readonly Drill[] = [
  kernelDrill({
    name: 'masq-rule',
    ipv4Only: true,
    broke: {
      iptables: 'MASQUERADE rule deleted',
      nftables: "masquerade rule deleted from twill's nft table",
    },
    argv: {
      iptables: fixed(['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '5']),
      nftables: nftMasqRuleDelete(4),
    },
  }),
  kernelDrill({
    name: 'nat-flush',
    ipv4Only: true,
    broke: { iptables: 'whole nat table flushed', nftables: "twill's nft table flushed" },
    argv: { iptables: fixed(['iptables', '-t', 'nat', '-F']), nftables: nftTable('flush', 4) },
  }),
  kernelDrill({
    name: 'masq-table',
    ipv4Only: true,
    broke: {
      iptables: "twill's masquerade chain deleted, its jump too",
      nftables: "twill's nft table deleted",
    },
    argv: { iptables: iptablesMasqChainDelete, nftables: nftTable('delete', 4) },
  }),
  kernelDrill({
    name: 'peer-route',
    ipv4Only: true,
    broke: 'a peer route deleted',
    argv: async (c) => ['ip', 'route', 'del', await peerSubnet(c)],
  }),
  kernelDrill({
    name: 'peer-neigh',
    ipv4Only: true,
    broke: 'a peer neighbour deleted',
    only: 'vxlan',
    argv: async (c) => [
      'ip',
      'neigh',
      'del',
      (await peerSubnet(c)).split('/')[0] ?? '',
      'dev',
      'twill.1',
    ],
  }),
  kernelDrill({
    name: 'peer-fdb',
    ipv4Only: true,
    broke: 'a peer FDB entry deleted',
    only: 'vxlan',
    argv: async (c) => {
      const peer = (await c.nodes())[1];
      const line =
        (await entries(c, await first(c, 0))).fdb.find((f) =>
          f.includes(`dst ${peer?.ip ?? '?'} `),
        ) ?? '';
      return [
        'bridge',
        'fdb',
        'del',
        line.split(' ')[0] ?? '',
        'dev',
        'twill.1',
        'dst',
        peer?.ip ?? '',
        'self',
      ];
    },
  }),
  kernelDrill({
    name: 'vxlan-device',
    ipv4Only: true,
    broke: 'the vxlan device deleted',
    only: 'vxlan',
    argv: async () => ['ip', 'link', 'del', 'twill.1'],
  }),
  ...IPV6_DRILLS,
  {
    name: 'kill-restart',
    broke: 'twill SIGKILLed and restarted',
    targetMs: 10_000,
    stores: BOTH_STORES,
    async run(c) {
      const [a, b] = await c.pods().then((ps) => [ps[0], ps.find((p) => p.node !== ps[0]?.node)]);
      // b.ip: its primary address, IPv6 on an IPv6-only lab (LabPod)
      const victim = b?.node ?? '';
      const victimNode = async (): Promise<LabNode | undefined> =>
        (await c.nodes()).find((n) => n.name === victim);
      const before = await leaseOf(c, await victimNode());
      const acquired = await logCount(c, victim, 'lease acquired');
      const ping = steadyPing(c, { from: a?.name ?? '', to: b?.ip ?? '', ms: 4_000 });
      await new Promise((r) => setTimeout(r, 500));
      const since = performance.now();
      await c.stopTwill(victim, 'kill');
      await c.startTwill(victim);
      const healedMs = await until(
        async () => (await logCount(c, victim, 'lease acquired')) > acquired,
        { timeoutMs: 20_000, since },
      );
      const stats = await ping;
      const after = await leaseOf(c, await victimNode());
      const subnets = (l: LeaseView | undefined): string =>
        l === undefined ? '(no lease)' : subnetsOf(l).join(' + ');
      const notes = [
        `${victim} back in ${Math.round(healedMs ?? -1)} ms; steady ping ${a?.name} → ${b?.name} (${b?.ip}): ${stats.received}/${stats.sent}`,
        `subnet ${subnets(before)} → ${subnets(after)}`,
      ];
      return {
        healedMs,
        ok: healedMs !== undefined && stats.received === stats.sent && before?.key === after?.key,
        notes,
      };
    },
  },
];
