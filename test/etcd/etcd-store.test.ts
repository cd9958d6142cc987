// The etcd lease store against a real etcd on loopback: the LeaseStore
// contract, 50 concurrent acquisitions, and the failures flannel users met:
// etcd restarted under a watch, compaction while disconnected, etcd wiped;
// and dual-stack leases (one key for both families) including flannel's own.
import { readFileSync } from 'node:fs';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { encodeLeaseValue, parseLeaseKey, subnetKey } from '../../src/lease/codec.ts';
import { EtcdKv } from '../../src/lease/etcd-kv.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { PeerTracker } from '../../src/lease/tracker.ts';
import type { LeaseAttrs, LeaseEvent, LeaseStore } from '../../src/lease/types.ts';
import { formatCidr6, parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
import { captureLog } from '../helpers/log.ts';
import { keysCreatedContract } from '../contract/kv-created.ts';
import { deleteIfContract } from '../contract/kv-delete.ts';
import { kvHarness, leaseStoreContract, vxlanAttrs } from '../contract/lease-store.ts';
import { startEtcd, type EtcdServer } from '../../lab/kit/etcd.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { pause } from '../../src/util/abort.ts';
import { startProxy } from '../helpers/proxy.ts';

let etcd: EtcdServer;
let admin: Etcd3;
const opened: LeaseStore[] = [];
const kvs: EtcdKv[] = [];
const signal = new AbortController().signal;

beforeAll(async () => {
  etcd = await startEtcd();
  admin = new Etcd3({ hosts: etcd.endpoint });
});
afterAll(async () => {
  await Promise.all([...opened, ...kvs].map((s) => s.close()));
  admin?.close();
  await etcd?.destroy();
});

/** An EtcdKv of its own on the test's etcd, closed after the file. */
async function openKv(): Promise<EtcdKv> {
  const kv = await EtcdKv.connect({ endpoints: [etcd.endpoint] });
  kvs.push(kv);
  return kv;
}

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

keysCreatedContract('etcd', openKv, '/created-etcd');
deleteIfContract('etcd', openKv, '/delete-etcd');

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
  it('keeps a record whose put committed on a try whose reply was lost (the retry compares in vain)', async () => {
    // A leader killed mid-call: the transaction commits, its reply is lost, and the call is tried
    // again on the next member, where the compare fails because of that very write. The new
    // lease then holds the key: revoking it, as a failed compare does, would delete the record.
    const kv = await openKv();
    type Txn = (req: unknown) => Promise<unknown>;
    const inside = kv as unknown as { txn: Txn };
    const txn = inside.txn.bind(kv);
    let twice = true;
    inside.txn = async (req) => {
      if (!twice) return txn(req);
      twice = false;
      await txn(req);
      return txn(req);
    };
    const key = '/lost-reply/subnets/10.30.9.0-24';
    const created = await kv.create(key, '{"PublicIP":"192.0.2.9"}', 60, signal);
    expect(created?.entry.modRevision).toBe(
      String((await admin.get(key).exec()).kvs[0]?.mod_revision),
    );
    // a replace of the created record, at its first revision
    const replace = (value: string) =>
      kv.replace({
        key,
        value,
        expected: created?.entry.modRevision ?? '',
        ttlSeconds: 60,
        signal,
      });
    twice = true;
    const replaced = await replace('{"PublicIP":"192.0.2.9","n":2}');
    expect(replaced).toBeDefined();
    // the record stays, bound to a live lease, long after the revokes would have run
    await pause(300);
    expect(await admin.get(key).string()).toBe('{"PublicIP":"192.0.2.9","n":2}');
    expect(await kv.expiresAt(key, signal)).toBeGreaterThan(Date.now() + 30_000);
    // a compare that fails for another writer's change still writes nothing and keeps nothing
    twice = false;
    const stale = await replace('{"PublicIP":"192.0.2.99"}');
    expect(stale).toBeUndefined();
    expect(await admin.get(key).string()).toBe('{"PublicIP":"192.0.2.9","n":2}');
  });

  it('answers true for a delete that committed on a try whose reply was lost', async () => {
    const kv = await openKv();
    type Txn = (req: unknown) => Promise<unknown>;
    const inside = kv as unknown as { txn: Txn };
    const txn = inside.txn.bind(kv);
    const key = '/lost-reply-delete/subnets/10.30.8.0-24';
    const created = await kv.create(key, '{"PublicIP":"192.0.2.8"}', 60, signal);
    if (!created) throw new Error('test setup: the key exists');
    // the delete commits, its reply is lost, and the call is tried again: the compare fails
    inside.txn = async (req) => {
      await txn(req);
      return txn(req);
    };
    expect(await kv.deleteIf(key, created.entry.modRevision, signal)).toBe(true);
    expect(await admin.get(key).string()).toBeNull();
  });

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

describe('etcd lease store, dual-stack (one key for both families, as flannel writes it)', () => {
  const DUAL_NETCONF =
    '{"Network":"10.31.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:31::/56","Backend":{"Type":"vxlan"}}';
  const dual = parseNetConfig(DUAL_NETCONF);
  const v4only = parseNetConfig('{"Network":"10.31.0.0/16","Backend":{"Type":"vxlan"}}');
  const KEY = /^10\.31\.(\d+)\.0-24&fd00:31:0:([0-9a-f]+)::-64$/;
  function dualAttrs(n: number): LeaseAttrs {
    const hex = n.toString(16).padStart(2, '0');
    return {
      ...vxlanAttrs(n),
      publicIpv6: `fd00:192::${n.toString(16)}`,
      backendData6: { vni: 1, vtepMac: `02:00:00:00:06:${hex}` },
    };
  }
  const cidr6 = (text: string): Cidr6 => {
    const c = parseCidr6(text, { strict: true });
    if (!c) throw new Error(`test setup: ${text}`);
    return c;
  };
  const keysUnder = async (prefix: string): Promise<string[]> =>
    (await admin.getAll().prefix(`${prefix}/subnets/`).keys())
      .map((k) => k.slice(`${prefix}/subnets/`.length))
      .sort();

  it('acquires one key naming both subnets, with PublicIPv6 and BackendV6Data in the value; renew keeps both; reclaim takes the same key back', async () => {
    const prefix = '/dual-acquire';
    await admin.put(`${prefix}/config`).value(DUAL_NETCONF);
    const store = await openStore({ prefix, ttlSeconds: 60 });
    expect((await store.getNetworkConfig(signal)).ipv6).not.toBeNull();
    const attrs = dualAttrs(1);
    const lease = await store.acquireLease({ config: dual, attrs, previous: undefined }, signal);
    expect(lease.key).toMatch(KEY);
    expect(lease.subnet && lease.subnet6 && subnetKey(lease.subnet, lease.subnet6)).toBe(lease.key);
    expect(await keysUnder(prefix)).toEqual([lease.key]);
    expect(await admin.get(`${prefix}/subnets/${lease.key}`).string()).toBe(
      encodeLeaseValue(attrs),
    );
    // the exact flannel bytes: PublicIPv6 and BackendV6Data beside the IPv4 fields
    expect(await admin.get(`${prefix}/subnets/${lease.key}`).string()).toBe(
      '{"PublicIP":"192.0.2.1","PublicIPv6":"fd00:192::1","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:01:01"},"BackendV6Data":{"VNI":1,"VtepMAC":"02:00:00:00:06:01"}}',
    );

    const renewed = await store.renewLease(lease, signal);
    expect(renewed.key).toBe(lease.key);
    expect(renewed.subnet6).toStrictEqual(lease.subnet6);
    expect(BigInt(renewed.version)).toBeGreaterThan(BigInt(lease.version));
    expect(await keysUnder(prefix)).toEqual([lease.key]);

    // acquiring again with our PublicIP reuses the dual lease
    const again = await store.acquireLease({ config: dual, attrs, previous: undefined }, signal);
    expect(again.key).toBe(lease.key);

    await admin.delete().key(`${prefix}/subnets/${lease.key}`);
    const reclaimed = await store.reclaimLease(renewed, signal);
    expect(reclaimed.key).toBe(lease.key);
    expect(reclaimed.subnet6).toStrictEqual(lease.subnet6);
    expect(await admin.get(`${prefix}/subnets/${lease.key}`).string()).toBe(
      encodeLeaseValue(attrs),
    );
  });

  it('replaces our IPv4-only lease by a dual one once IPv6 is enabled, keeping the IPv4 subnet', async () => {
    const prefix = '/dual-upgrade';
    const store = await openStore({ prefix });
    const old = await store.acquireLease(
      { config: v4only, attrs: vxlanAttrs(2), previous: undefined },
      signal,
    );
    expect(old.key).toMatch(/^10\.31\.\d+\.0-24$/);
    const lease = await store.acquireLease(
      { config: dual, attrs: dualAttrs(2), previous: undefined },
      signal,
    );
    expect(lease.key.startsWith(`${old.key}&fd00:31:0:`)).toBe(true);
    expect(await keysUnder(prefix)).toEqual([lease.key]);
    // and back: IPv6 disabled again gives an IPv4-only key with the same IPv4 subnet
    const back = await store.acquireLease(
      { config: v4only, attrs: vxlanAttrs(2), previous: undefined },
      signal,
    );
    expect(back.key).toBe(old.key);
    expect(back.subnet6).toBeUndefined();
    expect(await keysUnder(prefix)).toEqual([old.key]);
  });

  it("takes subnet.env's previous pair when it is free, and a free IPv6 subnet when only IPv4 is known", async () => {
    const prefix = '/dual-previous';
    const store = await openStore({ prefix });
    const previous = parseLeaseKey('10.31.77.0-24&fd00:31:0:4d::-64');
    const lease = await store.acquireLease(
      {
        config: dual,
        attrs: dualAttrs(3),
        previous: previous.subnet,
        previous6: previous.subnet6 ?? undefined,
      },
      signal,
    );
    expect(lease.key).toBe('10.31.77.0-24&fd00:31:0:4d::-64');
    // another node's previous IPv6 subnet is taken: it keeps its IPv4 one and gets a free /64
    const other = await store.acquireLease(
      {
        config: dual,
        attrs: dualAttrs(4),
        previous: parseLeaseKey('10.31.78.0-24').subnet,
        previous6: cidr6('fd00:31:0:4d::/64'),
      },
      signal,
    );
    expect(other.key).toMatch(KEY);
    expect(other.key.startsWith('10.31.78.0-24&')).toBe(true);
    expect(other.key).not.toContain('fd00:31:0:4d::');
  });

  it('yields its previous pair to a key claiming its IPv4 subnet created between its listing and its create', async () => {
    const prefix = '/dual-race';
    const kv = await openKv();
    const store = new KvLeaseStore({ kv, prefix });
    // another node's key, created after our listing: it names our previous IPv4 subnet with
    // another IPv6 subnet, so our create-if-absent of the previous pair succeeds all the same
    const rival = '10.31.90.0-24&fd00:31:0:99::-64';
    const create = kv.create.bind(kv);
    const created: string[] = [];
    kv.create = async (key, value, ttl, s) => {
      if (created.length === 0) await admin.put(`${prefix}/subnets/${rival}`).value('{}');
      created.push(key.slice(`${prefix}/subnets/`.length));
      return create(key, value, ttl, s);
    };
    const previous = parseLeaseKey('10.31.90.0-24&fd00:31:0:5a::-64');
    const lease = await store.acquireLease(
      {
        config: dual,
        attrs: dualAttrs(3),
        previous: previous.subnet,
        previous6: previous.subnet6 ?? undefined,
      },
      signal,
    );
    expect(created[0]).toBe('10.31.90.0-24&fd00:31:0:5a::-64');
    expect(created).toHaveLength(2);
    expect(lease.key).toBe(created[1]);
    expect(lease.key).toMatch(KEY);
    expect(lease.key.startsWith('10.31.90.0-24&')).toBe(false);
    // our first key is gone again; the rival's stays
    expect(await keysUnder(prefix)).toEqual([lease.key, rival].sort());
  });

  it('gives 20 concurrent dual-stack acquisitions distinct subnets in both families', async () => {
    const prefix = '/dual-twenty';
    const stores = await Promise.all(Array.from({ length: 20 }, () => openStore({ prefix })));
    const leases = await Promise.all(
      stores.map((s, i) =>
        s.acquireLease({ config: dual, attrs: dualAttrs(i + 10), previous: undefined }, signal),
      ),
    );
    const v4 = new Set(leases.map((l) => KEY.exec(l.key)?.[1]));
    const v6 = new Set(leases.map((l) => KEY.exec(l.key)?.[2]));
    expect(v4.size).toBe(20);
    expect(v6.size).toBe(20);
    expect(await keysUnder(prefix)).toEqual(leases.map((l) => l.key).sort());
  });

  it('lists a dual-stack lease written by hand in flannel format, and the tracker admits it', async () => {
    const prefix = '/dual-flannel';
    const store = await openStore({ prefix });
    const fixtures = (
      JSON.parse(
        readFileSync(new URL('../fixtures/flannel-leases.json', import.meta.url), 'utf8'),
      ) as { leases: { key: string; value: string; subnet6: string | null }[] }
    ).leases.filter((f) => f.subnet6 !== null && f.key.startsWith('10.244.'));
    for (const f of fixtures) await admin.put(`${prefix}/subnets/${f.key}`).value(f.value);
    const w = collect(store);
    await waitFor(() => w.snapshots().length === 1, { timeoutMs: 5000, what: 'snapshot' });
    const snap = w.snapshots()[0];
    const records = snap?.type === 'snapshot' ? snap.records : [];
    expect(records.map((r) => r.key).sort()).toEqual(fixtures.map((f) => f.key).sort());
    const vx = records.find((r) => r.key === '10.244.5.0-24&fd00:10:244:5::-64');
    expect(vx?.ok && vx.lease).toMatchObject({
      subnet6: cidr6('fd00:10:244:5::/64'),
      attrs: {
        publicIp: '192.168.56.13',
        publicIpv6: 'fd00:56::13',
        backendType: 'vxlan',
        backendData: { vni: 1, vtepMac: '7e:1b:4f:9a:2c:03' },
        backendData6: { vni: 1, vtepMac: '9a:41:e0:11:6b:03' },
      },
    });

    const netconf = parseNetConfig(
      '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}',
    );
    const self = parseLeaseKey('10.244.3.0-24&fd00:10:244:3::-64');
    const tracker = new PeerTracker({
      context: { config: netconf, self: self.subnet, self6: self.subnet6 },
      selfKey: subnetKey(self.subnet, self.subnet6),
      selfAttrs: () => dualAttrs(3),
      logger: captureLog().logger,
      onSelfLost: () => undefined,
    });
    if (snap) tracker.handle(snap);
    // the vxlan peer is admitted with both families; the host-gw one is refused for its backend
    expect(tracker.list().map((l) => [l.key, l.subnet6 && formatCidr6(l.subnet6)])).toEqual([
      ['10.244.5.0-24&fd00:10:244:5::-64', 'fd00:10:244:5::/64'],
    ]);
    expect(tracker.skipped().get('10.244.6.0-24&fd00:10:244:6::-64')?.reason).toBe('backend-type');
    // a watch event for a new hand-written dual lease reaches the tracker the same way
    await admin
      .put(`${prefix}/subnets/10.244.7.0-24&fd00:10:244:7::-64`)
      .value(
        '{"PublicIP":"192.168.56.15","PublicIPv6":"fd00:56::15","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"7e:1b:4f:9a:2c:05"},"BackendV6Data":{"VNI":1,"VtepMAC":"9a:41:e0:11:6b:05"}}',
      );
    await waitFor(() => w.events.some((e) => e.type === 'put'), { timeoutMs: 5000, what: 'put' });
    for (const e of w.events) if (e.type === 'put') tracker.handle(e);
    expect(
      tracker
        .list()
        .map((l) => l.key)
        .sort(),
    ).toEqual(['10.244.5.0-24&fd00:10:244:5::-64', '10.244.7.0-24&fd00:10:244:7::-64']);
    await w.stop();
  });

  it('reclaims the same dual-stack key after etcd comes back wiped', async () => {
    const prefix = '/dual-wiped';
    await admin.put(`${prefix}/config`).value(DUAL_NETCONF);
    const store = await openStore({ prefix });
    const lease = await store.acquireLease(
      { config: dual, attrs: dualAttrs(5), previous: undefined },
      signal,
    );
    await etcd.stop({ wipe: true });
    await etcd.start();
    await admin.put(`${prefix}/config`).value(DUAL_NETCONF);
    const reclaimed = await store.reclaimLease(lease, signal);
    expect(reclaimed.key).toBe(lease.key);
    expect(await keysUnder(prefix)).toEqual([lease.key]);
    expect(await admin.get(`${prefix}/subnets/${lease.key}`).string()).toBe(
      encodeLeaseValue(dualAttrs(5)),
    );
  });
});
