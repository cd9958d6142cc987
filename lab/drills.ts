// The drills: each breaks the network on purpose, then measures how long
// until every pod reaches every pod and the outside again. After each one
// the runner checks that no pod's IP changed and that nothing leaked (every
// node holds exactly one entry set per live peer). Written against the
// Cluster interface only, so the same drills run on the netns and Vagrant labs.
// Each drill names the store modes it applies to; `all` is those of the lab's.
// A drill that breaks one address family says n/a on a lab without it (the
// IPv6 breaks on an IPv4 lab, the IPv4 ones on an IPv6-only lab). A drill
// that breaks the masquerade breaks it as the lab's mode keeps it, iptables or
// nftables (`up --nftables`), and says so in `broke`.
import type { Cluster, LabMode } from './cluster.ts';
import { brokeOn, leftovers, type Drill, type DrillOutcome } from './drill-kit.ts';
import { KERNEL_DRILLS } from './drills-kernel.ts';
import { KUBE_DRILLS } from './drills-kube.ts';
import { KUBELET_DRILLS } from './drills-kubelet.ts';
import { STORE_DRILLS } from './drills-store.ts';
import { untilFull } from './matrix.ts';
import { backendOf } from './store-view.ts';
import { SLOW_MACHINE_FACTOR, until } from './kit/wait.ts';

/** In the order `all` runs them (within one store mode). */
export const DRILLS: readonly Drill[] = [
  ...KERNEL_DRILLS,
  ...KUBE_DRILLS,
  ...STORE_DRILLS,
  ...KUBELET_DRILLS,
];

/** The drills `all` runs on a lab of this mode. */
export function drillsFor(mode: LabMode): readonly Drill[] {
  return DRILLS.filter((d) => d.stores.includes(mode));
}

export interface DrillResult {
  readonly name: string;
  readonly broke: string;
  readonly healedMs: number | null;
  readonly targetMs: number;
  /** healed within the target (null: the drill does not apply, or it never healed) */
  readonly met: boolean | null;
  readonly ipChanged: readonly string[];
  readonly leftovers: readonly string[];
  readonly notes: readonly string[];
  /**
   * It worked: healed (within SLOW_MACHINE_FACTOR × the target), did what it
   * must, full connectivity after, no pod IP changed, nothing left over.
   * Whether it was fast enough is `met`.
   */
  readonly pass: boolean;
}

/** "n/a: …" when the drill does not apply to this lab's store or backend. */
async function notApplicable(c: Cluster, d: Drill): Promise<string | undefined> {
  if (!d.stores.includes(c.mode)) return `n/a: ${d.stores.join(' or ')} lab only`;
  if (d.only && (await backendOf(c)) !== d.only) return `n/a: ${d.only} only`;
  return familyNotApplicable(d, c);
}

/**
 * "n/a: …" when the drill breaks an address family this lab's pods do not have: an IPv6 break
 * on an IPv4 lab, an IPv4 break on an IPv6-only lab (where twill keeps no IPv4 rule, route,
 * neighbour, FDB entry or device to break).
 */
export function familyNotApplicable(
  d: Pick<Drill, 'dualStackOnly' | 'ipv4Only'>,
  c: Pick<Cluster, 'outsideIp6' | 'ipv6Only'>,
): string | undefined {
  if (d.dualStackOnly === true && c.outsideIp6 === undefined)
    return 'n/a: dual-stack lab only (up --dual-stack) or IPv6-only (up --store kube --ipv6-only)';
  if (d.ipv4Only === true && c.ipv6Only === true)
    return 'n/a: breaks IPv4, and an IPv6-only lab has none (twill runs with EnableIPv4 false: no IPv4 rule, route, neighbour, FDB entry or device)';
  return undefined;
}

/** The result of a drill this lab cannot hold ("n/a: …" in `notes`): it passes, untimed. */
export function notApplicableResult(d: Drill, notes: readonly string[]): DrillResult {
  return {
    name: d.name,
    broke: d.broke,
    healedMs: null,
    targetMs: d.targetMs,
    met: null,
    ipChanged: [],
    leftovers: [],
    notes: [...notes],
    pass: true,
  };
}

export async function runDrill(c: Cluster, d: Drill): Promise<DrillResult> {
  const na = await notApplicable(c, d);
  if (na !== undefined) return notApplicableResult(d, [na]);
  const podsBefore = await c.pods();
  const out = await d.run(c).catch((err: unknown): DrillOutcome => ({
    healedMs: undefined,
    ok: false,
    notes: [`failed: ${err instanceof Error ? err.message : String(err)}`],
  }));
  // a drill may find out itself that this lab cannot hold it (etcd-leader-loss on a one-member
  // etcd): "n/a: …", like the above
  if (out.ok && out.healedMs === undefined && out.notes[0]?.startsWith('n/a') === true)
    return notApplicableResult(d, out.notes);
  const full = await untilFull(c, 30_000);
  const podsAfter = new Map((await c.pods()).map((p) => [p.name, p.ip]));
  // a drill that recreates pods checks their new addresses itself (each in its node's subnet)
  const ipChanged =
    d.podsRecreated === true
      ? []
      : podsBefore
          .filter((p) => podsAfter.has(p.name) && podsAfter.get(p.name) !== p.ip)
          .map((p) => `${p.name} ${p.ip} → ${podsAfter.get(p.name)}`);
  const left = await settledLeftovers(c);
  const notes = [...out.notes];
  if (full === undefined) notes.push('no full connectivity 30 s after the drill');
  const slowBound = SLOW_MACHINE_FACTOR * d.targetMs;
  const healedMs = out.healedMs ?? null;
  if (healedMs !== null && healedMs > slowBound)
    notes.push(
      `healed in ${Math.round(healedMs)} ms: past ${SLOW_MACHINE_FACTOR} × the target, too slow even for a slow machine`,
    );
  const pass =
    out.ok &&
    healedMs !== null &&
    healedMs <= slowBound &&
    full !== undefined &&
    ipChanged.length === 0 &&
    left.length === 0;
  return {
    name: d.name,
    broke: brokeOn(d, c),
    healedMs,
    targetMs: d.targetMs,
    met: healedMs === null ? null : healedMs <= d.targetMs,
    ipChanged,
    leftovers: left,
    notes,
    pass,
  };
}

/** Leftovers, given a few seconds to settle (a removed peer's entries go within a second). */
async function settledLeftovers(c: Cluster): Promise<string[]> {
  let left: string[] = [];
  await until(async () => (left = await leftovers(c)).length === 0, {
    timeoutMs: 5_000,
    everyMs: 200,
  });
  return left;
}

export async function runDrills(
  c: Cluster,
  names: readonly string[],
  progress: (line: string) => void,
): Promise<DrillResult[]> {
  const results: DrillResult[] = [];
  for (const name of names) {
    const d = DRILLS.find((x) => x.name === name);
    if (!d) throw new Error(`no drill named ${name}`);
    progress(`drill ${name}: ${brokeOn(d, c)}…`);
    results.push(await runDrill(c, d));
  }
  return results;
}

export function renderDrills(results: readonly DrillResult[]): string {
  const head = [
    'drill',
    'what was broken',
    'back in',
    'target',
    'met',
    'pod IPs changed',
    'leftovers',
    'result',
  ];
  const rows = results.map((r) => [
    r.name,
    r.broke,
    r.healedMs === null ? '-' : `${Math.round(r.healedMs)} ms`,
    `≤ ${r.targetMs} ms`,
    r.met === null ? '-' : r.met ? 'yes' : 'NO',
    String(r.ipChanged.length),
    String(r.leftovers.length),
    r.pass ? (r.notes[0]?.startsWith('n/a') ? 'n/a' : 'pass') : 'FAIL',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((x, i) => x.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  const details = results.flatMap((r) => [
    ...r.notes.map((n) => `  ${r.name}: ${n}`),
    ...r.leftovers.map((l) => `  ${r.name}: leftover: ${l}`),
    ...r.ipChanged.map((p) => `  ${r.name}: IP changed: ${p}`),
  ]);
  return [
    line(head),
    line(widths.map((w) => '-'.repeat(w))),
    ...rows.map(line),
    '',
    ...details,
  ].join('\n');
}
