// The daemon in Kubernetes mode, in-process, each node in a network
// namespace of its own, against a real kube-apiserver as the RBAC-bound user
// twill: the Nodes' podCIDRs become the subnets, each node programs the
// other's route, neighbour and FDB entry, publishes the flannel annotations
// and NetworkUnavailable=False, and when a Node object is deleted its entries
// leave the other node's kernel within a second.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Refusal } from '../../src/lease/admit.ts';
import { ClientKubeApi } from '../../src/lease/kube-api.ts';
import { KubeLeaseStore } from '../../src/lease/kube-store.ts';
import { kernelView } from '../helpers/dataplane.ts';
import { startTestDaemon, type TestNode } from '../helpers/daemon.ts';
import type { KubeApiServer } from '../helpers/kube.ts';
import { startKubeTestCluster, type KubeAdmin } from '../helpers/kube-nodes.ts';
import { nsRunner } from '../../lab/kit/netns.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';

const P = 'flannel.alpha.coreos.com';
let kube: KubeApiServer;
let admin: KubeAdmin;
let kubeconfig: string;
let dir: string;

beforeAll(async () => {
  ({ kube, admin, kubeconfig, dir } = await startKubeTestCluster());
  await writeFile(
    join(dir, 'net-conf.json'),
    '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}',
  );
}, 60_000);
afterAll(() => kube?.stop());

async function startNode(n: number): Promise<TestNode> {
  const name = `kn${n}`;
  await admin.createNode(name, {
    podCidr: `10.244.${n}.0/24`,
    conditions: [{ type: 'Ready', status: 'True' }],
  });
  const store = new KubeLeaseStore({
    api: new ClientKubeApi({ kubeconfigFile: kubeconfig }),
    nodeName: name,
    netConfigPath: join(dir, 'net-conf.json'),
  });
  return startTestDaemon({
    store,
    nodeName: name,
    publicIp: `192.0.2.${n}`,
    subnetFile: join(dir, `${name}.env`),
  });
}

describe('daemon in Kubernetes mode', () => {
  it('meshes the nodes from their podCIDRs, marks them available, and drops a deleted Node within a second', async () => {
    const [a, b, c] = [await startNode(1), await startNode(2), await startNode(3)];
    const view = (node: TestNode) => kernelView(nsRunner(node.ns));
    await waitFor(
      async () =>
        (await view(a)).fdb.length === 2 &&
        (await view(b)).fdb.length === 2 &&
        (await view(c)).fdb.length === 2,
      { timeoutMs: 15_000, what: 'full mesh' },
    );
    const onA = await view(a);
    expect(onA.routes.map((r) => r.split(' ')[0])).toEqual(['10.244.2.0/24', '10.244.3.0/24']);
    expect(onA.fdb.map((f) => f.split(' dst ')[1]?.split(' ')[0]).sort()).toEqual([
      '192.0.2.2',
      '192.0.2.3',
    ]);
    for (const name of ['kn1', 'kn2', 'kn3']) {
      await waitFor(
        async () =>
          (await admin.node(name))?.status?.conditions?.some(
            (x) => x.type === 'NetworkUnavailable' && x.status === 'False',
          ) === true,
        { timeoutMs: 10_000, what: `${name} NetworkUnavailable=False` },
      );
      const node = await admin.node(name);
      expect(
        Object.keys(node?.metadata?.annotations ?? {})
          .filter((k) => k.startsWith(P))
          .sort(),
      ).toEqual([
        `${P}/backend-data`,
        `${P}/backend-type`,
        `${P}/kube-subnet-manager`,
        `${P}/public-ip`,
      ]);
      expect(node?.status?.conditions?.find((x) => x.type === 'Ready')?.status).toBe('True');
    }
    // the VtepMAC kn2 publishes is the one kn1's FDB holds
    const mac2 = (
      JSON.parse(
        (await admin.node('kn2'))?.metadata?.annotations?.[`${P}/backend-data`] ?? '{}',
      ) as { VtepMAC?: string }
    ).VtepMAC;
    expect(onA.fdb.find((f) => f.includes('dst 192.0.2.2'))?.split(' ')[0]).toBe(mac2);
    await c.stop();
    const t0 = Date.now();
    await admin.deleteNode('kn3');
    const routeTo3 = async (node: TestNode): Promise<boolean> =>
      (await nsRunner(node.ns)('ip', ['route', 'show', '10.244.3.0/24'])).stdout.trim() !== '';
    await waitFor(async () => !(await routeTo3(a)) && !(await routeTo3(b)), {
      timeoutMs: slowBound(1_000),
      what: 'kn3 gone from kn1 and kn2',
    });
    const goneMs = Date.now() - t0;
    console.log(`kn3 deleted: gone from kn1 and kn2 in ${goneMs} ms`);
    expect(goneMs).toBeLessThan(slowBound(1_000));
    expect((await view(a)).fdb).toHaveLength(1);
    expect((await view(a)).neighs).toHaveLength(1);
  }, 60_000);

  it("refuses hostile Nodes: a /23 over two nodes' /24s never takes their routes, and a Node claiming our own address is never routed", async () => {
    // kn11..kn13: the test before leaves kn1 and kn2 behind (their twill stopped), still peers
    const [a, b, c] = [await startNode(11), await startNode(12), await startNode(13)];
    const view = (node: TestNode) => kernelView(nsRunner(node.ns));
    const ownRoutes = async (node: TestNode): Promise<string[]> =>
      (await view(node)).routes.map((r) => r.split(' ')[0] ?? '');
    await waitFor(
      async () =>
        (await ownRoutes(a)).includes('10.244.12.0/24') &&
        (await ownRoutes(a)).includes('10.244.13.0/24'),
      { timeoutMs: 15_000, what: 'kn11 meshed' },
    );
    const hostile = (ip: string, mac: string) => ({
      [`${P}/kube-subnet-manager`]: 'true',
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/backend-data`]: JSON.stringify({ VNI: 1, VtepMAC: mac }),
      [`${P}/public-ip`]: ip,
    });
    // covers kn12's 10.244.12.0/24 and kn13's 10.244.13.0/24
    await admin.createNode('wide', {
      podCidr: '10.244.12.0/23',
      annotations: hostile('192.0.2.66', '7e:6e:00:00:00:66'),
    });
    // claims kn11's own address: kn11 would route that subnet to itself
    await admin.createNode('mimic', {
      podCidr: '10.244.8.0/24',
      annotations: hostile('192.0.2.11', '7e:6e:00:00:00:67'),
    });
    const refusedOnA = (): { key: string; code: string }[] =>
      [...(a.state()?.refused ?? new Map<string, Refusal>())]
        .map(([key, r]) => ({ key, code: r.reason }))
        .sort((x, y) => x.key.localeCompare(y.key));
    const loggedOnA = (): string[] =>
      a.log.lines
        .filter((l) => l.msg === 'skipping invalid peer lease')
        .map((l) => `${String(l.key)} ${String(l.reason)}`);
    await waitFor(
      async () =>
        refusedOnA().some((p) => p.key === 'wide') && loggedOnA().includes('mimic public-ip'),
      { timeoutMs: slowBound(5_000), what: 'both hostile Nodes refused on kn11' },
    );
    expect(refusedOnA()).toEqual([
      { key: 'mimic', code: 'public-ip' },
      { key: 'wide', code: 'subnet-conflict' },
    ]);
    for (const node of [a, b, c]) {
      expect(await ownRoutes(node), node.ns).not.toContain('10.244.12.0/23');
      expect((await view(node)).fdb.some((f) => f.includes('192.0.2.66'))).toBe(false);
    }
    expect(await ownRoutes(a)).toEqual(
      expect.arrayContaining(['10.244.12.0/24', '10.244.13.0/24']),
    );
    expect(await ownRoutes(a)).not.toContain('10.244.8.0/24');
    // a pass that refuses peers is still a good pass: nothing failed, readiness untouched
    expect(a.state()?.pass?.failures).toEqual([]);
    // logged once, not once per pass
    await new Promise((r) => setTimeout(r, 1_000));
    expect(loggedOnA().filter((l) => l === 'mimic public-ip')).toHaveLength(1);
    expect(loggedOnA().filter((l) => l === 'wide subnet-conflict')).toHaveLength(1);
    await admin.deleteNode('wide');
    await admin.deleteNode('mimic');
  }, 60_000);
});
