// Idle CPU on a kube-proxy-sized host: three nodes run side by side over the
// same 60 s, all vxlan with a few peers; two hold 20,004 unrelated nat rules
// in kube-proxy's shape (loaded with one iptables-restore before twill
// starts): one has them rewritten every second from the settling before the
// window to its end (one iptables-restore --noflush re-declaring and
// refilling every KUBE-* chain, the endpoints moved; a rewrite that takes
// longer than a second, as one of 20,000 rules can on a small machine, is
// followed at once by the next), so the window holds their steady state; the
// other leaves them alone; the third holds nothing else (the yardstick). CPU
// is utime+stime from /proc/<pid>/stat: of the daemon process, and of its
// whole tree (its monitors, and the commands its passes ran). Passes that
// kernel events triggered in the window are counted from the daemon's own
// trace log; the resync timer's passes (--iptables-resync, every 60 s) are
// not triggers. Then a second window of the same length, twill in nftables
// mode (`"EnableNFTables": true`): one node with the same rules rewritten
// the same way (kube-proxy's iptables-nft writes them to the `ip nat` table,
// not twill's), one with nothing else (its yardstick). The windows follow
// each other: two rewriters at once would share this machine's cores and
// slow each other's rewrites.
import { readdir, readFile } from 'node:fs/promises';
import { run } from '../src/exec/runner.ts';
import { sweepStaleNetns } from '../lab/kit/netns.ts';
import { enableNftables } from './dataplane.ts';
import { kubeNatRules, kubeRuleCount } from './kube-rules.ts';
import {
  logLines,
  ownedRoutes,
  POLL_MS,
  putLeases,
  setupNode,
  sh,
  startTwill,
  stopNode,
  type Node,
} from './node.ts';
import { waitFor } from '../lab/kit/wait.ts';
import type { BenchRow, BenchSuite } from './table.ts';

const SERVICES = 2_000;
const PEERS = 4;
const WINDOW_MS = 60_000;
const CHURN_EVERY_MS = 1_000;
const SETTLE_MS = 6_000;
const TARGET_PCT = 1;

interface Ticks {
  /** the daemon's own utime+stime */
  readonly self: number;
  /** self, plus its reaped children and its live descendants */
  readonly tree: number;
}

/** utime, stime, cutime, cstime and ppid of every process, by pid. */
async function allStats(): Promise<Map<number, { ppid: number; own: number; reaped: number }>> {
  const out = new Map<number, { ppid: number; own: number; reaped: number }>();
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const text = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => '');
    const f = text.slice(text.lastIndexOf(')') + 2).split(' '); // f[0] is field 3 (state)
    if (f.length < 15) continue;
    out.set(Number(name), {
      ppid: Number(f[1]),
      own: Number(f[11]) + Number(f[12]),
      reaped: Number(f[13]) + Number(f[14]),
    });
  }
  return out;
}

async function ticks(pid: number): Promise<Ticks> {
  const stats = await allStats();
  const me = stats.get(pid);
  if (!me) throw new Error(`bench: the daemon (pid ${pid}) is gone`);
  let tree = me.own + me.reaped;
  const inTree = new Set([pid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [p, s] of stats) {
      if (inTree.has(p) || !inTree.has(s.ppid)) continue;
      inTree.add(p);
      tree += s.own + s.reaped;
      grew = true;
    }
  }
  return { self: me.own, tree };
}

async function idleNode(o: {
  name: string;
  rules: boolean;
  nodes: Node[];
  nftables?: boolean;
}): Promise<Node> {
  const n = await setupNode({ backend: 'vxlan', name: o.name });
  o.nodes.push(n);
  if (o.nftables === true) await enableNftables(n);
  await putLeases(n, PEERS);
  if (o.rules)
    await sh(
      n.ns,
      ['iptables-restore', '-w', '5', '--noflush'],
      kubeNatRules({ services: SERVICES, generation: 0, jumps: true }),
    );
  await startTwill(n, ['--log-level', 'trace']);
  await waitFor(async () => (await ownedRoutes(n.ns)) === PEERS, {
    timeoutMs: 30_000,
    what: `${o.name}: every peer programmed`,
    everyMs: POLL_MS,
  });
  return n;
}

/**
 * kube-proxy's resyncs: every KUBE-* chain rewritten every CHURN_EVERY_MS (back to back when a
 * rewrite takes longer) until `until`; when each began.
 */
async function churn(n: Node, until: number): Promise<number[]> {
  const starts: number[] = [];
  let generation = 0;
  while (Date.now() < until) {
    const next = Date.now() + CHURN_EVERY_MS;
    starts.push(Date.now());
    await sh(
      n.ns,
      ['iptables-restore', '-w', '5', '--noflush'],
      kubeNatRules({ services: SERVICES, generation: ++generation, jumps: false }),
    );
    await new Promise((r) => setTimeout(r, Math.max(0, Math.min(next, until) - Date.now())));
  }
  return starts;
}

/** Passes triggered by events (not the resync timer) between `from` and `to`, by source. */
async function triggers(
  n: Node,
  from: number,
  to: number,
): Promise<{ count: number; sources: string }> {
  const lines = (await logLines(n.log)).filter(
    (l) => l.msg === 'pass triggered' && l.time >= from && l.time <= to,
  );
  const by = new Map<string, number>();
  for (const l of lines) by.set(l.source ?? '?', (by.get(l.source ?? '?') ?? 0) + 1);
  return { count: lines.length, sources: [...by].map(([s, c]) => `${s}: ${c}`).join(', ') };
}

/**
 * The nodes of a window: rules rewritten, rules left alone (the iptables window only), no extra
 * rules (the yardstick).
 */
interface Trio<T> {
  readonly churned: T;
  readonly still?: T;
  readonly bare: T;
}

interface Window {
  readonly cpu: Trio<Ticks>;
  readonly triggers: Trio<{ count: number; sources: string }>;
  readonly seconds: number;
  readonly churns: number;
}

const each = async <A, B>(t: Trio<A>, f: (a: A) => Promise<B>): Promise<Trio<B>> => ({
  churned: await f(t.churned),
  ...(t.still === undefined ? {} : { still: await f(t.still) }),
  bare: await f(t.bare),
});

/** The window, from now to `until`, while `churning` rewrites the rules (it began before). */
async function measure(
  nodes: Trio<Node>,
  until: number,
  churning: Promise<number[]>,
): Promise<Window> {
  const from = Date.now();
  const t0 = await each(nodes, (n) => ticks(n.child?.pid ?? 0));
  await new Promise((r) => setTimeout(r, Math.max(0, until - Date.now())));
  const t1 = await each(nodes, (n) => ticks(n.child?.pid ?? 0));
  const to = Date.now();
  const churns = (await churning).filter((t) => t >= from && t <= to).length;
  const d = (a: Ticks, b: Ticks): Ticks => ({ self: b.self - a.self, tree: b.tree - a.tree });
  const cpu = {
    churned: d(t0.churned, t1.churned),
    ...(t0.still === undefined || t1.still === undefined ? {} : { still: d(t0.still, t1.still) }),
    bare: d(t0.bare, t1.bare),
  };
  return {
    cpu,
    triggers: await each(nodes, (n) => triggers(n, from, to)),
    seconds: (to - from) / 1000,
    churns,
  };
}

/**
 * A window's rows: the rules left alone (when it has that node), then rewritten; in nftables
 * mode the figures say so, and the yardstick is a node in nftables mode too.
 */
async function rows(w: Window, mode: 'iptables' | 'nftables' = 'iptables'): Promise<BenchRow[]> {
  const hz = Number((await run('getconf', ['CLK_TCK'])).stdout.trim()) || 100;
  const pct = (t: number): number => Math.round((t / hz / w.seconds) * 1000) / 10;
  const rules = `${kubeRuleCount(SERVICES)} unrelated nat rules`;
  const cpu = (o: { figure: string; ticks: Ticks; pick: (t: Ticks) => number }): BenchRow => {
    const value = pct(o.pick(o.ticks));
    return {
      suite: 'idle',
      figure: o.figure,
      value,
      unit: '% of a core',
      yardstick: { name: 'no extra rules', value: pct(o.pick(w.cpu.bare)) },
      target: { text: `≤ ${TARGET_PCT} %`, met: value <= TARGET_PCT },
    };
  };
  const fired = w.triggers.churned;
  // fewer rewrites than the window holds periods: some took longer than the period
  const backToBack =
    w.churns < Math.floor((w.seconds * 1000) / CHURN_EVERY_MS) - 1 ? ', back to back' : '';
  const still = w.cpu.still;
  const inMode =
    mode === 'nftables' ? `, twill in nftables mode (over ${Math.round(w.seconds)} s)` : '';
  return [
    ...(still === undefined
      ? []
      : [
          cpu({
            figure: `idle CPU over ${Math.round(w.seconds)} s, ${PEERS} peers, ${rules} left alone: the daemon`,
            ticks: still,
            pick: (t) => t.self,
          }),
          cpu({
            figure: '  the same, its whole process tree (monitors, commands of its passes)',
            ticks: still,
            pick: (t) => t.tree,
          }),
        ]),
    cpu({
      figure: `idle CPU, ${rules} rewritten every ${CHURN_EVERY_MS / 1000} s from before the window (${w.churns}× in it${backToBack})${inMode}: the daemon`,
      ticks: w.cpu.churned,
      pick: (t) => t.self,
    }),
    cpu({
      figure: '  the same, its whole process tree (monitors, commands of its passes)',
      ticks: w.cpu.churned,
      pick: (t) => t.tree,
    }),
    {
      suite: 'idle',
      figure: `  passes triggered by kernel events while the rules were rewritten${fired.count > 0 ? ` (${fired.sources})` : ''}`,
      value: fired.count,
      unit: 'passes',
      yardstick: { name: 'no extra rules', value: w.triggers.bare.count },
      target: { text: '= 0', met: fired.count === 0 },
    },
  ];
}

/**
 * One window: the rewrites of `nodes.churned`'s rules begin with the settling, so the window
 * holds kube-proxy's steady state, not the switch from nft monitor to the chain listing their
 * first flood causes in iptables mode (once, then once per cooldown, DEFAULT_FLOOD in
 * src/dataplane/monitor.ts).
 */
async function window(nodes: Trio<Node>): Promise<Window> {
  const until = Date.now() + SETTLE_MS + WINDOW_MS;
  const churning = churn(nodes.churned, until);
  churning.catch(() => {}); // awaited (and thrown) by measure, or lost with a failed settle
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const cmd = await readFile(`/proc/${nodes.bare.child?.pid ?? 0}/cmdline`, 'utf8');
  if (!cmd.includes('main.js'))
    throw new Error(`bench: pid ${nodes.bare.child?.pid} is not the daemon: ${cmd}`);
  return measure(nodes, until, churning);
}

export const idleSuite: BenchSuite = {
  name: 'idle',
  async run() {
    await sweepStaleNetns();
    const all: Node[] = [];
    try {
      const nodes: Trio<Node> = {
        churned: await idleNode({ name: 'idle-churn', rules: true, nodes: all }),
        still: await idleNode({ name: 'idle-still', rules: true, nodes: all }),
        bare: await idleNode({ name: 'idle-bare', rules: false, nodes: all }),
      };
      const nft: Trio<Node> = {
        churned: await idleNode({ name: 'idle-nchurn', rules: true, nodes: all, nftables: true }),
        bare: await idleNode({ name: 'idle-nbare', rules: false, nodes: all, nftables: true }),
      };
      const iptablesRows = await rows(await window(nodes));
      return [...iptablesRows, ...(await rows(await window(nft), 'nftables'))];
    } finally {
      for (const n of all) await stopNode(n);
    }
  },
};
