// The Kubernetes side of the netns lab in kube mode (`up --store kube`): a
// real kube-apiserver in the etcd namespace (10.123.0.1:6443) backed by the
// lab's etcd (it keeps its data under /registry), deploy/'s RBAC objects, a
// kubeconfig for twill whose static token (user `twill`) is bound only to
// twill's ClusterRole (as deploy/ binds the ServiceAccount), an admin
// kubeconfig for kubectl, net-conf.json as a file, and a Node object with a
// podCIDR per lab node. Every file lives under the lab directory, so `down`
// removes it with the lab. An IPv6-only lab (`--ipv6-only`) has net-conf.json
// with EnableIPv4 false and one IPv6 podCIDR per Node; its apiserver still
// serves on the IPv4 underlay address (see netns-cluster.ts for why). A lab
// in nftables mode (`--nftables`) has EnableNFTables in net-conf.json.
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { ShOptions } from './cluster.ts';
import {
  apiServerArgs,
  apiServerFiles,
  kubeApiServerBinary,
  kubeconfigText,
  kubectlArgv,
  untilApiServerReady,
  writeCredentials,
} from './kube-apiserver.ts';
import { alive, spawnDetached } from './kit/process.ts';
import { until } from './kit/wait.ts';

export const KUBE_API_PORT = 6443;
const DEPLOY = resolve(import.meta.dirname, '../deploy/base');
/**
 * deploy/'s objects that give twill its rights (the DaemonSet and ConfigMap are not needed here)
 */
const RBAC_FILES = [
  'namespace.yaml',
  'serviceaccount.yaml',
  'clusterrole.yaml',
  'clusterrolebinding.yaml',
];

/** Runs an argv in the etcd namespace (where the apiserver listens); stdout. */
export type ControlPlaneExec = (argv: readonly string[], opts?: ShOptions) => Promise<string>;

/** Where the kube side of a lab keeps its files, and how to reach the apiserver. */
export interface KubeLab {
  /** <lab dir>/kube: certificates, tokens, kubeconfigs, kubectl's cache, the apiserver log */
  readonly dir: string;
  readonly host: string;
  readonly url: string;
  readonly admin: { readonly kubeconfig: string; readonly cacheDir: string };
  readonly twillKubeconfig: string;
  readonly netConf: string;
  readonly log: string;
}

export function kubeLab(labDir: string, host: string): KubeLab {
  const dir = join(labDir, 'kube');
  return {
    dir,
    host,
    url: `https://${host}:${KUBE_API_PORT}`,
    admin: { kubeconfig: join(dir, 'admin.kubeconfig'), cacheDir: join(dir, 'kubectl-cache') },
    twillKubeconfig: join(dir, 'twill.kubeconfig'),
    netConf: join(labDir, 'net-conf.json'),
    log: join(dir, 'kube-apiserver.log'),
  };
}

/** Writes the credentials, both kubeconfigs and net-conf.json. */
export async function prepareKubeLab(
  k: KubeLab,
  backend: 'vxlan' | 'host-gw',
  o: LabNetOptions = {},
): Promise<void> {
  await mkdir(k.admin.cacheDir, { recursive: true });
  const creds = await writeCredentials(k.dir);
  const { caFile } = apiServerFiles(k.dir);
  await writeFile(
    k.admin.kubeconfig,
    kubeconfigText({ url: k.url, caFile, token: creds.adminToken }),
    { mode: 0o600 },
  );
  await writeFile(
    k.twillKubeconfig,
    kubeconfigText({ url: k.url, caFile, token: creds.twillToken }),
    { mode: 0o600 },
  );
  await writeFile(k.netConf, `${JSON.stringify(labNetConfig(backend, o))}\n`);
}

/**
 * The apiserver binary; builds the Kubernetes binaries (3 to 20 minutes, once) when there is no
 * cached one.
 */
export async function labApiServerBinary(): Promise<string> {
  const cached = await kubeApiServerBinary({ cachedOnly: true }).catch(() => undefined);
  if (cached !== undefined) return cached;
  process.stderr.write(
    'lab: no cached kube-apiserver; building the Kubernetes binaries with scripts/kubernetes.sh (3 to 20 minutes, once)…\n',
  );
  return kubeApiServerBinary({ cachedOnly: false });
}

/**
 * Starts the apiserver detached in namespace `ns` (it must be waited for:
 * `untilLabApiServerReady`); its pid.
 */
export async function spawnLabApiServer(o: {
  k: KubeLab;
  ns: string;
  etcd: string;
}): Promise<number> {
  const binary = await labApiServerBinary();
  const args = apiServerArgs({ dir: o.k.dir, host: o.k.host, port: KUBE_API_PORT, etcd: o.etcd });
  return spawnDetached(o.ns, [binary, ...args], o.k.log);
}

export async function untilLabApiServerReady(
  k: KubeLab,
  exec: ControlPlaneExec,
  pid: number,
): Promise<void> {
  const probe = (argv: readonly string[]): Promise<string> => exec(argv, { timeoutMs: 5_000 });
  await untilApiServerReady({
    dir: k.dir,
    kubectl: k.admin,
    exec: probe,
    exited: () => !alive(pid),
    timeoutMs: 60_000,
  }).catch((err: Error) => {
    throw new Error(`${err.message}; see ${k.log}`);
  });
}

/** kubectl as the admin, on the control-plane host. */
export function adminKubectl(
  k: KubeLab,
  exec: ControlPlaneExec,
  args: readonly string[],
  opts?: ShOptions,
): Promise<string> {
  return exec(kubectlArgv(k.admin, args), opts);
}

/**
 * deploy/'s Namespace, ServiceAccount, ClusterRole and ClusterRoleBinding,
 * and a binding of the static user `twill` to the same ClusterRole; waits
 * until twill's kubeconfig may list Nodes (the authorizer learns of a
 * binding through its informer, a moment later).
 */
export async function applyRbac(k: KubeLab, exec: ControlPlaneExec): Promise<void> {
  await adminKubectl(k, exec, ['apply', ...RBAC_FILES.flatMap((f) => ['-f', join(DEPLOY, f)])], {
    timeoutMs: 60_000,
  });
  await adminKubectl(k, exec, [
    'create',
    'clusterrolebinding',
    'twill-lab-user',
    '--clusterrole=twill',
    '--user=twill',
  ]);
  const asTwill = kubectlArgv({ kubeconfig: k.twillKubeconfig, cacheDir: k.admin.cacheDir }, [
    'get',
    'nodes',
    '-o',
    'name',
  ]);
  const bound = await until(
    () =>
      exec(asTwill).then(
        () => true,
        () => false,
      ),
    { timeoutMs: 10_000, everyMs: 100 },
  );
  if (bound === undefined)
    throw new Error(
      `twill's kubeconfig (${k.twillKubeconfig}) still may not list Nodes 10 s after the binding`,
    );
}

/** Which address families a lab's pods get: `dualStack` both, `ipv6Only` IPv6 alone, else IPv4. */
export interface LabFamilies {
  readonly dualStack?: boolean;
  readonly ipv6Only?: boolean;
}

/** What the lab's network config says beyond the backend: the families, the masquerade mode. */
export interface LabNetOptions extends LabFamilies {
  /** `up --nftables`: flannel's `"EnableNFTables": true` (twill's masquerade in nftables) */
  readonly nftables?: boolean;
}

/**
 * The lab's net-conf.json (etcd mode: its network config): dual-stack adds flannel's IPv6 keys;
 * IPv6-only has them with `EnableIPv4: false` and no Network (flannel refuses IPv4 keys then);
 * nftables mode adds `EnableNFTables: true`.
 */
export function labNetConfig(
  backend: 'vxlan' | 'host-gw',
  o: LabNetOptions = {},
): Record<string, unknown> {
  if (o.dualStack === true && o.ipv6Only === true)
    throw new Error('a lab is dual-stack or IPv6-only, not both');
  const nft = o.nftables === true ? { EnableNFTables: true } : {};
  if (o.ipv6Only === true)
    return {
      EnableIPv4: false,
      EnableIPv6: true,
      IPv6Network: LAB_IPV6_NETWORK,
      ...nft,
      Backend: { Type: backend },
    };
  const v6 = o.dualStack === true ? { EnableIPv6: true, IPv6Network: LAB_IPV6_NETWORK } : {};
  return { Network: '10.244.0.0/16', ...v6, ...nft, Backend: { Type: backend } };
}

/** The lab's IPv6 pod network (dual-stack, IPv6-only): node k's subnet is fd00:10:244:<k>::/64. */
export const LAB_IPV6_NETWORK = 'fd00:10:244::/56';

/**
 * Node k's podCIDRs, as a controller-manager with the lab's --cluster-cidr(s) would allocate
 * them: 10.244.<k>.0/24, then (dual-stack) fd00:10:244:<k in hex>::/64; IPv6-only the IPv6 one
 * alone.
 */
export function labPodCidrs(k: number, o: LabFamilies = {}): string[] {
  const v4 = `10.244.${k}.0/24`;
  const v6 = `fd00:10:244:${k.toString(16)}::/64`;
  if (o.ipv6Only === true) return [v6];
  return o.dualStack === true ? [v4, v6] : [v4];
}

/**
 * The Node object of lab node `name` with its podCIDRs (labPodCidrs): spec.podCIDR is the first,
 * as the controller-manager sets it (on an IPv6-only cluster, the IPv6 one).
 */
export function nodeObject(name: string, podCIDRs: readonly string[]): string {
  if (podCIDRs.length === 0) throw new Error(`Node ${name}: no podCIDR`);
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    spec: { podCIDR: podCIDRs[0], podCIDRs },
  });
}

/** `twill run`'s store flags in kube mode. */
export function twillKubeFlags(k: KubeLab, node: string): string[] {
  return [
    '--kube-subnet-mgr',
    '--kubeconfig-file',
    k.twillKubeconfig,
    '--net-config-path',
    k.netConf,
    '--node-name',
    node,
  ];
}
