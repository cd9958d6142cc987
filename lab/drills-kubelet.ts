// Drills for the kubelet lab (`up --kubelet`): twill as it runs in a
// cluster, a DaemonSet pod started by kubelet next to kube-proxy, its CNI
// plugin called by containerd for every pod. Each breaks something that
// happens to real clusters (a pod deleted, a rolling update, kubelet or
// containerd restarted, a node rebooted, drained and deleted, a node
// joining), times the way back, and counts what a continuous ping between
// pods on different nodes lost meanwhile (the goal is none).
import { rm } from 'node:fs/promises';
import type { Cluster, KubeletControl, LabPod } from './cluster.ts';
import {
  goneEverywhere,
  goneNode,
  nextNames,
  podsPerNode,
  type Drill,
  type DrillOutcome,
} from './drill-kit.ts';
import { timeGoneFromPeers } from './kernel-watch.ts';
import { ping, untilFull } from './matrix.ts';
import { isLeaseOf, leaseOf, leases } from './store-view.ts';
import { SLOW_MACHINE_FACTOR, until } from './kit/wait.ts';
import { pause } from '../src/util/abort.ts';
import { containsAddr, parseCidr, parseIpv4 } from '../src/net/ipv4.ts';

const TWILL_NS = 'twill-system';

function kubeletOf(c: Cluster): KubeletControl {
  if (!c.kubeletControl) throw new Error(`${c.description}: not a kubelet lab (up --kubelet)`);
  return c.kubeletControl;
}

/** A pod on `node` (or the first node) and one on another node. */
async function crossPair(c: Cluster, node?: string): Promise<{ from: LabPod; to: LabPod }> {
  const pods = await c.pods();
  const from = pods.find((p) => p.node === (node ?? pods[0]?.node));
  const to = pods.find((p) => from !== undefined && p.node !== from.node);
  if (!from || !to) throw new Error('this drill needs test pods on two nodes');
  return { from, to };
}

export interface Loss {
  readonly sent: number;
  readonly lost: number;
}

/**
 * Runs `action` while `from` pings `to` every 50 ms (from 0.5 s before to
 * 1.5 s after); a sequence number counts as lost when ping reported no
 * answer for it and no late reply came.
 */
export async function lossDuring(
  c: Cluster,
  o: { from: LabPod; to: LabPod },
  action: () => Promise<void>,
): Promise<Loss> {
  const replied = new Set<number>();
  const unanswered = new Set<number>();
  let maxSeq = 0;
  const ac = new AbortController();
  const onLine = (line: string): void => {
    const seq = Number(/icmp_seq=(\d+)/.exec(line)?.[1]);
    if (!Number.isInteger(seq)) return;
    maxSeq = Math.max(maxSeq, seq);
    if (line.startsWith('no answer yet')) unanswered.add(seq);
    else if (line.includes('bytes from')) replied.add(seq);
  };
  // -O: report each request that got no reply before the next one went out
  const watching = c
    .watch({ pod: o.from.name }, ['ping', '-O', '-n', '-i', '0.05', '-W', '1', o.to.ip], {
      signal: ac.signal,
      onLine,
    })
    .catch(() => undefined);
  try {
    await pause(500);
    await action();
    await pause(1_500);
  } finally {
    ac.abort();
    await watching;
  }
  const lost = [...unanswered].filter((s) => !replied.has(s)).length;
  return { sent: maxSeq, lost };
}

const lossNote = (o: { from: LabPod; to: LabPod }, l: Loss): string =>
  `continuous ping ${o.from.name} (${o.from.node}) → ${o.to.name} (${o.to.node}) every 50 ms: ${l.sent} sent, ${l.lost} lost`;

/** The node's twill pod, which must exist. */
async function twillPod(
  k: KubeletControl,
  node: string,
): Promise<NonNullable<Awaited<ReturnType<KubeletControl['twillPodOf']>>>> {
  const p = await k.twillPodOf(node);
  if (!p) throw new Error(`no twill pod on ${node}`);
  return p;
}

const twillPodDeleted: Drill = {
  name: 'twill-pod-deleted',
  broke: "a node's twill pod deleted (the DaemonSet makes a new one, kubelet starts it)",
  targetMs: 30_000,
  stores: ['kubelet'],
  async run(c) {
    const k = kubeletOf(c);
    const pair = await crossPair(c);
    const before = await twillPod(k, pair.from.node);
    let healedMs: number | undefined;
    const loss = await lossDuring(c, pair, async () => {
      const since = performance.now();
      await c.kubectl(['delete', 'pod', '-n', TWILL_NS, before.name, '--wait=false']);
      healedMs = await until(
        async () => {
          const p = await k.twillPodOf(pair.from.node);
          return p !== undefined && p.uid !== before.uid && p.ready;
        },
        { timeoutMs: SLOW_MACHINE_FACTOR * 30_000, since, everyMs: 250 },
      );
    });
    const notes = [
      `${before.name} on ${pair.from.node} deleted; its successor ready ${Math.round(healedMs ?? -1)} ms later`,
      lossNote(pair, loss),
    ];
    return { healedMs, ok: healedMs !== undefined && loss.lost === 0, notes };
  },
};

const rollingUpdate: Drill = {
  name: 'rolling-update',
  broke: "the DaemonSet's pod template changed: kubelet replaces twill node by node",
  targetMs: 90_000,
  stores: ['kubelet'],
  async run(c) {
    const k = kubeletOf(c);
    const nodes = await c.nodes();
    const pair = await crossPair(c);
    const before = new Map(
      await Promise.all(nodes.map(async (n) => [n.name, (await twillPod(k, n.name)).uid] as const)),
    );
    let healedMs: number | undefined;
    let rolled = 0;
    const loss = await lossDuring(c, pair, async () => {
      const since = performance.now();
      const patch = {
        spec: {
          template: {
            metadata: { annotations: { 'twill-lab/rolled-at': new Date().toISOString() } },
          },
        },
      };
      await c.kubectl([
        'patch',
        'daemonset',
        'twill',
        '-n',
        TWILL_NS,
        '--type',
        'merge',
        '-p',
        JSON.stringify(patch),
      ]);
      await c.kubectl(
        [
          'rollout',
          'status',
          'daemonset/twill',
          '-n',
          TWILL_NS,
          `--timeout=${SLOW_MACHINE_FACTOR * 90}s`,
        ],
        { timeoutMs: SLOW_MACHINE_FACTOR * 90_000 + 10_000 },
      );
      healedMs = performance.now() - since;
      for (const n of nodes) if ((await k.twillPodOf(n.name))?.uid !== before.get(n.name)) rolled++;
    });
    const notes = [
      `rollout over ${nodes.length} nodes done in ${Math.round(healedMs ?? -1)} ms; ${rolled} of ${nodes.length} twill pods replaced`,
      lossNote(pair, loss),
    ];
    return {
      healedMs,
      ok: healedMs !== undefined && rolled === nodes.length && loss.lost === 0,
      notes,
    };
  },
};

/** A node process restarted: pods and twill keep running, the node is Ready again, nothing lost. */
function processRestart(o: {
  name: string;
  what: string;
  restart: (k: KubeletControl, node: string) => Promise<void>;
}): Drill {
  return {
    name: o.name,
    broke: `${o.what} restarted on a node (SIGTERM, then started again)`,
    targetMs: 30_000,
    stores: ['kubelet'],
    async run(c) {
      const k = kubeletOf(c);
      const pair = await crossPair(c);
      const node = pair.from.node;
      const before = await twillPod(k, node);
      const perNode = (await c.pods()).filter((p) => p.node === node).length;
      let healedMs: number | undefined;
      const loss = await lossDuring(c, pair, async () => {
        const since = performance.now();
        await o.restart(k, node);
        await k.untilNodesSetUp([node], SLOW_MACHINE_FACTOR * 30_000);
        await k.untilPodsReady([node], perNode, SLOW_MACHINE_FACTOR * 30_000);
        healedMs = performance.now() - since;
      });
      const after = await twillPod(k, node);
      const kept = after.uid === before.uid && after.restarts === before.restarts;
      const notes = [
        `${o.what} on ${node} back, node Ready and its pods ready ${Math.round(healedMs ?? -1)} ms after the restart began`,
        kept
          ? `twill pod ${before.name} kept running (no restart)`
          : `twill pod changed: ${before.name} (${before.restarts} restarts) → ${after.name} (${after.restarts})`,
        lossNote(pair, loss),
      ];
      return { healedMs, ok: healedMs !== undefined && kept && loss.lost === 0, notes };
    },
  };
}

/** Each test pod's address is in its node's subnet; problems otherwise. */
async function inOwnSubnets(c: Cluster, pods: readonly LabPod[]): Promise<string[]> {
  const nodes = await c.nodes();
  const all = await leases(c);
  const problems: string[] = [];
  for (const p of pods) {
    const node = nodes.find((n) => n.name === p.node);
    const subnet =
      node === undefined ? undefined : (all.find((l) => isLeaseOf(l, node))?.subnet ?? undefined);
    const cidr = subnet === undefined ? undefined : parseCidr(subnet, { strict: true });
    const addr = parseIpv4(p.ip);
    if (!cidr || addr === undefined || !containsAddr(cidr, addr))
      problems.push(`${p.name} has ${p.ip}, outside ${p.node}'s subnet ${subnet ?? '(none)'}`);
  }
  return problems;
}

/**
 * IPAM reservations on the node that no running test pod explains (the twill pod is hostNetwork: it
 * holds none).
 */
async function leakedAddresses(c: Cluster, node: string): Promise<string[]> {
  const k = kubeletOf(c);
  const used = new Set((await c.pods()).filter((p) => p.node === node).map((p) => p.ip));
  return (await k.ipamReserved(node)).filter((ip) => !used.has(ip));
}

const podsWhileTwillDown: Drill = {
  name: 'pods-while-twill-down',
  broke:
    'twill taken off a node (a taint it does not tolerate) and its subnet.env gone (as after a reboot); pods created meanwhile',
  targetMs: 30_000,
  stores: ['kubelet'],
  async run(c) {
    const k = kubeletOf(c);
    const node = (await c.nodes()).at(-1)?.name ?? '';
    const taint = 'twill-lab/twill-down=true:NoExecute';
    const late = [`${node}-late1`, `${node}-late2`];
    const notes: string[] = [];
    let ok: boolean;
    await c.kubectl(['taint', 'node', node, taint]);
    try {
      const gone = await until(async () => (await k.twillPodOf(node)) === undefined, {
        timeoutMs: SLOW_MACHINE_FACTOR * 30_000,
        everyMs: 250,
      });
      if (gone === undefined) throw new Error(`twill's pod stayed on ${node} despite the taint`);
      await rm(k.subnetEnvPath(node), { force: true });
      const reservedBefore = await k.ipamReserved(node);
      await c.kubectl(['apply', '-f', '-'], {
        input: JSON.stringify({
          apiVersion: 'v1',
          kind: 'List',
          items: late.map((n) => JSON.parse(k.testPodManifest(n, node)) as unknown),
        }),
      });
      // kubelet keeps retrying the sandbox; none may come up, none may leak an address
      await pause(8_000);
      const upWithout = (await c.pods()).filter((p) => late.includes(p.name));
      const reservedDuring = await k.ipamReserved(node);
      const events = await c
        .kubectl([
          'get',
          'events',
          '-n',
          'default',
          '--field-selector',
          `involvedObject.name=${late[0] ?? ''}`,
          '-o',
          'jsonpath={range .items[*]}{.reason}{"\\n"}{end}',
        ])
        .catch(() => '');
      notes.push(
        `twill off ${node} after ${Math.round(gone)} ms; for 8 s without it: ${upWithout.length} of ${late.length} new pods up, kubelet events: ${[...new Set(events.split('\n').filter(Boolean))].join(', ') || 'none'}, ${reservedDuring.length - reservedBefore.length} addresses reserved meanwhile`,
      );
      if (upWithout.length > 0 || reservedDuring.length !== reservedBefore.length)
        notes.push('FAULT: pods came up, or addresses were reserved, while twill was off the node');
      ok = upWithout.length === 0 && reservedDuring.length === reservedBefore.length;
    } finally {
      await c
        .kubectl(['taint', 'node', node, `${taint.replace(/=.*$/, '')}:NoExecute-`])
        .catch(() => undefined);
    }
    const since = performance.now();
    const perNode = (await c.pods()).filter(
      (p) => p.node === node && !late.includes(p.name),
    ).length;
    await k
      .untilPodsReady([node], perNode + late.length, SLOW_MACHINE_FACTOR * 30_000)
      .catch(() => undefined);
    const others = (await c.pods()).filter((p) => p.node !== node);
    const latePods = (await c.pods()).filter((p) => late.includes(p.name));
    const reached = await until(
      async () => {
        const all = await Promise.all(
          latePods.flatMap((l) => others.map((o) => ping(c, o.name, l.ip))),
        );
        return latePods.length === late.length && all.every(Boolean);
      },
      { timeoutMs: SLOW_MACHINE_FACTOR * 30_000, since, everyMs: 100 },
    );
    notes.push(
      `taint removed: the new pods up and reached from every other node's pods ${Math.round(reached ?? -1)} ms later, at ${latePods.map((p) => p.ip).join(', ')}`,
    );
    const outside = await inOwnSubnets(c, latePods);
    notes.push(...outside);
    await c.kubectl(['delete', 'pod', ...late, '--wait=true', '--timeout=120s'], {
      timeoutMs: 150_000,
    });
    const leaked = await leakedAddresses(c, node);
    if (leaked.length > 0) notes.push(`leaked addresses on ${node}: ${leaked.join(', ')}`);
    return {
      healedMs: reached,
      ok: ok && reached !== undefined && outside.length === 0 && leaked.length === 0,
      notes,
    };
  },
};

const nodeReboot: Drill = {
  name: 'node-reboot',
  broke:
    'every process of a node killed at once (kubelet, containerd, shims, pods, twill) and started again, tmpfs state gone',
  targetMs: 60_000,
  stores: ['kubelet'],
  podsRecreated: true,
  async run(c) {
    const k = kubeletOf(c);
    const node = (await c.nodes()).at(-1)?.name ?? '';
    const before = (await c.pods()).filter((p) => p.node === node);
    const containers = await k.testPodContainers(node);
    const since = performance.now();
    await k.reboot(node);
    // the API shows the old pods ready until the new kubelet reports: wait for new containers in
    // every one
    const remade = await until(
      async () => {
        const now = await k.testPodContainers(node);
        return [...containers].every(([pod, id]) => now.has(pod) && now.get(pod) !== id);
      },
      { timeoutMs: SLOW_MACHINE_FACTOR * 60_000, since, everyMs: 250 },
    );
    if (remade === undefined)
      throw new Error(`${node}'s test pods were not made anew after the reboot`);
    const healedMs = await untilFull(c, SLOW_MACHINE_FACTOR * 60_000, since);
    const after = (await c.pods()).filter((p) => p.node === node);
    const outside = await inOwnSubnets(c, after);
    // kubelet tears the dead sandboxes down (CNI DEL) once containerd is back: their addresses must
    // come free
    const settled = await until(async () => (await leakedAddresses(c, node)).length === 0, {
      timeoutMs: SLOW_MACHINE_FACTOR * 10_000,
      everyMs: 500,
    });
    const leaked = await leakedAddresses(c, node);
    const notes = [
      `${node} rebooted: its ${after.length} pods recreated and every pod reaching every pod ${Math.round(healedMs ?? -1)} ms after the kill`,
      `pod addresses ${before.map((p) => p.ip).join(', ')} → ${after.map((p) => p.ip).join(', ')} (all in ${node}'s subnet: ${outside.length === 0 ? 'yes' : outside.join('; ')})`,
      leaked.length === 0
        ? `stale IPAM reclaimed: only the running pods' addresses reserved (${Math.round(settled ?? -1)} ms after the pods were back)`
        : `stale IPAM left: ${leaked.join(', ')}`,
    ];
    return {
      healedMs,
      ok:
        healedMs !== undefined &&
        outside.length === 0 &&
        leaked.length === 0 &&
        after.length === before.length,
      notes,
    };
  },
};

const nodeDrainDelete: Drill = {
  name: 'node-drain-delete',
  broke: 'a node drained, its processes stopped, its Node deleted',
  targetMs: 1_000,
  stores: ['kubelet'],
  async run(c) {
    const victim = (await c.nodes()).at(-1);
    const lease = await leaseOf(c, victim);
    if (!victim || !lease) throw new Error('no node with a lease to delete');
    await c.kubectl(
      [
        'drain',
        victim.name,
        '--ignore-daemonsets',
        '--delete-local-data',
        '--force',
        '--grace-period=1',
        '--timeout=120s',
      ],
      { timeoutMs: 180_000 },
    );
    const outcome: DrillOutcome = await timeGoneFromPeers(c, {
      victim: goneNode(victim, lease),
      remove: () => c.kubectl(['delete', 'node', victim.name]),
      what: 'kubectl delete node',
      graceMs: 0,
    });
    // its processes go with the rest of the removal (the Node is gone already)
    await c.removeNode(victim.name);
    const gone = await goneEverywhere(c, goneNode(victim, lease));
    return { ...outcome, ok: outcome.ok && gone };
  },
};

const nodeJoin: Drill = {
  name: 'node-join',
  broke:
    'a new node joins: kubelet registers, the controller-manager gives it a podCIDR, the DaemonSet starts twill there',
  targetMs: 60_000,
  stores: ['kubelet'],
  async run(c) {
    const [name = 'n9'] = await nextNames(c, 1);
    const perNode = await podsPerNode(c);
    const others = (await c.pods()).slice(0, 3);
    let createdAt: number | undefined;
    let firstPingAt: number | undefined;
    const adding = c.addNodes([name], perNode);
    const watching = (async () => {
      await until(
        async () =>
          await c.kubectl(['get', 'node', name, '-o', 'name']).then(
            () => true,
            () => false,
          ),
        { timeoutMs: SLOW_MACHINE_FACTOR * 60_000, everyMs: 100 },
      );
      createdAt = performance.now();
      await until(
        async () => {
          const mine = (await c.pods().catch(() => [])).filter((p) => p.node === name);
          const ok =
            mine.length > 0 &&
            (await Promise.all(others.map((o) => ping(c, o.name, mine[0]?.ip ?? '')))).every(
              Boolean,
            );
          if (ok) firstPingAt = performance.now();
          return ok;
        },
        { timeoutMs: SLOW_MACHINE_FACTOR * 60_000, everyMs: 100 },
      );
    })();
    await Promise.all([adding, watching]);
    const joinMs =
      createdAt !== undefined && firstPingAt !== undefined ? firstPingAt - createdAt : undefined;
    const joined = (await c.nodes()).find((n) => n.name === name);
    const subnet = (await leaseOf(c, joined))?.subnet ?? undefined;
    const notes = [
      `${name} joined with podCIDR ${subnet ?? '(none)'}; from its Node object's creation to the first ping from other nodes' pods to its pod: ${Math.round(joinMs ?? -1)} ms`,
    ];
    return { healedMs: joinMs, ok: joinMs !== undefined && subnet !== undefined, notes };
  },
};

const serviceAcross: Drill = {
  name: 'service',
  broke:
    'a ClusterIP Service backed by pods on two nodes, reached from a pod on a third (kube-proxy and twill together); pods reach outside through the masquerade',
  targetMs: 10_000,
  stores: ['kubelet'],
  async run(c) {
    const pods = await c.pods();
    const nodes = [...new Set(pods.map((p) => p.node))];
    const backends = nodes
      .slice(0, 2)
      .map((n) => pods.find((p) => p.node === n))
      .filter((p): p is LabPod => p !== undefined);
    const client = pods.find((p) => p.node === (nodes[2] ?? nodes[0]) && !backends.includes(p));
    if (backends.length < 2 || !client)
      throw new Error(
        'this drill needs test pods on three nodes (or two, with two pods on the first)',
      );
    const since = performance.now();
    await c.kubectl([
      'label',
      'pod',
      ...backends.map((b) => b.name),
      'twill-lab/backend=service',
      '--overwrite',
    ]);
    const svc = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'twill-lab-service', namespace: 'default' },
      spec: {
        selector: { 'twill-lab/backend': 'service' },
        ports: [{ port: 80, targetPort: 8080 }],
      },
    };
    await c.kubectl(['apply', '-f', '-'], { input: JSON.stringify(svc) });
    try {
      const ip = (
        await c.kubectl(['get', 'service', 'twill-lab-service', '-o', 'jsonpath={.spec.clusterIP}'])
      ).trim();
      const seen = new Set<string>();
      let tries = 0;
      const both = await until(
        async () => {
          tries++;
          // kubectl exec: through the apiserver to the node's kubelet, into the pod
          // (Debian's static busybox wget crashes on -T: busybox's own `timeout` bounds it)
          const get = ['timeout', '5', 'wget', '-q', '-O', '-', `http://${ip}/`];
          const out = await c
            .kubectl(['exec', client.name, '--', ...get], { timeoutMs: 15_000 })
            .catch(() => '');
          if (out.trim() !== '') seen.add(out.trim());
          return backends.every((b) => seen.has(b.name));
        },
        { timeoutMs: SLOW_MACHINE_FACTOR * 10_000, since, everyMs: 50 },
      );
      const notes = [
        `${client.name} (${client.node}) → Service ${ip}:80 (kubectl exec … wget): answered by ${[...seen].join(' and ') || 'nobody'} after ${tries} request(s), ${Math.round(both ?? -1)} ms after the Service was made`,
        `every pod pings the outside host (${c.outsideIp}), which has no route to pods: their traffic leaves masqueraded (the matrix)`,
      ];
      return { healedMs: both, ok: both !== undefined, notes };
    } finally {
      await c
        .kubectl(['delete', 'service', 'twill-lab-service', '--ignore-not-found'])
        .catch(() => undefined);
      await c
        .kubectl(['label', 'pod', ...backends.map((b) => b.name), 'twill-lab/backend-'])
        .catch(() => undefined);
    }
  },
};

export const KUBELET_DRILLS: readonly Drill[] = [
  serviceAcross,
  twillPodDeleted,
  rollingUpdate,
  processRestart({
    name: 'kubelet-restart',
    what: 'kubelet',
    restart: (k, n) => k.restartKubelet(n),
  }),
  processRestart({
    name: 'containerd-restart',
    what: 'containerd',
    restart: (k, n) => k.restartContainerd(n),
  }),
  podsWhileTwillDown,
  nodeReboot,
  nodeDrainDelete,
  nodeJoin,
];
