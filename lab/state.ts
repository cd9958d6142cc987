// The netns lab's state on disk, /run/twill-lab/<name>/state.json: which
// nodes and pods exist, the store and masquerade modes, and the pids of etcd (each member), the
// kube-apiserver (kube mode) and every twill (in kubelet mode: the control
// plane's and each node's own processes), so `status`,
// `drill` and `down` (separate invocations) find the lab `up` made.
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { StoreMode } from './cluster.ts';

export const LAB_ROOT = '/run/twill-lab';

export interface PodState {
  readonly name: string;
  /** its primary address: IPv4, or on an IPv6-only lab its IPv6 address (as LabPod.ip) */
  readonly ip: string;
  /** lab with IPv6 (dual-stack or IPv6-only): the pod's IPv6 address (IPv6-only: `ip` too) */
  readonly ip6?: string;
}

export interface NodeState {
  readonly name: string;
  readonly index: number;
  readonly ip: string;
  pid: number | undefined;
  pods: PodState[];
  /** kubelet lab: the node's own processes (twill runs as its DaemonSet pod) */
  kubelet?: KubeletNodeState;
}

/**
 * A kubelet-lab node's processes: the holder of its mount namespace, containerd, kubelet,
 * kube-proxy.
 */
export interface KubeletNodeState {
  holderPid: number | undefined;
  containerdPid: number | undefined;
  kubeletPid: number | undefined;
  kubeProxyPid: number | undefined;
}

/** The kubelet lab's control plane beyond the apiserver, and what `down` must undo on the host. */
export interface KubeletLabState {
  controllerManagerPid: number | undefined;
  schedulerPid: number | undefined;
  /**
   * host directories made as mount points for the nodes' bind mounts (removed by `down` when empty)
   */
  madeMountPoints: string[];
  /** image archives every node imports */
  images: string[];
}

export interface LabState {
  readonly name: string;
  readonly backend: 'vxlan' | 'host-gw';
  readonly store: StoreMode;
  /** etcd member 1 (the only one, unless `up --etcd-members`) */
  etcdPid: number | undefined;
  /** `up --etcd-members N`: how many etcd members (absent: 1) */
  etcdMembers?: number;
  /** members 2…N, in order (null: not running) */
  etcdMemberPids?: (number | null)[];
  /** kube mode: the kube-apiserver in the etcd namespace */
  apiServerPid: number | undefined;
  nodes: NodeState[];
  nextIndex: number;
  /** `up --slow F`: the lab's processes run with 1/F of the machine's CPU (throttle.ts) */
  slow?: number;
  /** `up --dual-stack`: IPv6 underlay, EnableIPv6 in net-conf.json, pods with both families */
  dualStack?: boolean;
  /**
   * `up --store kube --ipv6-only`: IPv6 underlay beside the lab's IPv4 plumbing, EnableIPv4 false
   * in net-conf.json, one IPv6 podCIDR per Node, pods with IPv6 alone
   */
  ipv6Only?: boolean;
  /**
   * `up --nftables`: `"EnableNFTables": true` in the network config, so twill keeps its masquerade
   * in its own nftables tables and no iptables chain (absent: iptables mode)
   */
  nftables?: boolean;
  /** `up --kubelet`: real kubelets run twill's DaemonSet (kubelet-lab.ts, kubelet-node.ts) */
  kubelet?: KubeletLabState;
}

export function labDir(name: string): string {
  return join(LAB_ROOT, name);
}

export async function readState(name: string): Promise<LabState | undefined> {
  const text = await readFile(join(labDir(name), 'state.json'), 'utf8').catch(() => undefined);
  // a state file from before the store mode existed is an etcd lab
  return text === undefined
    ? undefined
    : ({
        store: 'etcd',
        apiServerPid: undefined,
        ...(JSON.parse(text) as Partial<LabState>),
      } as LabState);
}

export async function writeState(state: LabState): Promise<void> {
  const dir = labDir(state.name);
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, 'state.json.tmp');
  await writeFile(tmp, `${JSON.stringify(state, null, 2)}\n`);
  await rename(tmp, join(dir, 'state.json'));
}
