// Test-side access to a real kube-apiserver (helpers/kube.ts) as its admin:
// create, patch and delete Node objects the way the kubelet and the
// controller-manager would, and give twill an identity bound only to
// deploy/'s ClusterRole, so everything twill does in a test runs under the
// RBAC it ships with.
import { dirname, join, resolve } from 'node:path';
import {
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  RbacAuthorizationV1Api,
  setHeaderOptions,
  type V1Node,
} from '@kubernetes/client-node';
import { run } from '../../src/exec/runner.ts';
import { kubectlArgv } from '../../lab/kube-apiserver.ts';
import { startKubeApiServer, type KubeApiServer } from './kube.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const DEPLOY = resolve(import.meta.dirname, '../../deploy');
const MERGE = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

/**
 * kubectl with `kubeconfig`, its discovery cache beside the kubeconfig (removed with the
 * apiserver's files, not left in ~/.kube).
 */
export async function kubectl(kubeconfig: string, args: readonly string[]): Promise<string> {
  const [cmd = '', ...rest] = kubectlArgv(
    { kubeconfig, cacheDir: join(dirname(kubeconfig), 'kubectl-cache') },
    args,
  );
  return (await run(cmd, rest, { timeoutMs: 60_000 })).stdout;
}

export interface KubeAdmin {
  readonly api: CoreV1Api;
  readonly kubeconfig: string;
  createNode(
    name: string,
    o?: {
      podCidr?: string;
      /** spec.podCIDRs of a dual-stack node (one per family, in this order); overrides podCidr */
      podCidrs?: string[];
      annotations?: Record<string, string>;
      conditions?: { type: string; status: string }[];
    },
  ): Promise<V1Node>;
  /** a JSON merge patch of the Node (spec, metadata) */
  patchNode(name: string, body: unknown): Promise<void>;
  /** a JSON merge patch of nodes/status (annotations, conditions) */
  patchNodeStatus(name: string, body: unknown): Promise<void>;
  node(name: string): Promise<V1Node | undefined>;
  deleteNode(name: string): Promise<void>;
}

export async function kubeAdmin(kube: KubeApiServer): Promise<KubeAdmin> {
  const kubeconfig = await kube.kubeconfig(kube.adminToken);
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  const api = kc.makeApiClient(CoreV1Api);
  return {
    api,
    kubeconfig,
    async createNode(name, o = {}) {
      const cidrs = o.podCidrs ?? (o.podCidr ? [o.podCidr] : []);
      const spec = cidrs.length > 0 ? { podCIDR: cidrs[0], podCIDRs: cidrs } : {};
      const status = o.conditions
        ? {
            conditions: o.conditions.map((c) => ({
              ...c,
              reason: 'Test',
              message: 'set by the test',
            })),
          }
        : {};
      return api.createNode({
        body: {
          metadata: { name, ...(o.annotations ? { annotations: o.annotations } : {}) },
          spec,
          status,
        },
      });
    },
    async patchNode(name, body) {
      await api.patchNode({ name, body }, MERGE);
    },
    async patchNodeStatus(name, body) {
      await api.patchNodeStatus({ name, body }, MERGE);
    },
    async node(name) {
      return api.readNode({ name }).catch((err: { code?: number }) => {
        if (err.code === 404) return undefined;
        throw err;
      });
    },
    async deleteNode(name) {
      await api.deleteNode({ name });
    },
  };
}

/**
 * Applies deploy/ (the ClusterRole twill ships) and binds the static user
 * `twill` to it; returns a kubeconfig for that user, ready once the
 * authorizer has seen the binding.
 */
export async function twillIdentity(kube: KubeApiServer, admin: KubeAdmin): Promise<string> {
  await kubectl(admin.kubeconfig, ['apply', '-k', DEPLOY]);
  const kc = new KubeConfig();
  kc.loadFromFile(admin.kubeconfig);
  await kc.makeApiClient(RbacAuthorizationV1Api).createClusterRoleBinding({
    body: {
      metadata: { name: 'twill-test-user' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'twill' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'twill' }],
    },
  });
  const path = await kube.kubeconfig(kube.twillToken);
  const user = new KubeConfig();
  user.loadFromFile(path);
  const probe = user.makeApiClient(CoreV1Api);
  await waitFor(
    async () =>
      probe.listNode().then(
        () => true,
        () => false,
      ),
    { timeoutMs: 5000, what: 'the ClusterRoleBinding to take effect' },
  );
  return path;
}

export interface KubeTestCluster {
  readonly kube: KubeApiServer;
  readonly admin: KubeAdmin;
  /** twill's kubeconfig: the static user bound only to deploy/'s ClusterRole */
  readonly kubeconfig: string;
  /** a scratch directory that goes with the apiserver's files (kube.stop() removes it) */
  readonly dir: string;
}

/** A real kube-apiserver with its admin, twill's RBAC-bound identity and a scratch directory. */
export async function startKubeTestCluster(): Promise<KubeTestCluster> {
  const kube = await startKubeApiServer();
  try {
    const admin = await kubeAdmin(kube);
    const kubeconfig = await twillIdentity(kube, admin);
    return { kube, admin, kubeconfig, dir: dirname(kubeconfig) };
  } catch (err) {
    await kube.stop();
    throw err;
  }
}
