// One Kubernetes node of the kubelet lab (`up --kubelet`): a network
// namespace on the lab's underlay (made by netns-cluster.ts) with a mount
// namespace of its own, where its containerd (Debian's 1.6 + runc), kubelet
// and kube-proxy run as they do on a real node.
//
// The mount namespace is held by a small process (the "holder") started with
// `ip netns exec`, which already gives it a private copy of the host's mounts
// (slave propagation) with the namespace's own /sys. The holder mounts what a
// node needs there, then sleeps; containerd, kubelet and kube-proxy enter its
// mount and network namespaces (kubelet and containerd must share one mount
// namespace, or containerd cannot see kubelet's volume mounts):
//   - /sys/fs/cgroup again (`ip netns exec` remounted /sys): a tmpfs with
//     each cgroup hierarchy the host has, mounted the same way;
//   - the node's own directories bound over the paths kubelet, containerd,
//     the CNI plugins and the DaemonSet's hostPaths use (NODE_PATHS), so
//     nodes never see each other's pods, CNI config, IPAM or logs.
// containerd's root, state, socket and runc root live in the node's lab
// directory. Nothing is mounted outside the node's mount namespace, so the
// mounts vanish with its processes.
import { chmod, copyFile, mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { run } from '../src/exec/runner.ts';
import { alive, spawnDetached, spawnLogged, stopPid } from './kit/process.ts';
import { shJoin } from './shell-quote.ts';
import { until } from './kit/wait.ts';

/**
 * Paths a node owns: each is the node's own directory, bound over the host's path in the node's
 * mount namespace.
 */
export const NODE_PATHS = [
  '/etc/cni/net.d',
  '/opt/cni/bin',
  '/var/lib/cni',
  '/var/lib/kubelet',
  '/var/log',
  '/run/twill',
  '/run/containerd',
  '/run/netns',
] as const;

/**
 * The CNI plugins a node's OS provides (containerd needs loopback; deploy/'s conflist chains
 * portmap).
 */
const OS_CNI_PLUGINS = ['loopback', 'portmap', 'host-local'];
const OS_CNI_DIR = '/usr/lib/cni';

export const KUBELET_PORT = 10250;
export const PAUSE_IMAGE = 'twill.local/pause:lab';

/** Where a node's files are, under its lab directory. */
export interface NodeFiles {
  readonly dir: string;
  /** <dir>/fs/<path> is the node's own copy of each of NODE_PATHS */
  readonly fs: string;
  readonly containerdConfig: string;
  readonly containerdSock: string;
  readonly kubeletConfig: string;
  readonly kubeProxyConfig: string;
  readonly kubeconfig: string;
  readonly kubeProxyKubeconfig: string;
  readonly log: {
    readonly holder: string;
    readonly containerd: string;
    readonly kubelet: string;
    readonly kubeProxy: string;
  };
}

export function nodeFiles(dir: string): NodeFiles {
  return {
    dir,
    fs: join(dir, 'fs'),
    containerdConfig: join(dir, 'containerd.toml'),
    containerdSock: join(dir, 'containerd', 'containerd.sock'),
    kubeletConfig: join(dir, 'kubelet.yaml'),
    kubeProxyConfig: join(dir, 'kube-proxy.yaml'),
    kubeconfig: join(dir, 'kubelet.kubeconfig'),
    kubeProxyKubeconfig: join(dir, 'kube-proxy.kubeconfig'),
    log: {
      holder: join(dir, 'holder.log'),
      containerd: join(dir, 'containerd.log'),
      kubelet: join(dir, 'kubelet.log'),
      kubeProxy: join(dir, 'kube-proxy.log'),
    },
  };
}

export interface NodeSpec {
  readonly name: string;
  readonly ip: string;
  readonly files: NodeFiles;
  /** the net-conf Network: kube-proxy's clusterCIDR */
  readonly clusterCidr: string;
}

function toml(s: string): string {
  return JSON.stringify(s);
}

export function containerdConfig(f: NodeFiles): string {
  const cri = 'plugins."io.containerd.grpc.v1.cri"';
  return [
    'version = 2',
    `root = ${toml(join(f.dir, 'containerd', 'root'))}`,
    `state = ${toml(join(f.dir, 'containerd', 'state'))}`,
    '[grpc]',
    `  address = ${toml(f.containerdSock)}`,
    '[ttrpc]',
    `  address = ${toml(join(f.dir, 'containerd', 'containerd.sock.ttrpc'))}`,
    '[plugins."io.containerd.internal.v1.opt"]',
    `  path = ${toml(join(f.dir, 'containerd', 'opt'))}`,
    `[${cri}]`,
    `  sandbox_image = ${toml(PAUSE_IMAGE)}`,
    // this host withholds CAP_SYS_RESOURCE: a negative oom_score_adj is refused and every sandbox
    // fails to start
    '  restrict_oom_score_adj = true',
    '  disable_apparmor = true',
    `[${cri}.containerd]`,
    '  snapshotter = "overlayfs"',
    '  default_runtime_name = "runc"',
    `[${cri}.containerd.runtimes.runc]`,
    '  runtime_type = "io.containerd.runc.v2"',
    `[${cri}.containerd.runtimes.runc.options]`,
    '  SystemdCgroup = false',
    `  Root = ${toml(join(f.dir, 'runc'))}`,
    `[${cri}.cni]`,
    '  bin_dir = "/opt/cni/bin"',
    '  conf_dir = "/etc/cni/net.d"',
    '',
  ].join('\n');
}

export function kubeletConfig(n: NodeSpec): string {
  return `${JSON.stringify(
    {
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      address: n.ip,
      port: KUBELET_PORT,
      readOnlyPort: 0,
      healthzBindAddress: '127.0.0.1',
      healthzPort: 10248,
      // the apiserver reaches kubelets for exec and logs without a client certificate
      authentication: { anonymous: { enabled: true }, webhook: { enabled: false } },
      authorization: { mode: 'AlwaysAllow' },
      // this machine's cgroup layout: v1 hierarchies on a tmpfs, no systemd
      cgroupDriver: 'cgroupfs',
      cgroupsPerQOS: false,
      enforceNodeAllocatable: [],
      failSwapOn: false,
      // every node shares this machine's disk and memory: no evictions, no image GC
      evictionHard: {
        'memory.available': '1Mi',
        'nodefs.available': '1%',
        'nodefs.inodesFree': '1%',
        'imagefs.available': '1%',
      },
      imageGCHighThresholdPercent: 100,
      imageGCLowThresholdPercent: 99,
      serializeImagePulls: false,
      clusterDomain: 'cluster.local',
      resolvConf: '',
      rotateCertificates: false,
      nodeStatusUpdateFrequency: '4s',
    },
    null,
    2,
  )}\n`;
}

export function kubeProxyConfig(n: NodeSpec): string {
  return `${JSON.stringify(
    {
      apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
      kind: 'KubeProxyConfiguration',
      clientConnection: { kubeconfig: n.files.kubeProxyKubeconfig },
      hostnameOverride: n.name,
      bindAddress: n.ip,
      clusterCIDR: n.clusterCidr,
      mode: 'iptables',
      // no writes to the host-wide conntrack table size
      conntrack: { maxPerCore: 0 },
      metricsBindAddress: '127.0.0.1:10249',
      healthzBindAddress: '127.0.0.1:10256',
    },
    null,
    2,
  )}\n`;
}

/** The host's cgroup mounts (dir, type, options), to mount again inside a node. */
export async function hostCgroupMounts(): Promise<{ dir: string; type: string; opts: string }[]> {
  const mounts = await readFile('/proc/self/mounts', 'utf8');
  const keep = (o: string): boolean =>
    !['rw', 'ro', 'relatime', 'nosuid', 'nodev', 'noexec'].includes(o) && !o.startsWith('seclabel');
  return mounts.split('\n').flatMap((line) => {
    const [, dir, type, opts] = line.split(' ');
    if (
      dir === undefined ||
      !dir.startsWith('/sys/fs/cgroup/') ||
      (type !== 'cgroup' && type !== 'cgroup2')
    )
      return [];
    return [{ dir, type, opts: (opts ?? '').split(',').filter(keep).join(',') }];
  });
}

/** The holder's shell script: the node's mounts, then sleep until killed. */
export function holderScript(
  fsRoot: string,
  cgroups: readonly { dir: string; type: string; opts: string }[],
): string {
  const lines = ['set -eu', 'mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup'];
  for (const c of cgroups) {
    lines.push(
      shJoin(['mkdir', '-p', c.dir]),
      shJoin(['mount', '-t', c.type, ...(c.opts === '' ? [] : ['-o', c.opts]), c.type, c.dir]),
    );
  }
  for (const p of NODE_PATHS) lines.push(shJoin(['mount', '--bind', join(fsRoot, p), p]));
  lines.push('echo mounted', 'exec sleep infinity');
  return lines.join('\n');
}

/**
 * Host paths the node's bind mounts need as mount points; returns those it had to create (down
 * removes them).
 */
export async function ensureMountPoints(): Promise<string[]> {
  const made: string[] = [];
  for (const p of NODE_PATHS) {
    const existed = await readdir(p).then(
      () => true,
      () => false,
    );
    if (!existed) {
      await mkdir(p, { recursive: true });
      made.push(p);
    }
  }
  return made;
}

/** The node's directories, configuration files and the OS's CNI plugins. */
export async function writeNodeFiles(
  n: NodeSpec,
  kubeconfigs: { kubelet: string; kubeProxy: string },
): Promise<void> {
  const f = n.files;
  for (const p of NODE_PATHS) await mkdir(join(f.fs, p), { recursive: true });
  await mkdir(join(f.dir, 'containerd'), { recursive: true });
  for (const plugin of OS_CNI_PLUGINS) {
    const to = join(f.fs, '/opt/cni/bin', plugin);
    await copyFile(join(OS_CNI_DIR, plugin), to);
    await chmod(to, 0o755);
  }
  await writeFile(f.containerdConfig, containerdConfig(f));
  await writeFile(f.kubeletConfig, kubeletConfig(n));
  await writeFile(f.kubeProxyConfig, kubeProxyConfig(n));
  await writeFile(f.kubeconfig, kubeconfigs.kubelet, { mode: 0o600 });
  await writeFile(f.kubeProxyKubeconfig, kubeconfigs.kubeProxy, { mode: 0o600 });
}

/**
 * Starts the holder in network namespace `ns`; resolves with its pid once the node's mounts are in
 * place.
 */
export async function startHolder(ns: string, f: NodeFiles): Promise<number> {
  const script = holderScript(f.fs, await hostCgroupMounts());
  await writeFile(f.log.holder, '');
  const pid = spawnDetached(ns, ['sh', '-c', script], f.log.holder);
  const mounted = (): Promise<boolean> =>
    readFile(f.log.holder, 'utf8').then(
      (t) => t.includes('mounted') || !alive(pid),
      () => false,
    );
  await until(mounted, { timeoutMs: 20_000, everyMs: 20 });
  const log = await readFile(f.log.holder, 'utf8');
  if (!alive(pid) || !log.includes('mounted'))
    throw new Error(`node mounts failed: ${log.trim() || 'no output'} (${f.log.holder})`);
  return pid;
}

/** argv that runs `argv` inside the node (its holder's mount and network namespaces). */
export function inNode(holder: number, argv: readonly string[]): string[] {
  return ['nsenter', `--target=${holder}`, '--mount', '--net', '--', ...argv];
}

export function spawnInNode(
  holder: number,
  argv: readonly string[],
  logFile: string,
  env: Record<string, string> = {},
): number {
  return spawnLogged(inNode(holder, argv), logFile, env);
}

/**
 * `ctr` against the node's containerd, in its k8s.io namespace (where the CRI keeps images and
 * containers); stdout.
 */
export async function ctr(
  f: NodeFiles,
  args: readonly string[],
  timeoutMs = 20_000,
): Promise<string> {
  return (
    await run('ctr', ['--address', f.containerdSock, '--namespace', 'k8s.io', ...args], {
      timeoutMs,
    })
  ).stdout;
}

export async function startContainerd(holder: number, f: NodeFiles): Promise<number> {
  const pid = spawnInNode(holder, ['containerd', '--config', f.containerdConfig], f.log.containerd);
  const up = (): Promise<boolean> =>
    run('ctr', ['--address', f.containerdSock, 'version'], { timeoutMs: 5_000 }).then(
      () => true,
      () => !alive(pid),
    );
  await until(up, { timeoutMs: 60_000, everyMs: 100 });
  if (!alive(pid)) throw new Error(`containerd exited; see ${f.log.containerd}`);
  return pid;
}

/**
 * Imports image archives into the node's containerd (k8s.io namespace, unpacked for the CRI's
 * snapshotter).
 */
export async function importImages(f: NodeFiles, archives: readonly string[]): Promise<void> {
  for (const a of archives) await ctr(f, ['images', 'import', a], 600_000);
}

export function startKubelet(holder: number, n: NodeSpec, binary: string): number {
  const f = n.files;
  return spawnInNode(
    holder,
    [
      binary,
      `--config=${f.kubeletConfig}`,
      `--kubeconfig=${f.kubeconfig}`,
      '--container-runtime=remote',
      `--container-runtime-endpoint=unix://${f.containerdSock}`,
      `--hostname-override=${n.name}`,
      `--node-ip=${n.ip}`,
      `--pod-infra-container-image=${PAUSE_IMAGE}`,
      '--v=1',
    ],
    f.log.kubelet,
    // kubelet's built-in cloud credential lookup must not try a cloud metadata address
    { AWS_EC2_METADATA_DISABLED: 'true' },
  );
}

export function startKubeProxy(holder: number, n: NodeSpec, binary: string): number {
  return spawnInNode(
    holder,
    [binary, `--config=${n.files.kubeProxyConfig}`, '--v=1'],
    n.files.log.kubeProxy,
  );
}

/**
 * Removes the cgroups of a node's containers that were killed rather than
 * deleted (a killed shim leaves runc's state and the container's cgroups):
 * runc's state under the node's runc root names each container's cgroup in
 * every hierarchy (containerd puts them under /k8s.io/<id>, whatever
 * kubelet's cgroupRoot says when QoS cgroups are off). Their processes must
 * be gone. The shared parent goes too once it is empty.
 */
export async function removeContainerCgroups(runcRoot: string): Promise<void> {
  const parents = new Set<string>();
  for (const ns of await readdir(runcRoot).catch(() => [])) {
    for (const id of await readdir(join(runcRoot, ns)).catch(() => [])) {
      const state = await readFile(join(runcRoot, ns, id, 'state.json'), 'utf8').then(
        (t) => JSON.parse(t) as { cgroup_paths?: Record<string, string> },
        () => undefined,
      );
      for (const path of Object.values(state?.cgroup_paths ?? {})) {
        if (!path.startsWith('/sys/fs/cgroup/')) continue;
        await rmdir(path).catch(() => undefined);
        parents.add(dirname(path));
      }
    }
  }
  for (const p of parents) await rmdir(p).catch(() => undefined);
}

/** Every pid's parent, from /proc. */
async function parents(): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => undefined);
    if (stat === undefined) continue;
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    out.set(Number(entry), ppid);
  }
  return out;
}

/**
 * `roots` and all their descendants (pod processes descend from containerd's shims, which run in
 * the node's namespace).
 */
export async function withDescendants(roots: readonly number[]): Promise<number[]> {
  const ppid = await parents();
  const children = new Map<number, number[]>();
  for (const [pid, parent] of ppid) children.set(parent, [...(children.get(parent) ?? []), pid]);
  const seen = new Set<number>();
  const queue = roots.filter((p) => ppid.has(p));
  while (queue.length > 0) {
    const pid = queue.pop() as number;
    if (seen.has(pid)) continue;
    seen.add(pid);
    queue.push(...(children.get(pid) ?? []));
  }
  return [...seen];
}

/**
 * Kills `roots` and everything under them at once (SIGKILL: a node losing power), then waits until
 * they are gone.
 */
export async function killTree(roots: readonly number[]): Promise<void> {
  const all = await withDescendants(roots);
  for (const pid of all) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  for (const pid of all) await stopPid(pid, 'kill');
}
