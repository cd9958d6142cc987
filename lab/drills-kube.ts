// Drills for the Kubernetes store (kube mode): a Node deleted (its twill
// stopped first, as when a machine goes away, then `kubectl delete node`),
// and the kube-apiserver stopped for 20 s while the pods keep talking, with
// a node added after it came back.
import type { Cluster } from './cluster.ts';
import { goneNode, nextNames, podsPerNode, stillSince, type Drill } from './drill-kit.ts';
import { timeGoneFromPeers } from './kernel-watch.ts';
import { connectivity, untilFull } from './matrix.ts';
import { leaseOf } from './store-view.ts';

const OUTAGE_MS = 20_000;

const nodeDeleted: Drill = {
  name: 'node-deleted',
  broke: "a node's twill stopped, then its Node deleted (kubectl delete node)",
  targetMs: 1_000,
  stores: ['kube'],
  async run(c) {
    const victim = (await c.nodes()).at(-1);
    const lease = await leaseOf(c, victim);
    if (!victim || !lease)
      throw new Error(`no node with a Node object to delete (last node ${victim?.name ?? '-'})`);
    // the machine goes away first: peers notice nothing until its Node object is deleted
    await c.stopTwill(victim.name, 'term');
    const outcome = await timeGoneFromPeers(c, {
      victim: goneNode(victim, lease),
      remove: () => c.kubectl(['delete', 'node', victim.name]),
      what: 'kubectl delete node',
      graceMs: 0,
    });
    // then the rest of the removal (its Node is gone already); not while peers are watched, so the
    // lab's own
    // clean-up does not compete with the peers' twill for the CPU
    await c.removeNode(victim.name);
    return outcome;
  },
};

/** Matrices, one after another, for `ms`: every failure seen, and how many rounds ran. */
async function matricesFor(
  c: Cluster,
  ms: number,
): Promise<{ rounds: number; failures: Set<string> }> {
  const failures = new Set<string>();
  const end = performance.now() + ms;
  let rounds = 0;
  while (performance.now() < end) {
    for (const f of (await connectivity(c)).failures) failures.add(f);
    rounds++;
  }
  return { rounds, failures };
}

const apiServerOutage: Drill = {
  name: 'apiserver-outage',
  broke: `kube-apiserver stopped for ${OUTAGE_MS / 1000} s, then a node added`,
  targetMs: 30_000,
  stores: ['kube'],
  async run(c) {
    const still = await stillSince(c);
    await c.stopApiServer();
    const during = await matricesFor(c, OUTAGE_MS);
    const s = await still();
    await c.startApiServer();
    const since = performance.now();
    const [name] = await nextNames(c, 1);
    const perNode = await podsPerNode(c);
    await c.addNodes([name ?? 'n99'], perNode);
    const healedMs = await untilFull(c, 30_000, since);
    const notes = [
      `${during.rounds} matrices while the apiserver was down: ${during.failures.size === 0 ? 'all full' : [...during.failures].join(', ')}`,
      `during the outage: ${s.note}`,
      `${name} added after the restart, reachable from every pod ${Math.round(healedMs ?? -1)} ms after the apiserver was ready`,
    ];
    return {
      healedMs,
      ok: healedMs !== undefined && during.failures.size === 0 && s.unchanged && s.quiet,
      notes,
    };
  },
};

export const KUBE_DRILLS: readonly Drill[] = [apiServerOutage, nodeDeleted];
