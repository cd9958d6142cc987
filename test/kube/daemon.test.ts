// The daemon in Kubernetes mode, in-process, each node in a network
// namespace of its own, against a real kube-apiserver as the RBAC-bound user
// twill: the Nodes' podCIDRs become the subnets, each node programs the
// other's route, neighbour and FDB entry, publishes the flannel annotations
// and NetworkUnavailable=False, and when a Node object is deleted its entries
// leave the other node's kernel within a second. IPv6 only ("EnableIPv4":
// false): two nodes on an IPv6-only underlay, each Node with one IPv6
// podCIDR, route each other's IPv6 subnet through twill-v6.<VNI> (pods
// ping), publish flannel's IPv6 annotations only, and create nothing IPv4.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import type { Refusal } from '../../src/lease/admit.ts';
import { ClientKubeApi } from '../../src/lease/kube-api.ts';
import { KubeLeaseStore } from '../../src/lease/kube-store.ts';
import { kernelView } from '../helpers/dataplane.ts';
import { startTestDaemon, type TestNode } from '../helpers/daemon.ts';
import type { KubeApiServer } from '../helpers/kube.ts';
import { startKubeTestCluster, type KubeAdmin } from '../helpers/kube-nodes.ts';
import { addVeth, NetnsLab, nsRunner } from '../../lab/kit/netns.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';

const P = 'flannel.alpha.coreos.com';
let kube: KubeApiServer;
let admin: KubeAdmin;
let kubeconfig: string;
let dir: string;
/** The IPv6-only test's namespaces, made by the test (the daemons run in them). */
const lab = new NetnsLab();

beforeAll(async () => {
  ({ kube, admin, kubeconfig, dir } = await startKubeTestCluster());
  await writeFile(
    join(dir, 'net-conf.json'),
    '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}',
  );
  await writeFile(
    join(dir, 'net-conf-v6.json'),
    '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}',
  );
}, 60_000);
afterAll(async () => {
  await kube?.stop();
  await lab.destroy();
});

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

  it("IPv6 only: two nodes on an IPv6 underlay route each other's IPv6 podCIDR, publish only the IPv6 annotations, and create nothing IPv4", async () => {
    // node k6n1 at fd7b::1, k6n2 at fd7b::2: one link, IPv6 addresses only
    const [ns1, ns2] = [await lab.add('k6n1'), await lab.add('k6n2')];
    await addVeth({ ns: ns1, dev: 'eth0', peerNs: ns2, peerDev: 'eth0' });
    for (const [ns, addr] of [
      [ns1, 'fd7b::1/64'],
      [ns2, 'fd7b::2/64'],
    ] as const) {
      await nsRunner(ns)('ip', ['addr', 'add', addr, 'dev', 'eth0', 'nodad']);
      await nsRunner(ns)('ip', ['link', 'set', 'eth0', 'up']);
    }
    const start = async (n: number, ns: string): Promise<TestNode> => {
      const name = `k6n${n}`;
      await admin.createNode(name, {
        podCidrs: [`fd00:10:244:${n}::/64`],
        conditions: [{ type: 'Ready', status: 'True' }],
      });
      const store = new KubeLeaseStore({
        api: new ClientKubeApi({ kubeconfigFile: kubeconfig }),
        nodeName: name,
        netConfigPath: join(dir, 'net-conf-v6.json'),
      });
      return startTestDaemon({
        store,
        nodeName: name,
        iface: ['eth0'],
        subnetFile: join(dir, `${name}.env`),
        ns,
      });
    };
    const [a, b] = [await start(1, ns1), await start(2, ns2)];
    const routeTo = async (node: TestNode, n: number): Promise<string> =>
      (await nsRunner(node.ns)('ip', ['-6', 'route', 'show', `fd00:10:244:${n}::/64`])).stdout;
    await waitFor(async () => (await routeTo(a, 2)) !== '' && (await routeTo(b, 1)) !== '', {
      timeoutMs: 15_000,
      what: 'k6n1 and k6n2 route each other',
    });
    expect(await routeTo(a, 2)).toContain('via fd00:10:244:2:: dev twill-v6.1 proto 151');
    expect(await routeTo(b, 1)).toContain('via fd00:10:244:1:: dev twill-v6.1 proto 151');
    for (const [name, node, other] of [
      ['k6n1', a, 'fd7b::2'],
      ['k6n2', b, 'fd7b::1'],
    ] as const) {
      await waitFor(
        async () =>
          (await admin.node(name))?.status?.conditions?.some(
            (x) => x.type === 'NetworkUnavailable' && x.status === 'False',
          ) === true,
        { timeoutMs: 10_000, what: `${name} NetworkUnavailable=False` },
      );
      const annotations = (await admin.node(name))?.metadata?.annotations ?? {};
      // flannel's kube subnet manager with enableIPv4 false: no public-ip, no backend-data
      expect(
        Object.keys(annotations)
          .filter((k) => k.startsWith(P))
          .sort(),
      ).toEqual([
        `${P}/backend-type`,
        `${P}/backend-v6-data`,
        `${P}/kube-subnet-manager`,
        `${P}/public-ipv6`,
      ]);
      expect(annotations[`${P}/public-ipv6`]).toBe(name === 'k6n1' ? 'fd7b::1' : 'fd7b::2');
      const view = await kernelView(nsRunner(node.ns), { ipv6: true });
      // the peer's IPv6 VtepMAC, towards its IPv6 address; nothing IPv4 of twill's
      expect(view.v6?.fdb).toHaveLength(1);
      expect(view.v6?.fdb[0]).toContain(`dst ${other} self permanent`);
      expect(view.devices).toEqual(['twill-v6.1']);
      expect([view.routes, view.neighs, view.fdb, view.postrtg, view.fwd]).toEqual([
        [],
        [],
        [],
        '',
        '',
      ]);
      // IPv4-only Nodes of the tests before (their twill stopped) are peers it cannot route
      for (const [key, refusal] of node.state()?.refused ?? new Map<string, Refusal>())
        expect(refusal.reason, key).toBe('malformed');
    }
    // the VtepMAC k6n2 publishes for IPv6 is the one k6n1's FDB holds
    const mac2 = (
      JSON.parse(
        (await admin.node('k6n2'))?.metadata?.annotations?.[`${P}/backend-v6-data`] ?? '{}',
      ) as { VtepMAC?: string }
    ).VtepMAC;
    expect((await kernelView(nsRunner(a.ns), { ipv6: true })).v6?.fdb[0]?.split(' ')[0]).toBe(mac2);
    // subnet.env without the IPv4 pair, the IPv6 tunnel's MTU
    expect(await readFile(join(dir, 'k6n1.env'), 'utf8')).toBe(
      'FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\nFLANNEL_MTU=1430\nFLANNEL_IPMASQ=false\n',
    );
    // a pod on each node, in its IPv6 subnet, reaches the other's through the tunnel
    const pods: [TestNode, string][] = [
      [a, 'fd00:10:244:1::5'],
      [b, 'fd00:10:244:2::5'],
    ];
    for (const [node, addr] of pods) {
      const r = nsRunner(node.ns);
      await r('ip', ['link', 'add', 'pod0', 'type', 'veth', 'peer', 'name', 'pod0p']);
      await r('ip', ['addr', 'add', `${addr}/64`, 'dev', 'pod0', 'nodad']);
      await r('ip', ['link', 'set', 'pod0p', 'up']);
      await r('ip', ['link', 'set', 'pod0', 'up']);
    }
    onTestFinished(async () => {
      for (const [node] of pods)
        await nsRunner(node.ns)('ip', ['link', 'del', 'pod0']).catch(() => undefined);
    });
    const ping = await nsRunner(a.ns)('ping', [
      '-6',
      '-c',
      '2',
      '-W',
      '2',
      '-I',
      'fd00:10:244:1::5',
      'fd00:10:244:2::5',
    ]);
    expect(ping.stdout).toContain('2 received');
    await admin.deleteNode('k6n1');
    await admin.deleteNode('k6n2');
  }, 60_000);
});
