// The drill only the Vagrant lab can do: a node machine restarted as a
// whole (`vagrant halt`, `vagrant up`), so everything on it starts from
// nothing: its twill (which takes its lease back), its pods (their
// namespaces were in /run; twill-lab-pods.service wires them again, each
// with its old address), its kernel entries. The drill measures until the
// node's pods are back and every pod reaches every pod and the outside
// again; the runner then checks, as after every drill, that no pod's address
// changed and nothing is left over.
import type { Cluster } from './cluster.ts';
import type { Drill } from './drill-kit.ts';
import { untilFull } from './matrix.ts';
import { SLOW_MACHINE_FACTOR, until } from './kit/wait.ts';
import { VagrantCluster } from './vagrant-cluster.ts';

/** The node's pods as "name ip" text, sorted. */
async function podsOf(c: Cluster, node: string): Promise<string> {
  return (await c.pods())
    .filter((p) => p.node === node)
    .map((p) => `${p.name} ${p.ip}`)
    .sort()
    .join(', ');
}

const machineRestart: Drill = {
  name: 'machine-restart',
  broke: 'a node machine restarted (vagrant halt, then vagrant up)',
  targetMs: 60_000,
  stores: ['etcd'],
  async run(c) {
    if (!(c instanceof VagrantCluster))
      return { healedMs: undefined, ok: true, notes: ['n/a: Vagrant lab only'] };
    const node = (await c.nodes())[0]?.name;
    if (node === undefined) throw new Error('no node in the lab to restart');
    const before = await podsOf(c, node);
    const since = performance.now();
    const { haltMs, upMs } = await c.restartMachine(node);
    const bound = SLOW_MACHINE_FACTOR * machineRestart.targetMs;
    // the node's pods first (a node without them would give a full matrix of the others), then
    // the matrix
    let after = '';
    const podsMs = await until(
      async () => (after = await podsOf(c, node).catch(() => '')) === before,
      {
        timeoutMs: bound,
        since,
        everyMs: 250,
      },
    );
    const healedMs =
      podsMs === undefined
        ? undefined
        : await untilFull(c, Math.max(30_000, bound - (performance.now() - since)), since);
    const notes = [
      `${node}: halted in ${Math.round(haltMs)} ms, up again in ${Math.round(upMs)} ms; its pods back ${podsMs === undefined ? 'NEVER' : `+${Math.round(podsMs)} ms`} (${after || 'none'}; before: ${before}); full matrix +${Math.round(healedMs ?? -1)} ms`,
    ];
    return { healedMs, ok: podsMs !== undefined && healedMs !== undefined, notes };
  },
};

/** Drills `drill all --vagrant` runs after the netns lab's. */
export const VAGRANT_DRILLS: readonly Drill[] = [machineRestart];
