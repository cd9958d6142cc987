// The Kubernetes lease store against a real kube-apiserver, as the user
// `twill` bound only to deploy/'s ClusterRole: our subnet is the Node's
// podCIDR (and twill waits while there is none), the flannel annotations
// are published and a restart keeps the VtepMAC, public-ip-overwrite wins,
// NetworkUnavailable=False is set without touching other conditions, peers
// come and go with their Node objects, hostile annotations become invalid
// records, and the watch carries on after the apiserver restarts, resumes
// short watches without loss, re-lists after a cut, and stops at once.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { ClientKubeApi, type KubeApi } from '../../src/lease/kube-api.ts';
import { KubeLeaseStore } from '../../src/lease/kube-store.ts';
import type { LeaseAttrs, LeaseEvent } from '../../src/lease/types.ts';
import { formatCidr } from '../../src/net/ipv4.ts';
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
  o: { api?: KubeApi; watchTimeoutSeconds?: number; annotationPrefix?: string } = {},
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
  [`${P}/backend-data`]: attrs.backendData
    ? JSON.stringify({ VNI: attrs.backendData.vni, VtepMAC: attrs.backendData.vtepMac })
    : 'null',
  [`${P}/public-ip`]: attrs.publicIp,
  [`${P}/kube-subnet-manager`]: 'true',
});

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
    expect({ key: lease.key, subnet: formatCidr(lease.subnet) }).toEqual({
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
      listNodes: (s) => real.listNodes(s),
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
