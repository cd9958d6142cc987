// The Kubernetes lease store against a real kube-apiserver, as the user
// `twill` bound only to deploy/'s ClusterRole: our subnet is the Node's
// podCIDR (and twill waits while there is none), the flannel annotations
// are published and a restart keeps the VtepMAC, public-ip-overwrite wins,
// NetworkUnavailable=False is set without touching other conditions, peers
// come and go with their Node objects, hostile annotations become invalid
// records, and the watch carries on after the apiserver restarts, resumes
// short watches without loss, re-lists after a cut, and stops at once; a
// list with a page limit of 2 Nodes sees every Node.
// Dual-stack: both podCIDRs (either order), flannel's v6 annotations, and a
// Node without an IPv6 podCIDR (ours: an error; a peer: IPv4 only).
// IPv6-only: a Node whose spec.podCIDRs is one IPv6 CIDR leases it alone,
// publishes no public-ip or backend-data, and is a peer with no IPv4 subnet:
// admitted by IPv6-only and dual-stack nodes, refused by IPv4-only ones.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { ClientKubeApi, type KubeApi } from '../../src/lease/kube-api.ts';
import { KubeLeaseStore } from '../../src/lease/kube-store.ts';
import { PeerTracker } from '../../src/lease/tracker.ts';
import type { Lease, LeaseAttrs, LeaseEvent } from '../../src/lease/types.ts';
import { formatCidr, type Cidr } from '../../src/net/ipv4.ts';
import { formatCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
import { captureLog } from '../helpers/log.ts';
import { vxlanAttrs } from '../contract/lease-store.ts';
import type { KubeApiServer } from '../helpers/kube.ts';
import { startKubeTestCluster, type KubeAdmin } from '../helpers/kube-nodes.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';
import { startProxy } from '../helpers/proxy.ts';

const P = 'flannel.alpha.coreos.com';
const NETCONF = '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}';
const config = parseNetConfig(NETCONF);
const signal = new AbortController().signal;
let kube: KubeApiServer;
let admin: KubeAdmin;
let kubeconfig: string;
let dir: string;
let netConf: string;

beforeAll(async () => {
  ({ kube, admin, kubeconfig, dir } = await startKubeTestCluster());
  netConf = join(dir, 'net-conf.json');
  await writeFile(netConf, NETCONF);
}, 60_000);
afterAll(() => kube?.stop());

function store(
  nodeName: string,
  o: {
    api?: KubeApi;
    watchTimeoutSeconds?: number;
    relistIntervalMs?: number;
    annotationPrefix?: string;
    netConfigPath?: string;
  } = {},
): KubeLeaseStore {
  const { api, ...rest } = o;
  return new KubeLeaseStore({
    api: api ?? new ClientKubeApi({ kubeconfigFile: kubeconfig, callTimeoutMs: 3000 }),
    nodeName,
    netConfigPath: netConf,
    ...rest,
  });
}

/**
 * The API through a TCP proxy the test can cut or hold (the apiserver's certificate names 127.0.0.1
 * on any port).
 */
async function proxiedApi(): Promise<{
  api: ClientKubeApi;
  proxy: Awaited<ReturnType<typeof startProxy>>;
}> {
  const port = Number(new URL(kube.url).port);
  const proxy = await startProxy({ host: '127.0.0.1', port });
  onTestFinished(() => proxy.close());
  const apiUrl = proxy.endpoint.replace('http://', 'https://');
  return {
    api: new ClientKubeApi({ kubeconfigFile: kubeconfig, apiUrl, callTimeoutMs: 3000 }),
    proxy,
  };
}

function watch(s: KubeLeaseStore): { events: LeaseEvent[]; stop: () => Promise<void> } {
  const events: LeaseEvent[] = [];
  const ctl = new AbortController();
  const done = s.watchLeases({ signal: ctl.signal, onEvent: (e) => events.push(e) });
  return { events, stop: async () => (ctl.abort(), await done) };
}

const annotations = (attrs: LeaseAttrs): Record<string, string> => ({
  [`${P}/backend-type`]: attrs.backendType,
  // flannel writes no IPv4 pair for an IPv6-only node
  ...(attrs.publicIp === null
    ? {}
    : {
        [`${P}/backend-data`]: attrs.backendData
          ? JSON.stringify({ VNI: attrs.backendData.vni, VtepMAC: attrs.backendData.vtepMac })
          : 'null',
        [`${P}/public-ip`]: attrs.publicIp,
      }),
  [`${P}/kube-subnet-manager`]: 'true',
});
/** An IPv4 subnet as text; null for none (an IPv6-only lease). */
const cidrText = (c: Cidr | null): string | null => (c ? formatCidr(c) : null);

describe('Kubernetes lease store', () => {
  it('takes the podCIDR, publishes the flannel annotations, and marks the network available', async () => {
    await admin.createNode('n1', {
      podCidr: '10.244.7.0/24',
      conditions: [{ type: 'Ready', status: 'True' }],
    });
    const s = store('n1');
    const lease = await s.acquireLease(
      { config, attrs: vxlanAttrs(1), previous: undefined },
      signal,
    );
    expect({ key: lease.key, subnet: cidrText(lease.subnet) }).toEqual({
      key: 'n1',
      subnet: '10.244.7.0/24',
    });
    const node = await admin.node('n1');
    expect(node?.metadata?.annotations).toMatchObject(annotations(vxlanAttrs(1)));
    expect(node?.metadata?.annotations?.[`${P}/backend-data`]).toBe(
      '{"VNI":1,"VtepMAC":"02:00:00:00:01:01"}',
    );
    await s.markReady(lease, signal);
    const conditions = (await admin.node('n1'))?.status?.conditions?.map(
      (c) => `${c.type}=${c.status}`,
    );
    expect(conditions?.sort()).toEqual(['NetworkUnavailable=False', 'Ready=True']);
    const since = (await admin.node('n1'))?.status?.conditions?.find(
      (c) => c.type === 'NetworkUnavailable',
    )?.lastTransitionTime;
    await new Promise((r) => setTimeout(r, 1_100));
    await s.markReady(lease, signal);
    expect(
      (await admin.node('n1'))?.status?.conditions?.find((c) => c.type === 'NetworkUnavailable')
        ?.lastTransitionTime,
    ).toEqual(since);
  });

  it('waits with a clear error while the Node is missing or has no podCIDR; refuses one outside Network', async () => {
    const s = store('n2');
    await expect(
      s.acquireLease({ config, attrs: vxlanAttrs(2), previous: undefined }, signal),
    ).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('node n2 does not exist'),
    });
    await admin.createNode('n2');
    await expect(
      s.acquireLease({ config, attrs: vxlanAttrs(2), previous: undefined }, signal),
    ).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('controller-manager must allocate node CIDRs'),
    });
    await admin.patchNode('n2', { spec: { podCIDR: '10.99.2.0/24', podCIDRs: ['10.99.2.0/24'] } });
    await expect(
      s.acquireLease({ config, attrs: vxlanAttrs(2), previous: undefined }, signal),
    ).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(/10\.99\.2\.0\/24 is outside Network 10\.244\.0\.0\/16/),
    });
  });

  it('keeps the VtepMAC its Node already publishes across a restart, and honours public-ip-overwrite', async () => {
    await admin.createNode('n3', { podCidr: '10.244.3.0/24' });
    const first = await store('n3').acquireLease(
      { config, attrs: vxlanAttrs(3), previous: undefined },
      signal,
    );
    const restarted = { ...vxlanAttrs(3), backendData: { vni: 1, vtepMac: '02:00:00:00:09:09' } };
    const again = await store('n3').acquireLease(
      { config, attrs: restarted, previous: undefined },
      signal,
    );
    expect(again.attrs.backendData?.vtepMac).toBe(first.attrs.backendData?.vtepMac);
    await admin.patchNodeStatus('n3', {
      metadata: { annotations: { [`${P}/public-ip-overwrite`]: '198.51.100.3' } },
    });
    const overwritten = await store('n3').acquireLease(
      { config, attrs: vxlanAttrs(3), previous: undefined },
      signal,
    );
    expect(overwritten.attrs.publicIp).toBe('198.51.100.3');
    expect((await admin.node('n3'))?.metadata?.annotations?.[`${P}/public-ip`]).toBe(
      '198.51.100.3',
    );
    await admin.patchNodeStatus('n3', {
      metadata: { annotations: { [`${P}/public-ip-overwrite`]: 'not-an-ip' } },
    });
    await expect(
      store('n3').acquireLease({ config, attrs: vxlanAttrs(3), previous: undefined }, signal),
    ).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('public-ip-overwrite "not-an-ip"'),
    });
  });

  it('reports peers as their Nodes come, change and go; unmanaged Nodes are not peers; hostile annotations are invalid records', async () => {
    const s = store('n1');
    const w = watch(s);
    await waitFor(() => w.events.some((e) => e.type === 'snapshot'), {
      timeoutMs: 5000,
      what: 'snapshot',
    });
    const snap = w.events.find((e) => e.type === 'snapshot');
    expect(snap?.type === 'snapshot' && snap.records.map((r) => r.key).sort()).toEqual([
      'n1',
      'n3',
    ]);
    await admin.createNode('p1', {
      podCidr: '10.244.11.0/24',
      annotations: annotations(vxlanAttrs(11)),
    });
    await admin.createNode('plain', { podCidr: '10.244.12.0/24' });
    await admin.createNode('evil', {
      podCidr: '10.244.13.0/24',
      annotations: {
        ...annotations(vxlanAttrs(13)),
        [`${P}/backend-data`]: '{"VNI":1,"VtepMAC":"ff:ff:ff:ff:ff:ff"}',
      },
    });
    await admin.patchNodeStatus('p1', { metadata: { annotations: annotations(vxlanAttrs(21)) } });
    await admin.patchNodeStatus('n3', {
      metadata: { annotations: { [`${P}/kube-subnet-manager`]: null } },
    });
    await admin.deleteNode('p1');
    await waitFor(() => w.events.filter((e) => e.type === 'delete').length >= 2, {
      timeoutMs: 5000,
      what: 'two deletes',
    });
    const seen = w.events.flatMap((e) =>
      e.type === 'put'
        ? [`put ${e.record.key} ${e.record.ok ? e.record.lease.attrs.publicIp : 'invalid'}`]
        : e.type === 'delete'
          ? [`delete ${e.key}${e.gone ? ' (gone)' : ''}`]
          : [],
    );
    expect(seen).toEqual([
      'put p1 192.0.2.11',
      'put evil invalid',
      'put p1 192.0.2.21',
      'delete n3',
      'delete p1 (gone)',
    ]);
    const evil = w.events.find((e) => e.type === 'put' && e.record.key === 'evil');
    expect(evil?.type === 'put' && !evil.record.ok && evil.record.reason).toMatch(
      /backend-data.*multicast/,
    );
    await w.stop();
  });

  it('keeps watching across an apiserver restart and learns a Node added after it', async () => {
    const s = store('n1');
    const w = watch(s);
    await waitFor(() => w.events.some((e) => e.type === 'snapshot'), {
      timeoutMs: 5000,
      what: 'snapshot',
    });
    await kube.stopApiServer();
    await waitFor(() => w.events.some((e) => e.type === 'connectivity' && !e.connected), {
      timeoutMs: 10_000,
      what: 'connectivity lost',
    });
    await kube.start();
    await admin.createNode('p2', {
      podCidr: '10.244.22.0/24',
      annotations: annotations(vxlanAttrs(22)),
    });
    await waitFor(
      () =>
        w.events.some(
          (e) =>
            (e.type === 'put' && e.record.key === 'p2') ||
            (e.type === 'snapshot' && e.records.some((r) => r.key === 'p2')),
        ),
      { timeoutMs: 15_000, what: 'p2 after the restart' },
    );
    expect(w.events.filter((e) => e.type === 'connectivity').at(-1)).toMatchObject({
      connected: true,
    });
    await w.stop();
  }, 60_000);

  it('learns what changed while its connection was cut: a re-list replaces the peer set', async () => {
    const { api, proxy } = await proxiedApi();
    await admin.createNode('m1', {
      podCidr: '10.244.31.0/24',
      annotations: annotations(vxlanAttrs(31)),
    });
    await admin.createNode('m2', {
      podCidr: '10.244.32.0/24',
      annotations: annotations(vxlanAttrs(32)),
    });
    const w = watch(store('n1', { api }));
    await waitFor(() => w.events.some((e) => e.type === 'snapshot'), {
      timeoutMs: 5000,
      what: 'snapshot',
    });
    proxy.cut();
    await waitFor(() => w.events.some((e) => e.type === 'connectivity' && !e.connected), {
      timeoutMs: 35_000,
      what: 'connectivity lost',
    });
    await admin.deleteNode('m1');
    await admin.patchNodeStatus('m2', { metadata: { annotations: annotations(vxlanAttrs(42)) } });
    await admin.createNode('m3', {
      podCidr: '10.244.33.0/24',
      annotations: annotations(vxlanAttrs(33)),
    });
    proxy.restore();
    const last = (): LeaseEvent | undefined => w.events.filter((e) => e.type === 'snapshot').at(-1);
    await waitFor(() => w.events.filter((e) => e.type === 'snapshot').length === 2, {
      timeoutMs: 15_000,
      what: 'a re-list',
    });
    const snap = last();
    const seen =
      snap?.type === 'snapshot'
        ? snap.records
            .map((r) => `${r.key} ${r.ok ? r.lease.attrs.publicIp : 'invalid'}`)
            .filter((t) => t.startsWith('m'))
            .sort()
        : [];
    expect(seen).toEqual(['m2 192.0.2.42', 'm3 192.0.2.33']);
    await w.stop();
    await admin.deleteNode('m2');
    await admin.deleteNode('m3');
  }, 60_000);

  it('resumes each short watch from its last resourceVersion without missing a change or re-listing', async () => {
    const real = new ClientKubeApi({ kubeconfigFile: kubeconfig });
    let watches = 0;
    const counting: KubeApi = {
      server: real.server,
      readNode: (n, s) => real.readNode(n, s),
      listNodes: (s, o) => real.listNodes(s, o),
      patchNodeStatus: (n, p, s) => real.patchNodeStatus(n, p, s),
      watchNodes: (o) => (watches++, real.watchNodes(o)),
    };
    const w = watch(store('n1', { api: counting, watchTimeoutSeconds: 1 }));
    await waitFor(() => w.events.some((e) => e.type === 'snapshot'), {
      timeoutMs: 5000,
      what: 'snapshot',
    });
    for (let i = 0; i < 8; i++) {
      await admin.createNode(`r${i}`, {
        podCidr: `10.244.${50 + i}.0/24`,
        annotations: annotations(vxlanAttrs(50 + i)),
      });
      await new Promise((r) => setTimeout(r, 400));
    }
    await waitFor(() => w.events.some((e) => e.type === 'put' && e.record.key === 'r7'), {
      timeoutMs: 5000,
      what: 'r7',
    });
    expect(w.events.flatMap((e) => (e.type === 'put' ? [e.record.key] : []))).toEqual([
      'r0',
      'r1',
      'r2',
      'r3',
      'r4',
      'r5',
      'r6',
      'r7',
    ]);
    expect(w.events.filter((e) => e.type === 'snapshot')).toHaveLength(1);
    expect(watches).toBeGreaterThanOrEqual(3);
    await w.stop();
    for (let i = 0; i < 8; i++) await admin.deleteNode(`r${i}`);
  }, 30_000);

  it('stops a watch at once while the apiserver has not answered', async () => {
    const { api, proxy } = await proxiedApi();
    proxy.hold();
    const ctl = new AbortController();
    const watching = api.watchNodes({
      resourceVersion: '0',
      timeoutSeconds: 25,
      signal: ctl.signal,
      onEvent: () => undefined,
    });
    await new Promise((r) => setTimeout(r, 200));
    const t0 = Date.now();
    ctl.abort();
    expect(await watching).toEqual({ reason: 'aborted' });
    expect(Date.now() - t0).toBeLessThan(slowBound(1_000));
  });

  it("stops with CONFIG_INVALID and the apiserver's words when a patch is refused as invalid (422)", async () => {
    await admin.createNode('n5', { podCidr: '10.244.5.0/24' });
    await expect(
      store('n5', { annotationPrefix: 'Bad_Prefix' }).acquireLease(
        { config, attrs: vxlanAttrs(5), previous: undefined },
        signal,
      ),
    ).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(/HTTP 422 .*Bad_Prefix/),
    });
  });

  it('ends a watch from a resourceVersion the apiserver no longer holds as "gone" (410), so the store re-lists', async () => {
    const api = new ClientKubeApi({ kubeconfigFile: kubeconfig });
    const end = await api.watchNodes({
      resourceVersion: '1',
      timeoutSeconds: 5,
      signal: AbortSignal.timeout(10_000),
      onEvent: () => undefined,
    });
    expect(end).toMatchObject({ reason: 'gone', detail: expect.stringContaining('410') });
    const listed = await api.listNodes(signal);
    const quiet = await api.watchNodes({
      resourceVersion: listed.resourceVersion,
      timeoutSeconds: 1,
      signal: AbortSignal.timeout(10_000),
      onEvent: () => undefined,
    });
    expect(quiet).toEqual({ reason: 'closed' });
  });

  it('lists, after publishing, no older than its own write: the watch cache may be behind it', async () => {
    await admin.createNode('f1', { podCidr: '10.244.71.0/24' });
    const real = new ClientKubeApi({ kubeconfigFile: kubeconfig });
    const asked: ({ notOlderThan?: string } | undefined)[] = [];
    const listed: string[] = [];
    const recording: KubeApi = {
      server: real.server,
      readNode: (n, s) => real.readNode(n, s),
      listNodes: async (s, o) => {
        asked.push(o);
        const l = await real.listNodes(s, o);
        listed.push(l.resourceVersion);
        return l;
      },
      patchNodeStatus: (n, p, s) => real.patchNodeStatus(n, p, s),
      watchNodes: (o) => real.watchNodes(o),
    };
    const s = store('f1', { api: recording, relistIntervalMs: 300 });
    const lease = await s.acquireLease(
      { config, attrs: vxlanAttrs(71), previous: undefined },
      signal,
    );
    const w = watch(s);
    await waitFor(() => asked.length >= 2, { timeoutMs: 10_000, what: 'two lists' });
    await w.stop();
    // the first list names our write; the apiserver answers at least that new, with our lease in
    expect(asked[0]).toEqual({ notOlderThan: lease.version });
    expect(BigInt(listed[0] ?? '0')).toBeGreaterThanOrEqual(BigInt(lease.version));
    const snap = w.events.find((e) => e.type === 'snapshot');
    expect(snap?.type === 'snapshot' && snap.records.some((r) => r.key === 'f1')).toBe(true);
    // a later re-list takes the cache as it stands
    expect(asked[1]).toEqual({});
    await admin.deleteNode('f1');
  });

  it('lists every Node with a page limit of 2 (this apiserver answers from its watch cache whole)', async () => {
    const paged = await new ClientKubeApi({
      kubeconfigFile: kubeconfig,
      listPageSize: 2,
    }).listNodes(signal);
    const whole = (await admin.api.listNode()).items.map((n) => n.metadata?.name);
    expect(whole.length).toBeGreaterThan(4);
    expect(paged.nodes.map((n) => n.name).sort()).toEqual(whole.sort());
    expect(Number(paged.resourceVersion)).toBeGreaterThan(0);
  });

  it('renews by re-publishing changed annotations; a deleted Node is a lost lease, a new podCIDR a taken one', async () => {
    await admin.createNode('n4', { podCidr: '10.244.4.0/24' });
    const s = store('n4');
    const lease = await s.acquireLease(
      { config, attrs: vxlanAttrs(4), previous: undefined },
      signal,
    );
    await admin.patchNodeStatus('n4', {
      metadata: {
        annotations: { [`${P}/backend-data`]: '{"VNI":1,"VtepMAC":"02:66:66:66:66:66"}' },
      },
    });
    await s.renewLease(lease, signal);
    expect((await admin.node('n4'))?.metadata?.annotations?.[`${P}/backend-data`]).toBe(
      '{"VNI":1,"VtepMAC":"02:00:00:00:01:04"}',
    );
    await admin.deleteNode('n4');
    await expect(s.renewLease(lease, signal)).rejects.toMatchObject({ code: 'LEASE_LOST' });
    await expect(s.reclaimLease(lease, signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    await admin.createNode('n4', { podCidr: '10.244.4.0/24' });
    expect((await s.reclaimLease(lease, signal)).key).toBe('n4');
    expect((await admin.node('n4'))?.metadata?.annotations?.[`${P}/kube-subnet-manager`]).toBe(
      'true',
    );
    await admin.deleteNode('n4');
    await admin.createNode('n4');
    await expect(s.reclaimLease(lease, signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('not yet allocated'),
    });
    await admin.deleteNode('n4');
    await admin.createNode('n4', { podCidr: '10.244.40.0/24' });
    await expect(s.reclaimLease(lease, signal)).rejects.toMatchObject({
      code: 'LEASE_TAKEN',
      message: expect.stringContaining('10.244.40.0/24'),
    });
  });
});

describe('Kubernetes lease store, dual-stack (spec.podCIDRs with both families)', () => {
  const dual = parseNetConfig(
    '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}',
  );
  function dualAttrs(n: number): LeaseAttrs {
    const hex = n.toString(16).padStart(2, '0');
    return {
      ...vxlanAttrs(n),
      publicIpv6: `fd00:192::${n.toString(16)}`,
      backendData6: { vni: 1, vtepMac: `02:00:00:00:06:${hex}` },
    };
  }
  const v6annotations = (attrs: LeaseAttrs): Record<string, string> => ({
    ...annotations(attrs),
    [`${P}/public-ipv6`]: attrs.publicIpv6 ?? '',
    [`${P}/backend-v6-data`]: attrs.backendData6
      ? JSON.stringify({ VNI: attrs.backendData6.vni, VtepMAC: attrs.backendData6.vtepMac })
      : 'null',
  });
  const pair = (l: Lease): [string | null, string | null] => [
    cidrText(l.subnet),
    l.subnet6 ? formatCidr6(l.subnet6) : null,
  ];

  it("takes both podCIDRs (IPv4 or IPv6 first) and publishes flannel's v6 annotations", async () => {
    await admin.createNode('d1', { podCidrs: ['10.244.61.0/24', 'fd00:10:244:61::/64'] });
    await admin.createNode('d2', { podCidrs: ['fd00:10:244:62::/64', '10.244.62.0/24'] });
    const l1 = await store('d1').acquireLease(
      { config: dual, attrs: dualAttrs(61), previous: undefined },
      signal,
    );
    expect(pair(l1)).toEqual(['10.244.61.0/24', 'fd00:10:244:61::/64']);
    const l2 = await store('d2').acquireLease(
      { config: dual, attrs: dualAttrs(62), previous: undefined },
      signal,
    );
    expect(pair(l2)).toEqual(['10.244.62.0/24', 'fd00:10:244:62::/64']);
    const a = (await admin.node('d1'))?.metadata?.annotations ?? {};
    expect(a).toMatchObject(v6annotations(dualAttrs(61)));
    expect(a[`${P}/public-ipv6`]).toBe('fd00:192::3d');
    expect(a[`${P}/backend-v6-data`]).toBe('{"VNI":1,"VtepMAC":"02:00:00:00:06:3d"}');
    // renewing a dual lease checks both podCIDRs and re-publishes nothing
    const renewed = await store('d1').renewLease(l1, signal);
    expect(pair(renewed)).toEqual(pair(l1));
    expect(renewed.version).toBe((await admin.node('d1'))?.metadata?.resourceVersion);
  });

  it('an IPv4-only config publishes no v6 annotations and ignores the IPv6 podCIDR', async () => {
    await admin.createNode('d3', { podCidrs: ['10.244.63.0/24', 'fd00:10:244:63::/64'] });
    const lease = await store('d3').acquireLease(
      { config, attrs: vxlanAttrs(63), previous: undefined },
      signal,
    );
    expect(pair(lease)).toEqual(['10.244.63.0/24', null]);
    const a = (await admin.node('d3'))?.metadata?.annotations ?? {};
    expect(Object.keys(a).filter((k) => k.includes('v6') || k.includes('ipv6'))).toEqual([]);
  });

  it('refuses our own Node without an IPv6 podCIDR, or with one outside IPv6Network', async () => {
    await admin.createNode('d4', { podCidr: '10.244.64.0/24' });
    await expect(
      store('d4').acquireLease({ config: dual, attrs: dualAttrs(64), previous: undefined }, signal),
    ).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(/node d4 has no IPv6 spec\.podCIDRs \(10\.244\.64\.0\/24\)/),
    });
    await admin.createNode('d5', { podCidrs: ['10.244.65.0/24', 'fd00:99::/64'] });
    await expect(
      store('d5').acquireLease({ config: dual, attrs: dualAttrs(65), previous: undefined }, signal),
    ).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('fd00:99::/64 is outside IPv6Network fd00:10:244::/56'),
    });
  });

  it('keeps the IPv6 VtepMAC its Node already publishes, and honours public-ipv6-overwrite', async () => {
    await admin.createNode('d6', { podCidrs: ['10.244.66.0/24', 'fd00:10:244:66::/64'] });
    const first = await store('d6').acquireLease(
      { config: dual, attrs: dualAttrs(66), previous: undefined },
      signal,
    );
    const restarted: LeaseAttrs = {
      ...dualAttrs(66),
      backendData6: { vni: 1, vtepMac: '02:00:00:00:09:66' },
    };
    const again = await store('d6').acquireLease(
      { config: dual, attrs: restarted, previous: undefined },
      signal,
    );
    expect(again.attrs.backendData6?.vtepMac).toBe(first.attrs.backendData6?.vtepMac);
    await admin.patchNodeStatus('d6', {
      metadata: { annotations: { [`${P}/public-ipv6-overwrite`]: '2001:DB8:0:0::66' } },
    });
    const overwritten = await store('d6').acquireLease(
      { config: dual, attrs: dualAttrs(66), previous: undefined },
      signal,
    );
    expect(overwritten.attrs.publicIpv6).toBe('2001:db8::66');
    expect((await admin.node('d6'))?.metadata?.annotations?.[`${P}/public-ipv6`]).toBe(
      '2001:db8::66',
    );
    await admin.patchNodeStatus('d6', {
      metadata: { annotations: { [`${P}/public-ipv6-overwrite`]: '10.0.0.1' } },
    });
    await expect(
      store('d6').acquireLease({ config: dual, attrs: dualAttrs(66), previous: undefined }, signal),
    ).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('public-ipv6-overwrite "10.0.0.1"'),
    });
  });

  it('lists dual-stack peers with subnet6, PublicIPv6 and BackendV6Data; a peer without an IPv6 podCIDR is IPv4 only; a bad v6 annotation refuses a peer only where IPv6 is on', async () => {
    await admin.createNode('d7', {
      podCidrs: ['fd00:10:244:67::/64', '10.244.67.0/24'],
      annotations: v6annotations(dualAttrs(67)),
    });
    await admin.createNode('d8', {
      podCidr: '10.244.68.0/24',
      annotations: annotations(vxlanAttrs(68)),
    });
    await admin.createNode('d9', {
      podCidrs: ['10.244.69.0/24', 'fd00:10:244:69::/64'],
      annotations: { ...v6annotations(dualAttrs(69)), [`${P}/public-ipv6`]: 'fd00::zz' },
    });
    await admin.createNode('d10', {
      podCidrs: ['10.244.70.0/24', 'fd00:10:244:70::/64'],
      annotations: { ...v6annotations(dualAttrs(70)), [`${P}/backend-v6-data`]: '{"VNI":1' },
    });
    const w = watch(store('d1'));
    await waitFor(() => w.events.some((e) => e.type === 'snapshot'), {
      timeoutMs: 5000,
      what: 'snapshot',
    });
    const snap = w.events.find((e) => e.type === 'snapshot');
    const records = new Map((snap?.type === 'snapshot' ? snap.records : []).map((r) => [r.key, r]));
    const d7 = records.get('d7');
    expect(d7?.ok && d7.lease).toMatchObject({
      attrs: {
        publicIp: '192.0.2.67',
        publicIpv6: 'fd00:192::43',
        backendData6: { vni: 1, vtepMac: '02:00:00:00:06:43' },
      },
    });
    expect(d7?.ok && pair(d7.lease)).toEqual(['10.244.67.0/24', 'fd00:10:244:67::/64']);
    const d8 = records.get('d8');
    expect(d8?.ok && pair(d8.lease)).toEqual(['10.244.68.0/24', null]);
    // a bad IPv6 annotation leaves the record readable, its problem kept apart (v6Problem)
    const d9 = records.get('d9');
    expect(d9?.ok && d9.lease.attrs.v6Problem).toMatch(/public-ipv6.*PublicIPv6 "fd00::zz"/);
    const d10 = records.get('d10');
    expect(d10?.ok && d10.lease.attrs.v6Problem).toContain(
      `annotation ${P}/backend-v6-data is not JSON`,
    );
    // the peers our own dual-stack lease admits: d7 with both families, d8 with IPv4 only; d9
    // and d10 are refused for their IPv6 annotations. A node running IPv4 only admits all four
    // for IPv4, as flannel with IPv6 off does.
    const self = records.get('d1');
    const tracker = (netconf: typeof dual): PeerTracker =>
      new PeerTracker({
        context: {
          config: netconf,
          self: self?.ok ? self.lease.subnet : undefined,
          self6: netconf.ipv6 && self?.ok ? self.lease.subnet6 : undefined,
          anySubnetSize: true,
        },
        selfKey: 'd1',
        selfAttrs: () => dualAttrs(61),
        logger: captureLog().logger,
        onSelfLost: () => undefined,
      });
    const on = tracker(dual);
    if (snap) on.handle(snap);
    const admitted = new Map(on.list().map((l) => [l.key, pair(l)]));
    expect(admitted.get('d7')).toEqual(['10.244.67.0/24', 'fd00:10:244:67::/64']);
    expect(admitted.get('d8')).toEqual(['10.244.68.0/24', null]);
    expect(admitted.has('d9')).toBe(false);
    expect(admitted.has('d10')).toBe(false);
    expect(on.skipped().get('d9')?.reason).toBe('malformed');
    expect(on.skipped().get('d10')?.detail).toContain(`${P}/backend-v6-data`);
    const off = tracker(config);
    if (snap) off.handle(snap);
    const admitted4 = new Map(off.list().map((l) => [l.key, pair(l)]));
    expect(admitted4.get('d9')).toEqual(['10.244.69.0/24', null]);
    expect(admitted4.get('d10')).toEqual(['10.244.70.0/24', null]);
    expect(admitted4.get('d7')).toEqual(['10.244.67.0/24', null]);
    await w.stop();
  });

  it('a renewal refuses a Node whose IPv6 podCIDR is no longer ours', async () => {
    await admin.createNode('d11', { podCidrs: ['10.244.71.0/24', 'fd00:10:244:71::/64'] });
    const lease = await store('d11').acquireLease(
      { config: dual, attrs: dualAttrs(71), previous: undefined },
      signal,
    );
    const moved = { ...lease, subnet6: { ...(lease.subnet6 as Cidr6), base: 1n } };
    await expect(store('d11').renewLease(moved, signal)).rejects.toMatchObject({
      code: 'LEASE_TAKEN',
      message: expect.stringContaining('IPv6 spec.podCIDRs fd00:10:244:71::/64'),
    });
  });
});

describe('Kubernetes lease store, IPv6-only (spec.podCIDRs is one IPv6 CIDR)', () => {
  const V6ONLY_TEXT =
    '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}';
  const v6only = parseNetConfig(V6ONLY_TEXT);
  const dual = parseNetConfig(
    '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}',
  );
  let v6conf: string;
  beforeAll(async () => {
    v6conf = join(dir, 'net-conf-v6only.json');
    await writeFile(v6conf, V6ONLY_TEXT);
  });
  /** what twill on an IPv6-only node n publishes: no PublicIP, no BackendData */
  function v6Attrs(n: number): LeaseAttrs {
    const hex = n.toString(16).padStart(2, '0');
    return {
      publicIp: null,
      publicIpv6: `fd00:192::${n.toString(16)}`,
      backendType: 'vxlan',
      backendData: null,
      backendData6: { vni: 1, vtepMac: `02:00:00:00:06:${hex}` },
    };
  }
  const v6store = (name: string): KubeLeaseStore => store(name, { netConfigPath: v6conf });

  it('an IPv6-only Node takes its IPv6 podCIDR and publishes only the IPv6 annotations; a second IPv6-only node sees it as a peer with no IPv4 subnet', async () => {
    await admin.createNode('s1', { podCidrs: ['fd00:10:244:81::/64'] });
    await admin.createNode('s2', { podCidrs: ['fd00:10:244:82::/64'] });
    // what a daemon built its attributes from: an IPv6-only lease drops the IPv4 ones
    const given: LeaseAttrs = {
      ...v6Attrs(0x81),
      publicIp: '192.0.2.81',
      backendData: { vni: 1, vtepMac: '02:00:00:00:01:81' },
    };
    const s1 = v6store('s1');
    const lease = await s1.acquireLease(
      { config: v6only, attrs: given, previous: undefined },
      signal,
    );
    expect(lease.key).toBe('s1');
    expect(lease.subnet).toBeNull();
    expect(lease.subnet6 && formatCidr6(lease.subnet6)).toBe('fd00:10:244:81::/64');
    expect(lease.attrs).toStrictEqual(v6Attrs(0x81));
    const published = Object.entries((await admin.node('s1'))?.metadata?.annotations ?? {})
      .filter(([k]) => k.startsWith(`${P}/`))
      .sort();
    expect(published).toEqual([
      [`${P}/backend-type`, 'vxlan'],
      [`${P}/backend-v6-data`, '{"VNI":1,"VtepMAC":"02:00:00:00:06:81"}'],
      [`${P}/kube-subnet-manager`, 'true'],
      [`${P}/public-ipv6`, 'fd00:192::81'],
    ]);
    // a renewal re-publishes nothing and keeps the lease
    const renewed = await s1.renewLease(lease, signal);
    expect(renewed.version).toBe((await admin.node('s1'))?.metadata?.resourceVersion);
    expect(renewed.subnet).toBeNull();

    const s2 = v6store('s2');
    const config = await s2.getNetworkConfig();
    expect(config.ipv4).toBeNull();
    const own = await s2.acquireLease(
      { config, attrs: v6Attrs(0x82), previous: undefined },
      signal,
    );
    const w = watch(s2);
    await waitFor(() => w.events.some((e) => e.type === 'snapshot'), {
      timeoutMs: 5000,
      what: 'snapshot',
    });
    const snap = w.events.find((e) => e.type === 'snapshot');
    const records = new Map((snap?.type === 'snapshot' ? snap.records : []).map((r) => [r.key, r]));
    const peer = records.get('s1');
    expect(peer?.ok).toBe(true);
    if (!peer?.ok) throw new Error('s1 is not a lease');
    expect(peer.lease.subnet).toBeNull();
    expect(peer.lease.subnet6 && formatCidr6(peer.lease.subnet6)).toBe('fd00:10:244:81::/64');
    expect(peer.lease.attrs).toStrictEqual(v6Attrs(0x81));
    // s2's own record reads back as the lease it holds, so its tracker does not see it as lost
    const lost: string[] = [];
    const tracker = new PeerTracker({
      context: {
        config,
        self: own.subnet,
        selfPublicIp: own.attrs.publicIp,
        self6: own.subnet6,
        selfPublicIpv6: own.attrs.publicIpv6,
        anySubnetSize: true,
      },
      selfKey: 's2',
      selfAttrs: () => own.attrs,
      logger: captureLog().logger,
      onSelfLost: (why) => lost.push(why),
    });
    if (snap) tracker.handle(snap);
    expect(lost).toEqual([]);
    const admitted = tracker.list().find((l) => l.key === 's1');
    expect(admitted?.subnet).toBeNull();
    expect(admitted?.attrs.publicIpv6).toBe('fd00:192::81');
    expect(tracker.skipped().has('s1')).toBe(false);
    await w.stop();
  });

  it('an IPv6-only Node seen from IPv4 nodes: a dual-stack node routes its IPv6 half, an IPv4-only one refuses it', async () => {
    // a reader that has not read an IPv6-only config decodes the Node as it is: IPv6 only
    const w = watch(store('d1'));
    await waitFor(() => w.events.some((e) => e.type === 'snapshot'), {
      timeoutMs: 5000,
      what: 'snapshot',
    });
    const snap = w.events.find((e) => e.type === 'snapshot');
    await w.stop();
    const s1 = (snap?.type === 'snapshot' ? snap.records : []).find((r) => r.key === 's1');
    expect(s1?.ok && s1.lease.subnet).toBeNull();
    const tracker = (netconf: typeof dual, self: string): PeerTracker =>
      new PeerTracker({
        context: { config: netconf, self: undefined, anySubnetSize: true },
        selfKey: self,
        selfAttrs: () => vxlanAttrs(1),
        logger: captureLog().logger,
        onSelfLost: () => undefined,
      });
    const on = tracker(dual, 'd1');
    if (snap) on.handle(snap);
    const routed = on.list().find((l) => l.key === 's1');
    expect(routed && routed.subnet6 && formatCidr6(routed.subnet6)).toBe('fd00:10:244:81::/64');
    expect(routed?.subnet).toBeNull();
    const off = tracker(config, 'n1');
    if (snap) off.handle(snap);
    expect(off.list().some((l) => l.key === 's1')).toBe(false);
    expect(off.skipped().get('s1')).toEqual({
      reason: 'malformed',
      detail:
        'no subnet in a family this node runs: it leases IPv6 only (IPv6 subnet fd00:10:244:81::/64); this node runs IPv4 only (no "EnableIPv6")',
    });
  });

  it('waits for an IPv6 podCIDR, and refuses a Node with only an IPv4 one, naming the fix', async () => {
    await admin.createNode('s3');
    const s3 = v6store('s3');
    const req = { config: v6only, attrs: v6Attrs(0x83), previous: undefined };
    await expect(s3.acquireLease(req, signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('--cluster-cidr=fd00:10:244::/56'),
    });
    await admin.patchNode('s3', {
      spec: { podCIDR: '10.244.83.0/24', podCIDRs: ['10.244.83.0/24'] },
    });
    await expect(s3.acquireLease(req, signal)).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(
        /node s3 has no IPv6 spec\.podCIDRs \(10\.244\.83\.0\/24\), but net-conf\.json is IPv6 only/,
      ),
    });
    expect((await admin.node('s3'))?.metadata?.annotations ?? {}).toEqual({});
  });
});
