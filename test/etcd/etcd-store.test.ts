// The etcd lease store against a real etcd on loopback: the LeaseStore
// contract, 50 concurrent acquisitions, and the failures flannel users met:
// etcd restarted under a watch, compaction while disconnected, etcd wiped.
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { encodeLeaseValue } from '../../src/lease/codec.ts';
import { EtcdKv } from '../../src/lease/etcd-kv.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import type { LeaseEvent, LeaseStore } from '../../src/lease/types.ts';
import { kvHarness, leaseStoreContract, vxlanAttrs } from '../contract/lease-store.ts';
import { startEtcd, type EtcdServer } from '../../lab/kit/etcd.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { startProxy } from '../helpers/proxy.ts';

let etcd: EtcdServer;
let admin: Etcd3;
const opened: LeaseStore[] = [];
const signal = new AbortController().signal;

beforeAll(async () => {
  etcd = await startEtcd();
  admin = new Etcd3({ hosts: etcd.endpoint });
});
afterAll(async () => {
  await Promise.all(opened.map((s) => s.close()));
  admin?.close();
  await etcd?.destroy();
});

async function openStore(o: {
  prefix: string;
  ttlSeconds?: number;
  endpoint?: string;
}): Promise<LeaseStore> {
  const kv = await EtcdKv.connect({ endpoints: [o.endpoint ?? etcd.endpoint] });
  const store = new KvLeaseStore({
    kv,
    prefix: o.prefix,
    ...(o.ttlSeconds ? { ttlSeconds: o.ttlSeconds } : {}),
  });
  opened.push(store);
  return store;
}

leaseStoreContract('etcd', () =>
  kvHarness({
    newStore: openStore,
    put: async (k, v) => void (await admin.put(k).value(v)),
    del: async (k) => void (await admin.delete().key(k)),
    get: async (k) => (await admin.get(k).string()) ?? undefined,
  }),
);

const NETCONF = '{"Network":"10.30.0.0/16","Backend":{"Type":"vxlan"}}';
const config = parseNetConfig(NETCONF);

function collect(store: LeaseStore): {
  events: LeaseEvent[];
  snapshots: () => LeaseEvent[];
  stop: () => Promise<void>;
} {
  const events: LeaseEvent[] = [];
  const ctl = new AbortController();
  const done = store.watchLeases({ signal: ctl.signal, onEvent: (e) => events.push(e) });
  return {
    events,
    snapshots: () => events.filter((e) => e.type === 'snapshot'),
    stop: async () => {
      ctl.abort();
      await done;
    },
  };
}

describe('etcd lease store under failure', () => {
  it('gives 50 concurrent acquisitions 50 distinct subnets', async () => {
    const prefix = '/fifty';
    await admin.put(`${prefix}/config`).value(NETCONF);
    const stores = await Promise.all(Array.from({ length: 50 }, () => openStore({ prefix })));
    const leases = await Promise.all(
      stores.map((s, i) =>
        s.acquireLease({ config, attrs: vxlanAttrs(i + 1), previous: undefined }, signal),
      ),
    );
    expect(new Set(leases.map((l) => l.key)).size).toBe(50);
    expect(Object.keys(await admin.getAll().prefix(`${prefix}/subnets/`).keys())).toHaveLength(50);
  });

  it('reads a lease exactly as flannel writes it', async () => {
    const prefix = '/flannel-written';
    const store = await openStore({ prefix });
    await admin
      .put(`${prefix}/subnets/10.30.8.0-24`)
      .value(
        '{"PublicIP":"192.168.56.11","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"7e:1b:4f:9a:2c:01"}}',
      );
    const w = collect(store);
    await waitFor(() => w.snapshots().length === 1, { timeoutMs: 5000, what: 'snapshot' });
    const snap = w.snapshots()[0];
    expect(snap?.type === 'snapshot' && snap.records[0]).toMatchObject({
      ok: true,
      lease: {
        key: '10.30.8.0-24',
        attrs: {
          publicIp: '192.168.56.11',
          backendType: 'vxlan',
          backendData: { vni: 1, vtepMac: '7e:1b:4f:9a:2c:01' },
        },
      },
    });
    await w.stop();
  });

  it('keeps watching across an etcd restart', async () => {
    const prefix = '/restart';
    const store = await openStore({ prefix });
    const w = collect(store);
    await waitFor(() => w.snapshots().length === 1, { timeoutMs: 5000, what: 'snapshot' });
    await etcd.stop();
    await waitFor(() => w.events.some((e) => e.type === 'connectivity' && !e.connected), {
      timeoutMs: 15_000,
      what: 'disconnect seen',
    });
    await etcd.start();
    await admin.put(`${prefix}/subnets/10.30.9.0-24`).value(encodeLeaseValue(vxlanAttrs(9)));
    await waitFor(
      () =>
        w.events.some((e) => e.type === 'put' && e.record.key === '10.30.9.0-24') ||
        w.snapshots().length > 1,
      {
        timeoutMs: 15_000,
        what: 'put or re-list after restart',
      },
    );
    // after a broken stream the store re-lists rather than trusting the resumed watch
    await waitFor(
      () => w.snapshots().some((s) => s.type === 'snapshot' && /reconnected/.test(s.reason)),
      { timeoutMs: 15_000, what: 're-list' },
    );
    await waitFor(
      () =>
        w
          .snapshots()
          .some((s) => s.type === 'snapshot' && s.records.some((r) => r.key === '10.30.9.0-24')) ||
        w.events.some((e) => e.type === 'put' && e.record.key === '10.30.9.0-24'),
      { timeoutMs: 15_000, what: 'the new lease seen' },
    );
    await w.stop();
  });

  it('re-lists after compaction while the connection was broken', async () => {
    const prefix = '/compaction';
    const url = new URL(etcd.endpoint);
    const proxy = await startProxy({ host: url.hostname, port: Number(url.port) });
    try {
      await admin.put(`${prefix}/subnets/10.30.1.0-24`).value(encodeLeaseValue(vxlanAttrs(1)));
      const store = await openStore({ prefix, endpoint: proxy.endpoint });
      const w = collect(store);
      await waitFor(() => w.snapshots().length === 1, { timeoutMs: 5000, what: 'snapshot' });
      proxy.cut();
      await admin.delete().key(`${prefix}/subnets/10.30.1.0-24`);
      await admin.put(`${prefix}/subnets/10.30.2.0-24`).value(encodeLeaseValue(vxlanAttrs(2)));
      const rev = (await admin.get('x').exec()).header.revision;
      await admin.kv.compact({ revision: rev, physical: true });
      proxy.restore();
      await waitFor(() => w.snapshots().length === 2, {
        timeoutMs: 20_000,
        what: `re-list after compaction ${JSON.stringify(w.events)}`,
      });
      const snap = w.snapshots()[1];
      // either etcd's compaction cancel or the reconnect itself triggers the re-list
      expect(snap?.type === 'snapshot' && snap.reason).toMatch(/compact|reconnected/);
      expect(snap?.type === 'snapshot' && snap.records.map((r) => r.key)).toEqual(['10.30.2.0-24']);
      await w.stop();
    } finally {
      await proxy.close();
    }
  });

  it('re-lists when etcd comes back wiped, and the lease is reclaimed with the same subnet', async () => {
    const prefix = '/wiped';
    await admin.put(`${prefix}/config`).value(NETCONF);
    const store = await openStore({ prefix });
    for (let i = 0; i < 20; i++) await admin.put(`/churn/${i}`).value('x');
    const lease = await store.acquireLease(
      { config, attrs: vxlanAttrs(3), previous: undefined },
      signal,
    );
    const w = collect(store);
    await waitFor(() => w.snapshots().length === 1, { timeoutMs: 5000, what: 'snapshot' });
    await etcd.stop({ wipe: true });
    await etcd.start();
    await admin.put(`${prefix}/config`).value(NETCONF);
    await waitFor(() => w.snapshots().length === 2, {
      timeoutMs: 20_000,
      what: 're-list after wipe',
    });
    const snap = w.snapshots()[1];
    expect(snap?.type === 'snapshot' && snap.reason).toMatch(/^wiped/);
    expect(snap?.type === 'snapshot' && snap.records).toEqual([]);
    expect((await store.reclaimLease(lease, signal)).key).toBe(lease.key);
    await w.stop();
  });
});
