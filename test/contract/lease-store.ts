// The LeaseStore contract: every store implementation (etcd, in-memory,
// Kubernetes) must pass these tests. A harness makes a fresh network and
// plays the other parties in store-neutral terms: write the config, prepare
// node n so it can hold a lease (Kubernetes: its Node with a podCIDR), read
// a lease as flannel's JSON, add or remove a peer by hand, take a subnet
// away. Stores that allocate subnets themselves (etcd-shaped) also pass the
// allocation part, which needs raw access to the keys.
import { describe, expect, it } from 'vitest';
import { parseNetConfig, type NetConfig } from '../../src/config/netconf.ts';
import { encodeLeaseValue } from '../../src/lease/codec.ts';
import { listLeases } from '../../src/lease/snapshot.ts';
import type { Lease, LeaseAttrs, LeaseEvent, LeaseStore } from '../../src/lease/types.ts';
import { containsCidr, formatCidr, parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { waitFor } from '../../lab/kit/wait.ts';

export interface TestNetwork {
  /** what a CONFIG_MISSING error must name (an etcd key, a file path) */
  readonly configLocation: string;
  /** writes net-conf.json, or removes it (undefined) */
  setConfig(text: string | undefined): Promise<void>;
  /** a store client for node n, which the harness has made ready to hold a lease */
  open(n: number, o?: { ttlSeconds?: number }): Promise<LeaseStore>;
  /** lease `key` as flannel's lease JSON, as peers read it; undefined when there is none */
  read(key: string): Promise<string | undefined>;
  /** another party strips lease `key`'s record (its node stays) */
  drop(key: string): Promise<void>;
  /** another node n now holds lease `key`'s subnet, or the subnet is no longer ours */
  giveAway(key: string, n: number): Promise<void>;
  /** a peer n written by hand with `value` (lease JSON, or garbage); returns its key */
  writePeer(n: number, value: string): Promise<string>;
  deletePeer(key: string): Promise<void>;
}

/** Raw keys, for stores that allocate subnets (etcd-shaped): prefix, put, delete, get. */
export interface RawKeys {
  readonly prefix: string;
  put(key: string, value: string): Promise<void>;
  del(key: string): Promise<void>;
  get(key: string): Promise<string | undefined>;
}

export interface StoreHarness {
  network(netconf: string): Promise<TestNetwork>;
  /** present when the store allocates subnets (and its leases expire): runs the allocation part */
  readonly allocating?: (netconf: string) => Promise<{ net: TestNetwork; raw: RawKeys }>;
}

const NETCONF = '{"Network":"10.10.0.0/16","Backend":{"Type":"vxlan","VNI":1}}';
/** The contract's configs are IPv4 (or dual-stack): their IPv4 half. */
const ipv4Of = (config: NetConfig): NonNullable<NetConfig['ipv4']> => {
  if (!config.ipv4) throw new Error('test setup: the contract config has no IPv4');
  return config.ipv4;
};
/** A lease's IPv4 subnet, which every lease of an IPv4 config has. */
const subnetOf = (lease: Lease): Cidr => {
  if (!lease.subnet) throw new Error(`lease ${lease.key} has no IPv4 subnet`);
  return lease.subnet;
};
const signal = new AbortController().signal;
let seq = 0;

export function vxlanAttrs(n: number): LeaseAttrs {
  const hex = (n & 0xff).toString(16).padStart(2, '0');
  return {
    publicIp: `192.0.2.${n}`,
    publicIpv6: null,
    backendType: 'vxlan',
    backendData: { vni: 1, vtepMac: `02:00:00:00:01:${hex}` },
  };
}

const hostGw = (n: number): LeaseAttrs => ({
  publicIp: `192.0.2.${n}`,
  publicIpv6: null,
  backendType: 'host-gw',
  backendData: null,
});

/** A harness over etcd-shaped raw keys, in flannel's layout: one per Kv-based store. */
export function kvHarness(o: {
  put: RawKeys['put'];
  del: RawKeys['del'];
  get: RawKeys['get'];
  newStore: (x: { prefix: string; ttlSeconds?: number }) => Promise<LeaseStore>;
}): StoreHarness {
  const make = async (netconf: string): Promise<{ net: TestNetwork; raw: RawKeys }> => {
    const prefix = `/twill-test/${process.pid}-${++seq}`;
    const raw: RawKeys = { prefix, put: o.put, del: o.del, get: o.get };
    const key = (k: string): string => `${prefix}/subnets/${k}`;
    await o.put(`${prefix}/config`, netconf);
    const net: TestNetwork = {
      configLocation: `${prefix}/config`,
      setConfig: async (text) =>
        text === undefined ? o.del(`${prefix}/config`) : o.put(`${prefix}/config`, text),
      open: (_n, x) =>
        o.newStore({ prefix, ...(x?.ttlSeconds ? { ttlSeconds: x.ttlSeconds } : {}) }),
      read: (k) => o.get(key(k)),
      drop: (k) => o.del(key(k)),
      giveAway: async (k, n) => (
        await o.del(key(k)),
        await o.put(key(k), encodeLeaseValue(vxlanAttrs(n)))
      ),
      writePeer: async (n, value) => (
        await o.put(key(`10.10.${n}.0-24`), value),
        `10.10.${n}.0-24`
      ),
      deletePeer: (k) => o.del(key(k)),
    };
    return { net, raw };
  };
  return { network: async (netconf) => (await make(netconf)).net, allocating: make };
}

export function leaseStoreContract(name: string, harness: () => StoreHarness): void {
  const setup = async (netconf = NETCONF): Promise<{ net: TestNetwork; config: NetConfig }> => ({
    net: await harness().network(netconf),
    config: parseNetConfig(netconf),
  });

  describe(`LeaseStore contract: ${name}`, () => {
    it('reads the network config, and names where it lives when it is missing or bad', async () => {
      const { net } = await setup();
      const store = await net.open(1);
      expect(formatCidr(ipv4Of(await store.getNetworkConfig(signal)).network)).toBe('10.10.0.0/16');
      await net.setConfig(undefined);
      await expect(store.getNetworkConfig(signal)).rejects.toMatchObject({
        code: 'CONFIG_MISSING',
        message: expect.stringContaining(net.configLocation),
      });
      await net.setConfig('{"Network":"10.10.0.0/30"}');
      await expect(store.getNetworkConfig(signal)).rejects.toMatchObject({
        code: 'CONFIG_INVALID',
        message: expect.stringMatching(/Network.*10\.10\.0\.0\/30/),
      });
      await store.close();
    });

    it("publishes our lease in flannel's format, a /SubnetLen inside Network", async () => {
      const { net, config } = await setup();
      const store = await net.open(1);
      const lease = await store.acquireLease(
        { config, attrs: vxlanAttrs(1), previous: undefined },
        signal,
      );
      expect(subnetOf(lease).prefix).toBe(24);
      expect(containsCidr(ipv4Of(config).network, subnetOf(lease))).toBe(true);
      expect(await net.read(lease.key)).toBe(
        '{"PublicIP":"192.0.2.1","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:01:01"}}',
      );
      expect(lease.expiresAt).toBeGreaterThan(Date.now() + 23 * 3600_000);
      await store.close();
    });

    it('gives a restarted node its existing lease, with updated attributes', async () => {
      const { net, config } = await setup();
      const first = await (
        await net.open(2)
      ).acquireLease({ config, attrs: hostGw(2), previous: undefined }, signal);
      const again = await (
        await net.open(2)
      ).acquireLease({ config, attrs: vxlanAttrs(2), previous: undefined }, signal);
      expect({ key: again.key, subnet: formatCidr(subnetOf(again)) }).toEqual({
        key: first.key,
        subnet: formatCidr(subnetOf(first)),
      });
      expect(await net.read(again.key)).toBe(encodeLeaseValue(vxlanAttrs(2)));
    });

    it('renews; a stripped record is never kept silently; reclaims it; refuses a subnet that is no longer ours', async () => {
      const { net, config } = await setup();
      const store = await net.open(5);
      const lease = await store.acquireLease(
        { config, attrs: vxlanAttrs(5), previous: undefined },
        signal,
      );
      const renewed = await store.renewLease(lease, signal);
      expect(renewed.key).toBe(lease.key);
      await net.drop(lease.key);
      // a store either reports the loss or puts the record back; either way the record returns
      const afterDrop = await store
        .renewLease(renewed, signal)
        .catch((err: { code?: string }) => err.code);
      expect(
        afterDrop === 'LEASE_LOST' ||
          (typeof afterDrop === 'object' && afterDrop.key === lease.key),
      ).toBe(true);
      const back = await store.reclaimLease(renewed, signal);
      expect(back.key).toBe(lease.key);
      expect(await net.read(lease.key)).toBe(encodeLeaseValue(vxlanAttrs(5)));
      await net.giveAway(lease.key, 6);
      await expect(store.reclaimLease(back, signal)).rejects.toMatchObject({ code: 'LEASE_TAKEN' });
    });

    it('lists then streams puts and deletes, with malformed records reported as such', async () => {
      const { net, config } = await setup();
      const store = await net.open(8);
      const seven = await net.writePeer(7, encodeLeaseValue(vxlanAttrs(7)));
      const events: LeaseEvent[] = [];
      const ctl = new AbortController();
      const watching = store.watchLeases({ signal: ctl.signal, onEvent: (e) => events.push(e) });
      await waitFor(() => events.some((e) => e.type === 'snapshot'), {
        timeoutMs: 5000,
        what: 'snapshot',
      });
      const snap = events.find((e) => e.type === 'snapshot');
      expect(snap?.type === 'snapshot' && snap.records.map((r) => r.key)).toEqual([seven]);
      // a fixed subnet where the store allocates, so the peers written by hand never land on ours
      const mine = await store.acquireLease(
        { config, attrs: vxlanAttrs(8), previous: parseCidr('10.10.8.0/24', { strict: true }) },
        signal,
      );
      const six = await net.writePeer(6, 'not json');
      await net.deletePeer(seven);
      await waitFor(() => events.some((e) => e.type === 'delete'), {
        timeoutMs: 5000,
        what: 'delete event',
      });
      const puts = events.flatMap((e) => (e.type === 'put' ? [e.record] : []));
      expect(puts.map((r) => [r.key, r.ok])).toEqual([
        [mine.key, true],
        [six, false],
      ]);
      expect(puts[1]?.ok === false && puts[1].reason).toMatch(/not JSON/);
      expect(events.flatMap((e) => (e.type === 'delete' ? [e.key] : []))).toEqual([seven]);
      ctl.abort();
      await watching;
    });
  });

  // only stores that allocate have this part: it is left out, not skipped, for the others
  if (harness().allocating) allocationContract(name, harness);
}

/** The part for stores that allocate subnets themselves and whose leases expire. */
function allocationContract(name: string, harness: () => StoreHarness): void {
  const make = async (
    netconf = NETCONF,
  ): Promise<{ net: TestNetwork; raw: RawKeys; config: NetConfig }> => {
    const allocating = harness().allocating;
    if (!allocating) throw new Error(`${name}: no allocation harness`);
    return { ...(await allocating(netconf)), config: parseNetConfig(netconf) };
  };

  describe(`LeaseStore contract, allocation: ${name}`, () => {
    it("names a new lease's key after its subnet, inside [SubnetMin, SubnetMax], and tells when it expires", async () => {
      const { net, config } = await make();
      const store = await net.open(1);
      const lease = await store.acquireLease(
        { config, attrs: vxlanAttrs(1), previous: undefined },
        signal,
      );
      expect(subnetOf(lease).base).toBeGreaterThanOrEqual(ipv4Of(config).subnetMin);
      expect(subnetOf(lease).base).toBeLessThanOrEqual(ipv4Of(config).subnetMax);
      expect(lease.key).toBe(formatCidr(subnetOf(lease)).replace('/', '-'));
      // the store tells when a lease runs out (twill status shows it)
      const expiry = await store.leaseExpiry?.(lease.key, signal);
      expect(Math.abs((expiry ?? 0) - lease.expiresAt)).toBeLessThan(3_000);
      // a key nobody holds: never the one just leased at random
      const unheld = lease.key === '10.10.254.0-24' ? '10.10.253.0-24' : '10.10.254.0-24';
      expect(await store.leaseExpiry?.(unheld, signal)).toBeUndefined();
      await store.close();
    });

    it('prefers the subnet from subnet.env when nobody holds it, never when someone does', async () => {
      const { net, config } = await make();
      const store = await net.open(3);
      const wanted = parseCidr('10.10.77.0/24', { strict: true });
      const a = await store.acquireLease(
        { config, attrs: vxlanAttrs(3), previous: wanted },
        signal,
      );
      expect(formatCidr(subnetOf(a))).toBe('10.10.77.0/24');
      const b = await store.acquireLease(
        { config, attrs: vxlanAttrs(4), previous: wanted },
        signal,
      );
      expect(formatCidr(subnetOf(b))).not.toBe('10.10.77.0/24');
    });

    it('gives concurrent nodes distinct subnets', async () => {
      const { net, config } = await make();
      const stores = await Promise.all(Array.from({ length: 20 }, (_, i) => net.open(10 + i)));
      const leases = await Promise.all(
        stores.map((s, i) =>
          s.acquireLease({ config, attrs: vxlanAttrs(10 + i), previous: undefined }, signal),
        ),
      );
      expect(new Set(leases.map((l) => l.key)).size).toBe(20);
      await Promise.all(stores.map((s) => s.close()));
    });

    it('fails with "out of subnets" when the range is full', async () => {
      const { net, config } = await make(
        '{"Network":"10.20.0.0/28","SubnetLen":30,"Backend":{"Type":"host-gw"}}',
      );
      const store = await net.open(1);
      const got = [];
      for (let n = 1; n <= 3; n++)
        got.push(
          formatCidr(
            subnetOf(
              await store.acquireLease({ config, attrs: hostGw(n), previous: undefined }, signal),
            ),
          ),
        );
      expect(got.sort()).toEqual(['10.20.0.12/30', '10.20.0.4/30', '10.20.0.8/30']);
      await expect(
        store.acquireLease({ config, attrs: hostGw(9), previous: undefined }, signal),
      ).rejects.toMatchObject({
        code: 'SUBNETS_EXHAUSTED',
        message: expect.stringContaining('out of subnets'),
      });
    });

    it('does not let a hostile key block allocation', async () => {
      const { net, raw, config } = await make(
        '{"Network":"10.20.0.0/28","SubnetLen":30,"Backend":{"Type":"host-gw"}}',
      );
      await raw.put(`${raw.prefix}/subnets/0.0.0.0-0`, 'anything');
      await raw.put(`${raw.prefix}/subnets/10.20.0.0-28`, 'anything');
      const lease = await (
        await net.open(1)
      ).acquireLease({ config, attrs: hostGw(1), previous: undefined }, signal);
      expect(['10.20.0.4/30', '10.20.0.8/30', '10.20.0.12/30']).toContain(
        formatCidr(subnetOf(lease)),
      );
    });

    it('reports a deleted lease as lost, and names the holder of a taken one', async () => {
      const { net, raw, config } = await make();
      const store = await net.open(5);
      const lease = await store.acquireLease(
        { config, attrs: vxlanAttrs(5), previous: undefined },
        signal,
      );
      await raw.del(`${raw.prefix}/subnets/${lease.key}`);
      await expect(store.renewLease(lease, signal)).rejects.toMatchObject({ code: 'LEASE_LOST' });
      const back = await store.reclaimLease(lease, signal);
      await net.giveAway(lease.key, 6);
      await expect(store.reclaimLease(back, signal)).rejects.toMatchObject({
        code: 'LEASE_TAKEN',
        message: expect.stringContaining('192.0.2.6'),
      });
    });

    it('refuses an IPv6-only config (CONFIG_UNSUPPORTED, naming the Kubernetes store) and writes no lease', async () => {
      // flannel's etcd subnet manager always leases an IPv4 subnet: IPv6-only is Kubernetes only
      const { net, config } = await make(
        '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10::/56","Backend":{"Type":"vxlan","VNI":1}}',
      );
      const store = await net.open(1);
      const refusal = {
        code: 'CONFIG_UNSUPPORTED',
        message: expect.stringMatching(/IPv6-only .*needs the Kubernetes store.*--kube-subnet-mgr/),
      };
      await expect(store.getNetworkConfig(signal)).rejects.toMatchObject({
        ...refusal,
        message: expect.stringContaining(`${net.configLocation}: IPv6-only`),
      });
      const attrs: LeaseAttrs = {
        publicIp: null,
        publicIpv6: 'fd00:192::1',
        backendType: 'vxlan',
        backendData: null,
        backendData6: { vni: 1, vtepMac: '02:00:00:00:06:01' },
      };
      await expect(
        store.acquireLease({ config, attrs, previous: undefined }, signal),
      ).rejects.toMatchObject(refusal);
      expect(await listLeases(store, signal)).toEqual([]);
      await store.close();
    });

    it('drops a lease whose TTL runs out, and it can be reclaimed in place', async () => {
      const { net, config } = await make();
      const store = await net.open(9, { ttlSeconds: 2 });
      const lease = await store.acquireLease(
        { config, attrs: vxlanAttrs(9), previous: undefined },
        signal,
      );
      expect(lease.expiresAt).toBeLessThanOrEqual(Date.now() + 2000);
      const deleted: string[] = [];
      const ctl = new AbortController();
      const watching = store.watchLeases({
        signal: ctl.signal,
        onEvent: (e) => e.type === 'delete' && deleted.push(e.key),
      });
      await waitFor(() => deleted.includes(lease.key), { timeoutMs: 10_000, what: 'expiry' });
      expect((await store.reclaimLease(lease, signal)).key).toBe(lease.key);
      ctl.abort();
      await watching;
    });
  });
}
