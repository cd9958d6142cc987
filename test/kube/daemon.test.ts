// The daemon in Kubernetes mode, in-process, each node in a network
// namespace of its own, against a real kube-apiserver as the RBAC-bound user
// twill: the Nodes' podCIDRs become the subnets, each node programs the
// other's route, neighbour and FDB entry, publishes the flannel annotations
// and NetworkUnavailable=False, and when a Node object is deleted its entries
// leave the other node's kernel within a second.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClientKubeApi } from '../../src/lease/kube-api.ts';
import { KubeLeaseStore } from '../../src/lease/kube-store.ts';
import { kernelView } from '../helpers/dataplane.ts';
import { startTestDaemon, type TestNode } from '../helpers/daemon.ts';
import type { KubeApiServer } from '../helpers/kube.ts';
import { startKubeTestCluster, type KubeAdmin } from '../helpers/kube-nodes.ts';
import { nsRunner } from '../helpers/netns.ts';
import { slowBound, waitFor } from '../helpers/ports.ts';

const P = 'flannel.alpha.coreos.com';
let kube: KubeApiServer;
let admin: KubeAdmin;
let kubeconfig: string;
let dir: string;

beforeAll(async () => {
  ({ kube, admin, kubeconfig, dir } = await startKubeTestCluster());
  await writeFile(join(dir, 'net-conf.json'), '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}');
}, 60_000);
afterAll(() => kube?.stop());

async function startNode(n: number): Promise<TestNode> {
  const name = `kn${n}`;
  await admin.createNode(name, { podCidr: `10.244.${n}.0/24`, conditions: [{ type: 'Ready', status: 'True' }] });
  const store = new KubeLeaseStore({ api: new ClientKubeApi({ kubeconfigFile: kubeconfig }), nodeName: name, netConfigPath: join(dir, 'net-conf.json') });
  return startTestDaemon({ store, nodeName: name, publicIp: `192.0.2.${n}`, subnetFile: join(dir, `${name}.env`) });
}

describe('daemon in Kubernetes mode', () => {
  it('meshes the nodes from their podCIDRs, marks them available, and drops a deleted Node within a second', async () => {
    const [a, b, c] = [await startNode(1), await startNode(2), await startNode(3)];
    const view = (node: TestNode) => kernelView(nsRunner(node.ns));
    await waitFor(async () => (await view(a)).fdb.length === 2 && (await view(b)).fdb.length === 2 && (await view(c)).fdb.length === 2, { timeoutMs: 15_000, what: 'full mesh' });
    const onA = await view(a);
    expect(onA.routes.map((r) => r.split(' ')[0])).toEqual(['10.244.2.0/24', '10.244.3.0/24']);
    expect(onA.fdb.map((f) => f.split(' dst ')[1]?.split(' ')[0]).sort()).toEqual(['192.0.2.2', '192.0.2.3']);
    for (const name of ['kn1', 'kn2', 'kn3']) {
      await waitFor(async () => (await admin.node(name))?.status?.conditions?.some((x) => x.type === 'NetworkUnavailable' && x.status === 'False') === true, { timeoutMs: 10_000, what: `${name} NetworkUnavailable=False` });
      const node = await admin.node(name);
      expect(Object.keys(node?.metadata?.annotations ?? {}).filter((k) => k.startsWith(P)).sort()).toEqual([`${P}/backend-data`, `${P}/backend-type`, `${P}/kube-subnet-manager`, `${P}/public-ip`]);
      expect(node?.status?.conditions?.find((x) => x.type === 'Ready')?.status).toBe('True');
    }
    // the VtepMAC kn2 publishes is the one kn1's FDB holds
    const mac2 = (JSON.parse((await admin.node('kn2'))?.metadata?.annotations?.[`${P}/backend-data`] ?? '{}') as { VtepMAC?: string }).VtepMAC;
    expect(onA.fdb.find((f) => f.includes('dst 192.0.2.2'))?.split(' ')[0]).toBe(mac2);
    await c.stop();
    const t0 = Date.now();
    await admin.deleteNode('kn3');
    const routeTo3 = async (node: TestNode): Promise<boolean> => (await nsRunner(node.ns)('ip', ['route', 'show', '10.244.3.0/24'])).stdout.trim() !== '';
    await waitFor(async () => !(await routeTo3(a)) && !(await routeTo3(b)), { timeoutMs: slowBound(1_000), what: 'kn3 gone from kn1 and kn2' });
    const goneMs = Date.now() - t0;
    console.log(`kn3 deleted: gone from kn1 and kn2 in ${goneMs} ms`);
    expect(goneMs).toBeLessThan(slowBound(1_000));
    expect((await view(a)).fdb).toHaveLength(1);
    expect((await view(a)).neighs).toHaveLength(1);
  }, 60_000);
});
