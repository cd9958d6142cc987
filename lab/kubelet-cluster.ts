// The kubelet lab's nodes and control plane, for NetnsCluster in kubelet mode
// (`up --kubelet`): what `up` adds around the kube-apiserver (credentials,
// kube-controller-manager, kube-scheduler, the images, deploy/ through its
// lab overlay), each node's life (made, restarted piece by piece, "rebooted",
// drained and removed), and how the drills see pods (by their processes, from
// the node's containerd) and twill (its DaemonSet pod's log and CPU).
import { readdir, readFile, rm, rmdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { KubeletControl, LabPod, ShOptions, TwillPodView } from './cluster.ts';
import { buildLabImages } from './images.ts';
import { kubeBinary } from './kube-apiserver.ts';
import {
  CLUSTER_CIDR,
  controllerManagerArgs,
  LAB_OVERLAY,
  nodeKubeconfigs,
  schedulerArgs,
  TEST_POD_LABEL,
  testPod,
  writeNodeCredentials,
} from './kubelet-lab.ts';
import {
  ctr,
  ensureMountPoints,
  importImages,
  killTree,
  nodeFiles,
  removeContainerCgroups,
  startContainerd,
  startHolder,
  startKubelet,
  startKubeProxy,
  writeNodeFiles,
  type NodeFiles,
  type NodeSpec,
} from './kubelet-node.ts';
import type { KubeLab } from './netns-kube.ts';
import { alive, spawnDetached, stopPid } from './kit/process.ts';
import { namespacePids } from './kit/netns.ts';
import {
  labDir,
  type KubeletLabState,
  type KubeletNodeState,
  type LabState,
  type NodeState,
} from './state.ts';
import { processCpuMs } from './throttle.ts';
import { until } from './kit/wait.ts';

/** How long a node may take to go Ready (kubelet registers in 10–15 s here; ×10 for a slow day). */
const NODE_READY_MS = 300_000;
const PODS_RUNNING_MS = 300_000;
export const TWILL_NAMESPACE = 'twill-system';

export interface KubeletDeps {
  readonly state: LabState;
  readonly dir: string;
  readonly kube: KubeLab;
  readonly save: () => Promise<void>;
  readonly kubectl: (args: readonly string[], opts?: ShOptions) => Promise<string>;
  readonly nsOf: (short: string) => string;
}

interface PodObject {
  readonly metadata: {
    readonly name: string;
    readonly namespace?: string;
    readonly labels?: Readonly<Record<string, string>>;
    readonly deletionTimestamp?: string;
    readonly uid?: string;
  };
  readonly spec: { readonly nodeName?: string };
  readonly status: {
    readonly phase?: string;
    readonly podIP?: string;
    readonly conditions?: readonly { readonly type: string; readonly status: string }[];
    readonly containerStatuses?: readonly {
      readonly name: string;
      readonly containerID?: string;
      readonly ready?: boolean;
      readonly restartCount?: number;
    }[];
  };
}

interface NodeObject {
  readonly metadata: { readonly name: string };
  readonly spec?: { readonly podCIDR?: string };
  readonly status?: {
    readonly conditions?: readonly { readonly type: string; readonly status: string }[];
  };
}

const condition = (
  o: { status?: { conditions?: readonly { type: string; status: string }[] } },
  type: string,
): string | undefined => o.status?.conditions?.find((c) => c.type === type)?.status;

/** Ready, and twill has cleared NetworkUnavailable (kubelet alone never sets it false). */
export function nodeSetUp(n: NodeObject): boolean {
  return condition(n, 'Ready') === 'True' && condition(n, 'NetworkUnavailable') === 'False';
}

export function podReady(p: PodObject): boolean {
  return (
    p.metadata.deletionTimestamp === undefined &&
    p.status.phase === 'Running' &&
    condition(p, 'Ready') === 'True' &&
    (p.status.podIP ?? '') !== ''
  );
}

export class KubeletNodes implements KubeletControl {
  private readonly d: KubeletDeps;
  /** pod name → the pid of its first container (whose network namespace is the pod's) */
  private readonly pidCache = new Map<string, number>();

  constructor(d: KubeletDeps) {
    this.d = d;
  }

  static initialState(): KubeletLabState {
    return {
      controllerManagerPid: undefined,
      schedulerPid: undefined,
      madeMountPoints: [],
      images: [],
    };
  }

  private get lab(): KubeletLabState {
    if (!this.d.state.kubelet) throw new Error('not a kubelet lab');
    return this.d.state.kubelet;
  }

  /** Before the apiserver starts: the nodes' and kube-proxy's tokens. */
  async prepare(): Promise<void> {
    await writeNodeCredentials(this.d.kube);
  }

  /**
   * After the apiserver is ready: controller-manager, scheduler, the images, deploy/ (lab overlay).
   */
  async startControlPlane(): Promise<void> {
    const [cm, sched] = await Promise.all([
      kubeBinary('kube-controller-manager', { cachedOnly: false }),
      kubeBinary('kube-scheduler', { cachedOnly: true }).catch(() =>
        kubeBinary('kube-scheduler', { cachedOnly: false }),
      ),
    ]);
    const etcdNs = this.d.nsOf('etcd');
    this.lab.controllerManagerPid = spawnDetached(
      etcdNs,
      [cm, ...controllerManagerArgs(this.d.kube)],
      join(this.d.kube.dir, 'kube-controller-manager.log'),
    );
    this.lab.schedulerPid = spawnDetached(
      etcdNs,
      [sched, ...schedulerArgs(this.d.kube)],
      join(this.d.kube.dir, 'kube-scheduler.log'),
    );
    this.lab.madeMountPoints = await ensureMountPoints();
    await this.d.save();
    const images = await buildLabImages({
      outDir: join(this.d.dir, 'images'),
      log: (line) => process.stderr.write(`lab: images: ${line}\n`),
    });
    this.lab.images = [images.pause, images.twill, images.toolbox];
    await this.d.save();
    await this.d.kubectl(['apply', '-k', LAB_OVERLAY], { timeoutMs: 60_000 });
  }

  private spec(n: NodeState): NodeSpec {
    return {
      name: n.name,
      ip: n.ip,
      files: nodeFiles(join(this.d.dir, n.name)),
      clusterCidr: CLUSTER_CIDR,
    };
  }

  private procs(n: NodeState): KubeletNodeState {
    n.kubelet ??= {
      holderPid: undefined,
      containerdPid: undefined,
      kubeletPid: undefined,
      kubeProxyPid: undefined,
    };
    return n.kubelet;
  }

  /** Holder, containerd (with the images), kubelet and kube-proxy of a node whose files exist. */
  private async boot(n: NodeState): Promise<void> {
    const s = this.spec(n);
    const p = this.procs(n);
    p.holderPid = await startHolder(this.d.nsOf(n.name), s.files);
    p.containerdPid = await startContainerd(p.holderPid, s.files);
    await this.d.save();
    await importImages(s.files, this.lab.images);
    await this.startKubelet(n);
    p.kubeProxyPid = startKubeProxy(
      p.holderPid,
      s,
      await kubeBinary('kube-proxy', { cachedOnly: true }),
    );
    await this.d.save();
  }

  /**
   * Makes each node (files, then boot) and waits until all are set up; then `pods` test pods each.
   */
  async addNodes(nodes: readonly NodeState[], pods: number): Promise<void> {
    for (const n of nodes) {
      const s = this.spec(n);
      await writeNodeFiles(s, await nodeKubeconfigs(this.d.kube, n.name));
      await this.boot(n);
    }
    await this.untilNodesSetUp(nodes.map((n) => n.name));
    const manifests = nodes.flatMap((n) =>
      Array.from({ length: pods }, (_, k) => testPod(`${n.name}-p${k + 1}`, n.name)),
    );
    await this.d.kubectl(['apply', '-f', '-'], {
      input: JSON.stringify({
        apiVersion: 'v1',
        kind: 'List',
        items: manifests.map((m) => JSON.parse(m) as unknown),
      }),
    });
    await this.untilPodsReady(
      nodes.map((n) => n.name),
      pods,
    );
  }

  async nodeObjects(): Promise<NodeObject[]> {
    return (
      JSON.parse(await this.d.kubectl(['get', 'nodes', '-o', 'json'])) as { items: NodeObject[] }
    ).items;
  }

  /** Waits until every named node is Ready with NetworkUnavailable cleared; ms it took. */
  async untilNodesSetUp(names: readonly string[], timeoutMs = NODE_READY_MS): Promise<number> {
    let last: NodeObject[] = [];
    const ms = await until(
      async () => {
        last = await this.nodeObjects().catch(() => []);
        return names.every((name) => last.some((o) => o.metadata.name === name && nodeSetUp(o)));
      },
      { timeoutMs, everyMs: 250 },
    );
    if (ms === undefined) {
      const seen = names.map((name) => {
        const o = last.find((x) => x.metadata.name === name);
        return o
          ? `${name}: Ready=${condition(o, 'Ready') ?? '-'} NetworkUnavailable=${condition(o, 'NetworkUnavailable') ?? '-'} podCIDR=${o.spec?.podCIDR ?? '-'}`
          : `${name}: not registered`;
      });
      throw new Error(
        `nodes not set up after ${timeoutMs / 1000} s: ${seen.join('; ')} (logs: ${join(this.d.dir, '<node>')})`,
      );
    }
    return ms;
  }

  async podObjects(namespace: string, selector?: string): Promise<PodObject[]> {
    const args = [
      'get',
      'pods',
      '-n',
      namespace,
      '-o',
      'json',
      ...(selector === undefined ? [] : ['-l', selector]),
    ];
    return (JSON.parse(await this.d.kubectl(args)) as { items: PodObject[] }).items;
  }

  /** Waits until each named node runs `perNode` ready test pods. */
  async untilPodsReady(
    nodes: readonly string[],
    perNode: number,
    timeoutMs = PODS_RUNNING_MS,
  ): Promise<number> {
    let last: PodObject[] = [];
    const ms = await until(
      async () => {
        last = await this.podObjects('default', TEST_POD_LABEL).catch(() => []);
        return nodes.every(
          (n) => last.filter((p) => p.spec.nodeName === n && podReady(p)).length >= perNode,
        );
      },
      { timeoutMs, everyMs: 250 },
    );
    if (ms === undefined) {
      const notReady = last
        .filter((p) => !podReady(p))
        .map((p) => `${p.metadata.name} (${p.status.phase ?? '?'})`);
      throw new Error(
        `test pods not ready after ${timeoutMs / 1000} s: ${notReady.join(', ') || 'none created'}`,
      );
    }
    return ms;
  }

  async pods(): Promise<LabPod[]> {
    const all = await this.podObjects('default', TEST_POD_LABEL);
    return all
      .filter(podReady)
      .map((p) => ({
        name: p.metadata.name,
        node: p.spec.nodeName ?? '',
        ip: p.status.podIP ?? '',
      }))
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  private node(name: string): NodeState {
    const n = this.d.state.nodes.find((x) => x.name === name);
    if (!n) throw new Error(`no node ${name}`);
    return n;
  }

  /** The pid of a container's task, from the node's containerd (`containerd://<id>`). */
  private async containerPid(node: string, containerId: string): Promise<number | undefined> {
    const id = containerId.replace(/^containerd:\/\//, '');
    const out = await ctr(this.spec(this.node(node)).files, ['tasks', 'ls']);
    const line = out.split('\n').find((l) => l.startsWith(`${id} `));
    const pid = Number(line?.trim().split(/\s+/)[1]);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  }

  /** The network namespace of a test pod, as a path nsenter takes. */
  async podNetns(pod: string): Promise<string> {
    const cached = this.pidCache.get(pod);
    if (cached !== undefined && alive(cached)) return `/proc/${cached}/ns/net`;
    const p = (await this.podObjects('default', TEST_POD_LABEL)).find(
      (x) => x.metadata.name === pod && podReady(x),
    );
    const id = p?.status.containerStatuses?.[0]?.containerID;
    const pid =
      p && id !== undefined ? await this.containerPid(p.spec.nodeName ?? '', id) : undefined;
    if (pid === undefined) throw new Error(`pod ${pod} is not running`);
    this.pidCache.set(pod, pid);
    return `/proc/${pid}/ns/net`;
  }

  /** The twill DaemonSet pod on a node (the live one), if any. */
  async twillPod(node: string): Promise<PodObject | undefined> {
    const pods = await this.podObjects(TWILL_NAMESPACE, 'app.kubernetes.io/name=twill');
    return pods.find((p) => p.spec.nodeName === node && p.metadata.deletionTimestamp === undefined);
  }

  async twillPodOf(node: string): Promise<TwillPodView | undefined> {
    const p = await this.twillPod(node);
    if (!p) return undefined;
    const restarts = (p.status.containerStatuses ?? []).reduce(
      (sum, s) => sum + (s.restartCount ?? 0),
      0,
    );
    return { name: p.metadata.name, uid: p.metadata.uid ?? '', ready: podReady(p), restarts };
  }

  async testPodContainers(node: string): Promise<Map<string, string>> {
    const pods = (await this.podObjects('default', TEST_POD_LABEL)).filter(
      (p) => p.spec.nodeName === node && podReady(p),
    );
    return new Map(
      pods.map(
        (p) => [p.metadata.name, p.status.containerStatuses?.[0]?.containerID ?? ''] as const,
      ),
    );
  }

  /**
   * twill-cni's IPAM directory on the node (deploy/'s conflist names the network `twill`; the
   * plugin's default dataDir).
   */
  async ipamReserved(node: string): Promise<string[]> {
    const dir = join(this.spec(this.node(node)).files.fs, '/var/lib/cni/networks/twill');
    return (await readdir(dir).catch(() => []))
      .filter((f) => /^\d+\.\d+\.\d+\.\d+$/.test(f))
      .sort();
  }

  testPodManifest(name: string, node: string): string {
    return testPod(name, node);
  }

  subnetEnvPath(node: string): string {
    return join(this.spec(this.node(node)).files.fs, '/run/twill/subnet.env');
  }

  async twillCpuMs(node: string): Promise<number | undefined> {
    const id = (await this.twillPod(node))?.status.containerStatuses?.find(
      (s) => s.name === 'twill',
    )?.containerID;
    return id === undefined ? undefined : processCpuMs(await this.containerPid(node, id));
  }

  /**
   * Where kubelet keeps the node's twill pod logs (one directory per pod, one file per container
   * restart).
   */
  twillLogDir(node: string): string {
    return join(this.spec(this.node(node)).files.fs, '/var/log/pods');
  }

  /**
   * Every log line twill wrote on the node, across its pods and restarts (the CRI log format's
   * prefix removed).
   */
  async twillLog(node: string): Promise<string> {
    const root = this.twillLogDir(node);
    const dirs = (await readdir(root).catch(() => []))
      .filter((d) => d.startsWith(`${TWILL_NAMESPACE}_twill-`))
      .sort();
    const parts: string[] = [];
    for (const d of dirs) {
      const files = (await readdir(join(root, d, 'twill')).catch(() => [])).sort(
        (a, b) => parseInt(a, 10) - parseInt(b, 10),
      );
      for (const f of files)
        parts.push(await readFile(join(root, d, 'twill', f), 'utf8').catch(() => ''));
    }
    // "<time> stdout F <line>"
    return parts
      .join('')
      .split('\n')
      .map((l) => l.replace(/^\S+ (stdout|stderr) [FP] /, ''))
      .join('\n');
  }

  private async startKubelet(n: NodeState): Promise<void> {
    const p = this.procs(n);
    if (p.holderPid === undefined) throw new Error(`${n.name} has no mount namespace holder`);
    p.kubeletPid = startKubelet(
      p.holderPid,
      this.spec(n),
      await kubeBinary('kubelet', { cachedOnly: true }),
    );
    await this.d.save();
  }

  /** Stops kubelet (SIGTERM) and starts it again; pods keep running meanwhile. */
  async restartKubelet(name: string): Promise<void> {
    const n = this.node(name);
    await stopPid(this.procs(n).kubeletPid, 'term');
    await this.startKubelet(n);
  }

  /** Stops containerd (SIGTERM; its shims and so the containers live on) and starts it again. */
  async restartContainerd(name: string): Promise<void> {
    const n = this.node(name);
    const p = this.procs(n);
    await stopPid(p.containerdPid, 'term');
    if (p.holderPid === undefined) throw new Error(`${name} has no mount namespace holder`);
    p.containerdPid = await startContainerd(p.holderPid, this.spec(n).files);
    await this.d.save();
  }

  /**
   * Every process of the node: its own, and everything in its network namespace (shims, hostNetwork
   * pods), with descendants.
   */
  private async roots(n: NodeState): Promise<number[]> {
    const p = this.procs(n);
    const inNs = await namespacePids(this.d.nsOf(n.name));
    return [p.holderPid, p.containerdPid, p.kubeletPid, p.kubeProxyPid, ...inNs].filter(
      (x): x is number => x !== undefined,
    );
  }

  /**
   * A reboot without a reboot: every process of the node killed at once, what
   * lives on tmpfs on a real node (/run's directories, containerd's state,
   * runc's root) wiped, then holder, containerd, kubelet and kube-proxy
   * started again. Disk state stays: images, /var/lib/cni (stale IPAM),
   * /var/lib/kubelet. The network namespace keeps its links and routes.
   */
  async reboot(name: string): Promise<void> {
    const n = this.node(name);
    await killTree(await this.roots(n));
    const f = this.spec(n).files;
    await removeContainerCgroups(join(f.dir, 'runc'));
    for (const p of ['/run/twill', '/run/containerd', '/run/netns']) await wipe(join(f.fs, p));
    await rm(join(f.dir, 'containerd', 'state'), { recursive: true, force: true });
    await rm(join(f.dir, 'runc'), { recursive: true, force: true });
    this.pidCache.clear();
    await this.boot(n);
  }

  /**
   * Drains the node (test pods evicted), then kills all its processes; the caller deletes the Node
   * and the namespace.
   */
  async removeNode(n: NodeState): Promise<void> {
    await this.d
      .kubectl(
        [
          'drain',
          n.name,
          '--ignore-daemonsets',
          '--delete-local-data',
          '--force',
          '--grace-period=1',
          '--timeout=120s',
        ],
        { timeoutMs: 180_000 },
      )
      .catch(() => undefined);
    await killTree(await this.roots(n));
    await removeContainerCgroups(join(this.spec(n).files.dir, 'runc'));
    n.kubelet = undefined;
    await this.d.save();
  }

  nodeFilesOf(name: string): NodeFiles {
    return this.spec(this.node(name)).files;
  }

  /**
   * Everything a kubelet lab runs, also when its state is lost: every process in its namespaces and
   * their descendants, the control plane; then the mount points it made.
   */
  static async destroy(state: LabState | undefined, namespaces: readonly string[]): Promise<void> {
    const roots: number[] = [];
    for (const ns of namespaces) roots.push(...(await namespacePids(ns)));
    for (const n of state?.nodes ?? [])
      roots.push(
        ...[
          n.kubelet?.holderPid,
          n.kubelet?.containerdPid,
          n.kubelet?.kubeletPid,
          n.kubelet?.kubeProxyPid,
        ].filter((x): x is number => x !== undefined && alive(x)),
      );
    await killTree(roots);
    for (const n of state?.nodes ?? [])
      await removeContainerCgroups(join(labDir(state?.name ?? ''), n.name, 'runc'));
    await stopPid(state?.kubelet?.controllerManagerPid, 'kill');
    await stopPid(state?.kubelet?.schedulerPid, 'kill');
    for (const p of state?.kubelet?.madeMountPoints ?? []) await rmdir(p).catch(() => undefined);
  }
}

/** Removes a directory's contents, keeping it. */
async function wipe(dir: string): Promise<void> {
  for (const e of await readdir(dir).catch(() => []))
    await rm(join(dir, e), { recursive: true, force: true });
}
