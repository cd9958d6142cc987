// twill's ClusterRole (deploy/) against a real kube-apiserver with RBAC:
// for the ServiceAccount deploy/ binds (a TokenRequest token) and for the
// static user `twill` bound to the same ClusterRole in this test, everything
// twill does succeeds (get, list and watch Nodes; patch nodes/status with
// the flannel annotations and the NetworkUnavailable condition) and the
// rest is denied with 403 (a Node's spec or metadata, Secrets, Pods, Node
// create/delete). Before the binding, the static user may do nothing.
import { resolve } from 'node:path';
import {
  ApiException,
  AuthenticationV1TokenRequest,
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  RbacAuthorizationV1Api,
  Watch,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startKubeApiServer, type KubeApiServer } from '../helpers/kube.ts';
import { kubectl } from '../helpers/kube-nodes.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const DEPLOY = resolve(import.meta.dirname, '../../deploy');
const NODE = 'node-a';
const PREFIX = 'flannel.alpha.coreos.com';
const MERGE = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
let kube: KubeApiServer;
let admin: CoreV1Api;
const identities: Record<string, KubeConfig> = {};

async function kubeConfigFor(token: string): Promise<KubeConfig> {
  const kc = new KubeConfig();
  kc.loadFromFile(await kube.kubeconfig(token));
  return kc;
}

/** The HTTP status a call ends with: 200 for success, else the API's code. */
async function statusOf(call: Promise<unknown>): Promise<number> {
  try {
    await call;
    return 200;
  } catch (err) {
    if (err instanceof ApiException) return err.code;
    throw err;
  }
}

/**
 * Starts a watch on Nodes; resolves with the first event ("ADDED node-a"), or the error's status.
 */
async function firstWatchEvent(kc: KubeConfig): Promise<string> {
  let controller: AbortController | undefined;
  const event = new Promise<string>((res) => {
    new Watch(kc)
      .watch(
        '/api/v1/nodes',
        {},
        (phase, obj: { metadata?: { name?: string } }) => res(`${phase} ${obj.metadata?.name}`),
        (err: unknown) =>
          res(
            `ended: ${(err as { statusCode?: number; code?: number } | null)?.statusCode ?? (err as { code?: number } | null)?.code ?? String(err)}`,
          ),
      )
      .then(
        (c) => (controller = c),
        (err: unknown) => res(`failed: ${String(err)}`),
      );
  });
  const timeout = new Promise<string>((res) => setTimeout(() => res('no event within 5 s'), 5000));
  const first = await Promise.race([event, timeout]);
  controller?.abort();
  return first;
}

async function serviceAccountToken(): Promise<string> {
  const request = new AuthenticationV1TokenRequest();
  request.spec = {
    audiences: ['https://kubernetes.default.svc.cluster.local'],
    expirationSeconds: 3600,
  };
  const answer = await admin.createNamespacedServiceAccountToken({
    name: 'twill',
    namespace: 'twill-system',
    body: request,
  });
  return answer.status?.token ?? '';
}

beforeAll(async () => {
  kube = await startKubeApiServer();
  const adminConfig = await kube.kubeconfig(kube.adminToken);
  const adminKc = new KubeConfig();
  adminKc.loadFromFile(adminConfig);
  admin = adminKc.makeApiClient(CoreV1Api);
  await kubectl(adminConfig, ['apply', '-k', DEPLOY]);
  await admin.createNode({
    body: {
      metadata: { name: NODE },
      spec: { podCIDR: '10.244.1.0/24', podCIDRs: ['10.244.1.0/24'] },
    },
  });
  await admin.createNamespacedSecret({
    namespace: 'default',
    body: { metadata: { name: 'secret' }, stringData: { password: 'hunter2' } },
  });
  identities['static user twill'] = await kubeConfigFor(kube.twillToken);
  identities['ServiceAccount twill-system/twill'] = await kubeConfigFor(
    await serviceAccountToken(),
  );
});
afterAll(async () => {
  await kube?.stop();
});

describe('RBAC: twill ClusterRole', () => {
  it('the static user twill may do nothing before it is bound', async () => {
    const api = identities['static user twill']?.makeApiClient(CoreV1Api);
    expect(await statusOf(api!.listNode())).toBe(403);
    expect(await statusOf(api!.readNode({ name: NODE }))).toBe(403);
    // bind it to deploy/'s ClusterRole, as deploy/ binds the ServiceAccount
    const rbac = (await kubeConfigFor(kube.adminToken)).makeApiClient(RbacAuthorizationV1Api);
    await rbac.createClusterRoleBinding({
      body: {
        metadata: { name: 'twill-test-user' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'twill' },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'twill' }],
      },
    });
    // the authorizer learns of the binding through its informer: a moment later
    await waitFor(async () => (await statusOf(api!.listNode())) === 200, {
      timeoutMs: 5000,
      what: 'the binding to take effect',
    });
  });

  for (const who of ['ServiceAccount twill-system/twill', 'static user twill']) {
    describe(who, () => {
      const api = (): CoreV1Api => identities[who]!.makeApiClient(CoreV1Api);

      it('may get, list and watch Nodes', async () => {
        expect((await api().readNode({ name: NODE })).spec?.podCIDR).toBe('10.244.1.0/24');
        expect((await api().listNode()).items.map((n) => n.metadata?.name)).toEqual([NODE]);
        expect(await firstWatchEvent(identities[who]!)).toBe(`ADDED ${NODE}`);
      });

      it('may patch nodes/status: the flannel annotations and NetworkUnavailable=False', async () => {
        const vtep = who.startsWith('Service') ? '0a:58:0a:f4:01:01' : '0a:58:0a:f4:01:02';
        const body = {
          metadata: {
            annotations: {
              [`${PREFIX}/backend-type`]: 'vxlan',
              [`${PREFIX}/backend-data`]: JSON.stringify({ VNI: 1, VtepMAC: vtep }),
              [`${PREFIX}/public-ip`]: '192.0.2.1',
              [`${PREFIX}/kube-subnet-manager`]: 'true',
            },
          },
          status: {
            conditions: [
              {
                type: 'NetworkUnavailable',
                status: 'False',
                reason: 'TwillIsUp',
                message: 'twill is running on this node',
              },
            ],
          },
        };
        await api().patchNodeStatus({ name: NODE, body }, MERGE);
        const node = await admin.readNode({ name: NODE });
        expect(node.metadata?.annotations?.[`${PREFIX}/backend-data`]).toBe(
          JSON.stringify({ VNI: 1, VtepMAC: vtep }),
        );
        expect(node.status?.conditions?.find((c) => c.type === 'NetworkUnavailable')?.status).toBe(
          'False',
        );
      });

      it("may not change a Node's spec or metadata, nor create or delete Nodes", async () => {
        expect(
          await statusOf(
            api().patchNode({ name: NODE, body: { spec: { podCIDR: '10.244.9.0/24' } } }, MERGE),
          ),
        ).toBe(403);
        expect(
          await statusOf(
            api().patchNode({ name: NODE, body: { spec: { unschedulable: true } } }, MERGE),
          ),
        ).toBe(403);
        expect(
          await statusOf(
            api().patchNode({ name: NODE, body: { metadata: { labels: { x: 'y' } } } }, MERGE),
          ),
        ).toBe(403);
        expect(await statusOf(api().createNode({ body: { metadata: { name: 'rogue' } } }))).toBe(
          403,
        );
        expect(await statusOf(api().deleteNode({ name: NODE }))).toBe(403);
        expect((await admin.readNode({ name: NODE })).spec).toMatchObject({
          podCIDR: '10.244.1.0/24',
        });
      });

      it('may not read Secrets or list Pods', async () => {
        expect(
          await statusOf(api().readNamespacedSecret({ name: 'secret', namespace: 'default' })),
        ).toBe(403);
        expect(await statusOf(api().listSecretForAllNamespaces())).toBe(403);
        expect(await statusOf(api().listNamespacedSecret({ namespace: 'twill-system' }))).toBe(403);
        expect(await statusOf(api().listPodForAllNamespaces())).toBe(403);
        expect(await statusOf(api().listNamespacedConfigMap({ namespace: 'twill-system' }))).toBe(
          403,
        );
      });
    });
  }
});
