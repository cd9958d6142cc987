// The daemon's loops (acquire, track peers, renew, reclaim) in-process
// against a real etcd: peers learned and dropped, hostile leases skipped and
// logged once, our key reclaimed within 2 s, every subnet kept when etcd is
// wiped, and a short TTL kept alive by renewal.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EtcdKv } from '../../src/lease/etcd-kv.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { startEtcd, type EtcdServer } from '../../lab/kit/etcd.ts';
import { startTestDaemon, type TestNode } from '../helpers/daemon.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';

const NETCONF = '{"Network":"10.40.0.0/16","Backend":{"Type":"vxlan"}}';
let etcd: EtcdServer;
let admin: Etcd3;
let dir: string;
const running: { stop: () => Promise<void> }[] = [];

async function startNode(o: {
  n: number;
  prefix: string;
  ttlSeconds?: number;
  publicIp?: string;
  waitForLease?: boolean;
}): Promise<TestNode> {
  const kv = await EtcdKv.connect({ endpoints: [etcd.endpoint] });
  const store = new KvLeaseStore({
    kv,
    prefix: o.prefix,
    ...(o.ttlSeconds ? { ttlSeconds: o.ttlSeconds } : {}),
  });
  const node = await startTestDaemon({
    store,
    nodeName: `node-${o.n}`,
    publicIp: o.publicIp ?? `192.0.2.${o.n}`,
    subnetFile: join(dir, `${o.prefix.slice(1)}-${o.n}.env`),
  });
  running.push(node);
  if (o.waitForLease !== false)
    await waitFor(() => node.state() !== undefined, {
      timeoutMs: 10_000,
      what: `node ${o.n} lease`,
    });
  return node;
}

const peerKeys = (node: TestNode): string[] => (node.state()?.peers ?? []).map((p) => p.key).sort();
const ownKey = (node: TestNode): string => node.state()?.lease.key ?? '';

beforeAll(async () => {
  etcd = await startEtcd();
  admin = new Etcd3({ hosts: etcd.endpoint });
  dir = await mkdtemp(join(tmpdir(), 'twill-daemon-'));
});
afterEach(async () => {
  await Promise.all(running.splice(0).map((n) => n.stop()));
});
afterAll(async () => {
  admin?.close();
  await etcd?.destroy();
  await rm(dir, { recursive: true, force: true });
});

describe('daemon against a real etcd', () => {
  it('learns peers, skips hostile leases (logged once), and drops a removed node', async () => {
    await admin.put('/peers/config').value(NETCONF);
    const a = await startNode({ n: 1, prefix: '/peers' });
    const b = await startNode({ n: 2, prefix: '/peers' });
    await waitFor(() => peerKeys(a).length === 1 && peerKeys(b).length === 1, {
      timeoutMs: 5000,
      what: 'peers',
    });
    expect(peerKeys(a)).toEqual([ownKey(b)]);
    // two free subnets of the network for hostile values (the nodes' random picks must not be
    // overwritten)
    const [free1 = '', free2 = ''] = [200, 201, 202, 203]
      .map((i) => `10.40.${i}.0-24`)
      .filter((k) => k !== ownKey(a) && k !== ownKey(b));
    const hostile: [string, string][] = [
      [free1, 'garbage{'],
      [
        '10.99.0.0-24',
        '{"PublicIP":"192.0.2.9","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:09"}}',
      ],
      [
        '0.0.0.0-0',
        '{"PublicIP":"192.0.2.9","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:09"}}',
      ],
      [
        free2,
        '{"PublicIP":"192.0.2.9","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"01:00:5e:00:00:01"}}',
      ],
    ];
    for (const [key, value] of hostile) {
      await admin.put(`/peers/subnets/${key}`).value(value);
      await admin.put(`/peers/subnets/${key}`).value(value); // twice: still logged once
    }
    const skipped = (): string[] =>
      a.log.lines.filter((l) => l.msg === 'skipping invalid peer lease').map((l) => String(l.key));
    await waitFor(() => skipped().length >= 4, { timeoutMs: 5000, what: 'hostile leases logged' });
    expect(skipped().sort()).toEqual(['0.0.0.0-0', free1, free2, '10.99.0.0-24'].sort());
    expect(peerKeys(a)).toEqual([ownKey(b)]);

    const bKey = ownKey(b);
    await b.stop();
    await admin.delete().key(`/peers/subnets/${bKey}`);
    const gone = await waitFor(() => peerKeys(a).length === 0, {
      timeoutMs: slowBound(1_000),
      what: 'peer removed',
    });
    expect(gone).toBeLessThan(slowBound(1_000));
  });

  it('takes its own deleted key back within 2 seconds', async () => {
    await admin.put('/own/config').value(NETCONF);
    const a = await startNode({ n: 3, prefix: '/own' });
    const key = `/own/subnets/${ownKey(a)}`;
    await admin.delete().key(key);
    const ms = await waitFor(async () => (await admin.get(key).string()) !== null, {
      timeoutMs: slowBound(2_000),
      what: 'reclaim',
    });
    expect(ms).toBeLessThan(slowBound(2_000));
    expect(ownKey(a)).toBe(key.split('/').at(-1));
  });

  it('keeps every subnet when etcd is wiped and only the config is put back', async () => {
    await admin.put('/wipe/config').value(NETCONF);
    const nodes = [
      await startNode({ n: 4, prefix: '/wipe' }),
      await startNode({ n: 5, prefix: '/wipe' }),
      await startNode({ n: 6, prefix: '/wipe' }),
    ];
    const before = nodes.map(ownKey);
    await waitFor(() => nodes.every((n) => peerKeys(n).length === 2), {
      timeoutMs: 5000,
      what: 'full mesh',
    });
    await etcd.stop({ wipe: true });
    await etcd.start();
    await admin.put('/wipe/config').value(NETCONF);
    const ms = await waitFor(
      async () => Object.keys(await admin.getAll().prefix('/wipe/subnets/').strings()).length === 3,
      { timeoutMs: slowBound(5_000), what: 'leases back' },
    );
    expect(
      Object.keys(await admin.getAll().prefix('/wipe/subnets/').strings())
        .map((k) => k.split('/').at(-1))
        .sort(),
    ).toEqual([...before].sort());
    await waitFor(() => nodes.every((n) => peerKeys(n).length === 2), {
      timeoutMs: 5000,
      what: 'peers re-learned',
    });
    expect(nodes.map(ownKey)).toEqual(before);
    expect(ms).toBeLessThan(slowBound(5_000));
  });

  it('renews a short TTL so the lease outlives it', async () => {
    await admin.put('/ttl/config').value(NETCONF);
    const a = await startNode({ n: 7, prefix: '/ttl', ttlSeconds: 2 });
    const key = `/ttl/subnets/${ownKey(a)}`;
    for (let i = 0; i < 12; i++) {
      await new Promise((r) => setTimeout(r, 500));
      expect(await admin.get(key).string()).not.toBeNull();
    }
    expect(a.log.lines.some((l) => l.msg === 'own lease lost; reclaiming it')).toBe(false);
  });

  it("a node started with another live node's PublicIP never takes its subnet: it waits, saying why", async () => {
    await admin.put('/identity/config').value(NETCONF);
    const a = await startNode({ n: 1, prefix: '/identity' });
    const key = ownKey(a);
    const before = await admin.get(`/identity/subnets/${key}`).string();
    // node-2 claims node-1's address (a wrong --public-ip, a second machine behind one NAT address)
    const b = await startNode({
      n: 2,
      prefix: '/identity',
      publicIp: '192.0.2.1',
      waitForLease: false,
    });
    const said = (): boolean =>
      b.log.lines.some(
        (l) =>
          l.msg === "acquiring lease: another live node holds our PublicIP's lease; retrying" &&
          String(l.err).includes('node-1') &&
          String(l.err).includes('node-2'),
      );
    await waitFor(() => said(), {
      timeoutMs: slowBound(5_000),
      what: 'node-2 refused with the conflict named',
    });
    await new Promise((r) => setTimeout(r, 1_500));
    expect(b.state()).toBeUndefined();
    expect(await admin.get(`/identity/subnets/${key}`).string()).toBe(before);
    expect(JSON.parse(before ?? '{}')).toMatchObject({
      PublicIP: '192.0.2.1',
      TwillNode: 'node-1',
    });
    expect(ownKey(a)).toBe(key);
  }, 30_000);
});
