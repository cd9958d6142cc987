// The small cluster interface the drills are written against, with two
// implementations: network namespaces on this machine (netns-cluster.ts) and
// Vagrant machines (vagrant-cluster.ts, commands over `vagrant ssh`). A drill
// only ever runs commands on a node, a pod, the etcd host or the outside
// host, and starts/stops twill and etcd (and, when twill takes its leases
// from the Kubernetes API, the kube-apiserver, which runs on the etcd host);
// it never knows how they are made.

/** Where a command runs. Pods live on a node; `outside` stands for the internet. */
export type Target = { readonly node: string } | { readonly pod: string } | 'etcd' | 'outside';

export interface LabPod {
  readonly name: string;
  readonly node: string;
  /**
   * the pod's primary address, as Kubernetes' status.podIP: its IPv4 address, or on an IPv6-only
   * lab (which gives pods no IPv4 address) its IPv6 address, the same as `ip6`
   */
  readonly ip: string;
  /** the pod's IPv6 address on a lab with IPv6 (dual-stack or IPv6-only) */
  readonly ip6?: string;
}

export interface LabNode {
  readonly name: string;
  /**
   * the node's IPv4 underlay address: its PublicIP (on an IPv6-only lab only the lab's own
   * plumbing uses it; twill, with IPv4 off, ignores it)
   */
  readonly ip: string;
  /** the node's IPv6 underlay address (its PublicIPv6) on a lab with IPv6 */
  readonly ip6?: string;
}

export interface ShOptions {
  /** milliseconds, default 20 s */
  readonly timeoutMs?: number;
  readonly input?: string;
}

/**
 * Where twill takes its leases from: etcd (flannel's keys) or the Kubernetes API (Node objects).
 */
export type StoreMode = 'etcd' | 'kube';

/**
 * How the lab runs twill: by hand with either store, or (`kubelet`) as
 * deploy/'s DaemonSet under real kubelets, with the Kubernetes API as store.
 */
export type LabMode = StoreMode | 'kubelet';

/** A twill DaemonSet pod as the kubelet drills see it. */
export interface TwillPodView {
  readonly name: string;
  readonly uid: string;
  readonly ready: boolean;
  readonly restarts: number;
}

/**
 * What a kubelet lab (`up --kubelet`) adds: its nodes' own processes, and waiting on Kubernetes.
 */
export interface KubeletControl {
  /** SIGTERM to kubelet, then a new kubelet (pods keep running) */
  restartKubelet(node: string): Promise<void>;
  /** SIGTERM to containerd (its shims keep the containers), then a new containerd */
  restartContainerd(node: string): Promise<void>;
  /** every process of the node killed at once, tmpfs state wiped, then started again */
  reboot(node: string): Promise<void>;
  /** the node's live twill pod */
  twillPodOf(node: string): Promise<TwillPodView | undefined>;
  /** waits until the nodes are Ready with NetworkUnavailable cleared; ms */
  untilNodesSetUp(names: readonly string[], timeoutMs?: number): Promise<number>;
  /** waits until each node runs at least `perNode` ready test pods; ms */
  untilPodsReady(nodes: readonly string[], perNode: number, timeoutMs?: number): Promise<number>;
  /** the node's ready test pods, each with its container's id (a new id: the pod was made anew) */
  testPodContainers(node: string): Promise<Map<string, string>>;
  /** the addresses twill-cni's IPAM holds reserved on the node */
  ipamReserved(node: string): Promise<string[]>;
  /** a test pod manifest (toolbox, serving its name over HTTP on port 8080) pinned to `node` */
  testPodManifest(name: string, node: string): string;
  /** the file the node's twill writes, as the node's CNI plugin reads it */
  subnetEnvPath(node: string): string;
}

export interface Cluster {
  /** a short description for tables and logs ("netns lab twlab", "vagrant lab") */
  readonly description: string;
  /**
   * the address every pod must reach outside the cluster (IPv4: not on an IPv6-only lab, whose
   * pods have no IPv4 address and reach `outsideIp6` only)
   */
  readonly outsideIp: string;
  /** a lab with IPv6 (dual-stack or IPv6-only): the outside host's IPv6 address, pods reach it */
  readonly outsideIp6?: string;
  /**
   * an IPv6-only lab (`up --store kube --ipv6-only`): twill runs with IPv4 off, pods have IPv6
   * alone, and the matrix and the drills are IPv6 only
   */
  readonly ipv6Only?: boolean;
  /**
   * twill keeps its masquerade in nftables (`up --nftables`: `"EnableNFTables": true` in the
   * network config): its tables `ip twill-ipv4` and `ip6 twill-ipv6`, no iptables chain. Absent:
   * iptables mode (TWILL-POSTRTG and TWILL-FWD), as on the kubelet and Vagrant labs.
   */
  readonly nftables?: boolean;
  /** the etcd endpoint as nodes see it */
  readonly etcdEndpoint: string;
  /** the etcd key prefix twill uses */
  readonly etcdPrefix: string;
  /** twill's lease store; in `kube` mode etcd only backs the kube-apiserver */
  readonly store: StoreMode;
  /** how twill runs: the store mode, or `kubelet` (store `kube`) */
  readonly mode: LabMode;
  nodes(): Promise<LabNode[]>;
  pods(): Promise<LabPod[]>;
  /** Runs argv on a target; resolves with stdout, rejects when it exits non-zero. */
  sh(target: Target, argv: readonly string[], opts?: ShOptions): Promise<string>;
  /**
   * Runs a long-lived argv on a target (`ip monitor`, say) and hands each
   * stdout line to `onLine` until `signal` aborts (then it resolves); rejects
   * when the program exits on its own.
   */
  watch(
    target: Target,
    argv: readonly string[],
    opts: { readonly signal: AbortSignal; readonly onLine: (line: string) => void },
  ): Promise<void>;
  /** Starts twill on a node (it must not be running). */
  startTwill(node: string): Promise<void>;
  /** Stops twill on a node with SIGTERM (waits for it) or SIGKILL. */
  stopTwill(node: string, how: 'term' | 'kill'): Promise<void>;
  /**
   * CPU ms twill on the node has used so far, with the processes it spawned and reaped; undefined
   * when it does not run.
   */
  twillCpuMs(node: string): Promise<number | undefined>;
  /** Where the node's twill log is (for people; drills read it through `twillLog`). */
  logPath(node: string): string;
  /** The node's twill log so far. */
  twillLog(node: string): Promise<string>;
  /** Runs kubectl as the cluster admin on the etcd host (kube mode only); stdout. */
  kubectl(args: readonly string[], opts?: ShOptions): Promise<string>;
  /** Stops the kube-apiserver (kube mode only); etcd keeps running. */
  stopApiServer(): Promise<void>;
  /** Starts the kube-apiserver again and waits until it is ready (kube mode only). */
  startApiServer(): Promise<void>;
  stopEtcd(): Promise<void>;
  /** Starts etcd again; `wipe` first deletes its data directory. */
  startEtcd(opts: { wipe: boolean }): Promise<void>;
  /**
   * Adds nodes (started together), each with `pods` pods wired by twill-cni
   * once its subnet.env exists. In kube mode each gets its Node object (with
   * a podCIDR) before its twill starts.
   */
  addNodes(names: readonly string[], pods: number): Promise<void>;
  /**
   * Stops twill on the node, removes its pods and the node itself. An etcd
   * lease stays (the drill decides); a Node object is deleted right after
   * twill stops, as a real node removal does.
   */
  removeNode(node: string): Promise<void>;
  /** kubelet mode only: the nodes' kubelets, containerds and what Kubernetes reports */
  readonly kubeletControl?: KubeletControl;
  /**
   * Names `addNodes` accepts, where nodes cannot be made on the fly (Vagrant); absent: any new
   * name.
   */
  spareNodes?(): Promise<string[]>;
}

/** Runs an etcdctl command on the etcd host. */
export function etcdctl(c: Cluster, args: readonly string[]): Promise<string> {
  return c.sh('etcd', ['etcdctl', '--endpoints', c.etcdEndpoint, ...args]);
}
