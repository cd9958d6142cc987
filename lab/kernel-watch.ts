// Timing a repair from the kernel's side. Monitors in the node's own
// network namespace (`ip -ts monitor` for links, addresses, routes,
// neighbours and FDB entries; `nft monitor` for rules, iptables-nft's chains
// and, in nftables mode, twill's own tables) record every event
// about twill's objects with the time it happened. The drill's break and
// twill's repair are events of the same streams, so "healed" is the last
// repair event minus the break event, whatever observing costs; and the
// drill checks the node's state only once the streams have gone quiet, so
// the check does not compete with twill for the CPU while it repairs.
import { KERNEL_IPV6 } from '../src/dataplane/monitor.ts';
import { pause } from '../src/util/abort.ts';
import type { Cluster } from './cluster.ts';
import { goneEverywhere, type DrillOutcome, type GoneNode } from './drill-kit.ts';
import { SLOW_MACHINE_FACTOR } from './kit/wait.ts';
import { passesBetween, renderStages } from './pass-log.ts';

export interface KernelEvent {
  /** epoch ms: `ip -ts`'s own stamp, or when the line arrived (nft prints none) */
  readonly at: number;
  readonly line: string;
}

const IP_MONITOR = ['ip', '-ts', 'monitor', 'link', 'address', 'route', 'neigh'];
const NFT_MONITOR = ['nft', 'monitor'];
const PROBE_ADDR = '127.0.0.77/32';
const PROBE_TABLE = 'twlprobe';

/** "[2026-11-24T02:53:49.080603] rest" → epoch ms (local time, as ip prints it) and the rest. */
export function parseStamped(raw: string): { at: number; line: string } | undefined {
  const m = /^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?\]\s?(.*)$/.exec(raw);
  if (!m) return undefined;
  const at = new Date(m[1] ?? '').getTime() + Number(`0${m[2] ?? ''}`) * 1000;
  return Number.isFinite(at) ? { at, line: m[3] ?? '' } : undefined;
}

/** nft monitor lines about twill's rules: its chains, the jumps to them, its own tables. */
const TWILL_RULES = /TWILL-|\b(nat|filter) (POSTROUTING|FORWARD)\b|\bip6? twill-ipv[46]\b/;
/** ip monitor lines about twill's devices (both families) and routes with its protocol. */
const TWILL_ENTRIES = /\btwill(-v6)?\.\d+\b|\bproto 151\b/;

/**
 * Whether a monitor line is about something twill owns: its devices (both families), routes
 * with its protocol, its chains and the jumps to them, and in nftables mode its tables
 * (`twill-ipv4`, `twill-ipv6`: their chains and rules). Link-local and multicast IPv6 lines
 * (fe80::/10, ff00::/8, the local table) are the kernel's own churn on twill's devices; a rule
 * line is never that, even when it names ff00::/8 (the IPv6 masquerade rule does).
 */
export function concernsTwill(line: string): boolean {
  if (TWILL_RULES.test(line)) return true;
  return !KERNEL_IPV6.test(line) && TWILL_ENTRIES.test(line);
}

export interface KernelWatch {
  /** every event about twill's objects so far, in arrival order */
  readonly events: readonly KernelEvent[];
  /** when the last such event arrived here (performance.now()) */
  readonly lastArrival: number;
  stop(): Promise<void>;
}

/**
 * Starts both monitors on each node and returns once every one has shown it
 * is listening (a probe address on lo and a probe nft table, added and
 * removed: neither is anything twill watches). Their events go to one list.
 */
export async function watchKernel(
  c: Cluster,
  nodes: string | readonly string[],
): Promise<KernelWatch> {
  const ctl = new AbortController();
  const events: KernelEvent[] = [];
  const w = { events, lastArrival: 0, stop: async (): Promise<void> => undefined };
  const running: Promise<void>[] = [];
  w.stop = async () => {
    ctl.abort();
    await Promise.allSettled(running);
  };
  try {
    for (const node of typeof nodes === 'string' ? [nodes] : nodes)
      await watchNode(c, node, { w, running, signal: ctl.signal });
  } catch (err) {
    await w.stop();
    throw err;
  }
  return w;
}

async function watchNode(
  c: Cluster,
  node: string,
  o: {
    w: { events: KernelEvent[]; lastArrival: number };
    running: Promise<void>[];
    signal: AbortSignal;
  },
): Promise<void> {
  const { w, signal } = o;
  const { events } = w;
  const seen = { ip: false, nft: false };
  const take = (at: number, line: string): void => {
    if (!concernsTwill(line)) return;
    events.push({ at, line });
    w.lastArrival = performance.now();
  };
  const onIp = (raw: string): void => {
    const s = parseStamped(raw);
    if (!s) return;
    if (s.line.includes(PROBE_ADDR.split('/')[0] ?? '?')) seen.ip = true;
    take(s.at, s.line);
  };
  const onNft = (line: string): void => {
    if (line.includes(PROBE_TABLE)) seen.nft = true;
    take(Date.now(), line);
  };
  const running = [
    c.watch({ node }, IP_MONITOR, { signal, onLine: onIp }),
    c.watch({ node }, NFT_MONITOR, { signal, onLine: onNft }),
  ];
  o.running.push(...running);
  const failed = Promise.race(running).then(
    () => new Error('a monitor ended'),
    (err: unknown) => (err instanceof Error ? err : new Error(String(err))),
  );
  const probe = [
    'sh',
    '-c',
    `ip addr add ${PROBE_ADDR} dev lo && ip addr del ${PROBE_ADDR} dev lo; nft add table ip ${PROBE_TABLE} && nft delete table ip ${PROBE_TABLE}`,
  ];
  const bound = performance.now() + 20_000;
  let problem: Error | undefined;
  void failed.then((e) => (problem = e));
  while (!(seen.ip && seen.nft)) {
    if (problem || performance.now() > bound) {
      throw new Error(
        `the kernel monitors on ${node} did not start: ${problem?.message ?? 'no probe event within 20 s'}`,
      );
    }
    await c.sh({ node }, probe).catch(() => '');
    await pause(100);
  }
}

export interface Healing {
  /**
   * epoch ms of the first event about twill after the break command started (or, `fromBreakDone`,
   * when the command ended)
   */
  readonly brokeAt: number | undefined;
  /** epoch ms of the last event before the state check that found the node whole */
  readonly healedAt: number | undefined;
  /** healedAt − brokeAt; undefined when the node was not whole within the bound */
  readonly healedMs: number | undefined;
  /** state checks run (each only after the monitors were quiet for QUIET_MS) */
  readonly checks: number;
  /**
   * how long after the break command started its event was stamped (spawning the command included)
   */
  readonly breakLagMs: number | undefined;
}

/** How long the monitors must be silent before the state is checked. */
export const QUIET_MS = 250;

/**
 * Runs the break, then waits until the node's state is whole again (`whole`,
 * checked only after QUIET_MS without events, at most until `boundMs`).
 */
export async function timeRepair(
  w: KernelWatch,
  o: {
    breakIt: () => Promise<unknown>;
    whole: () => Promise<boolean>;
    boundMs: number;
    fromBreakDone?: boolean;
  },
): Promise<Healing> {
  const from = w.events.length;
  const started = Date.now();
  const deadline = performance.now() + o.boundMs;
  await o.breakIt();
  const done = Date.now();
  // the break's own event first: a check before it arrives could find the node whole too early
  const firstBound = Math.min(deadline, performance.now() + 2_000);
  while (w.events.length === from && performance.now() < firstBound) await pause(5);
  let checks = 0;
  let healedAt: number | undefined;
  for (;;) {
    const quietFor = performance.now() - w.lastArrival;
    if (quietFor < QUIET_MS && performance.now() < deadline) {
      await pause(QUIET_MS - quietFor + 5);
      continue;
    }
    const upTo = w.events.length;
    checks++;
    if (await o.whole()) {
      healedAt = w.events.slice(from, upTo).at(-1)?.at;
      break;
    }
    if (performance.now() >= deadline) break;
    await pause(50);
  }
  const brokeAt = o.fromBreakDone
    ? done
    : w.events.slice(from).find((e) => e.at >= started - 5)?.at;
  const healedMs =
    healedAt !== undefined && brokeAt !== undefined
      ? Math.max(0, healedAt - brokeAt)
      : healedAt !== undefined
        ? 0
        : undefined;
  return {
    brokeAt,
    healedAt,
    healedMs,
    checks,
    breakLagMs: brokeAt === undefined ? undefined : brokeAt - started,
  };
}

/**
 * A node gone: times, from its peers' kernels, how long after `remove` (the
 * lease deleted, the Node deleted) returned every peer held no route,
 * neighbour or FDB entry for it any more, and says where the time went.
 */
export async function timeGoneFromPeers(
  c: Cluster,
  o: {
    victim: GoneNode;
    remove: () => Promise<unknown>;
    what: string;
    graceMs: number;
  },
): Promise<DrillOutcome> {
  const peers = (await c.nodes()).filter((n) => n.name !== o.victim.name).map((n) => n.name);
  const w = await watchKernel(c, peers);
  try {
    let removeMs = 0;
    const breakIt = async (): Promise<void> => {
      const t = performance.now();
      await o.remove();
      removeMs = performance.now() - t;
    };
    const h = await timeRepair(w, {
      breakIt,
      whole: () => goneEverywhere(c, o.victim),
      boundMs: SLOW_MACHINE_FACTOR * 1_000,
      fromBreakDone: true,
    });
    const grace =
      o.graceMs > 0
        ? `; ${o.graceMs} ms of that is twill's delete grace (a running node re-creates a deleted key meanwhile)`
        : '';
    const notes = [
      `${o.victim.name} (${[o.victim.subnet, o.victim.subnet6].filter((x) => x != null).join(' + ')}) gone from every peer ${Math.round(h.healedMs ?? -1)} ms after ${o.what} returned (it took ${Math.round(removeMs)} ms)${grace}`,
      `timed by ip monitors in the peers' namespaces; ${h.checks} state check(s), each after ${QUIET_MS} ms without events`,
    ];
    if (h.brokeAt !== undefined && h.healedAt !== undefined) {
      for (const p of peers)
        notes.push(
          ...renderStages(
            passesBetween(await c.twillLog(p), h.brokeAt, h.healedAt + 2_000),
            h.brokeAt,
          ).map((l) => `${p}: ${l}`),
        );
    }
    return { healedMs: h.healedMs, ok: h.healedMs !== undefined, notes };
  } finally {
    await w.stop();
  }
}
