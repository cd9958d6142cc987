// The LeaseStore contract: every store implementation (etcd, in-memory, and
// later Kubernetes) must pass these tests. A harness supplies fresh store
// clients on one shared backing store and raw access to it.
import { describe, expect, it } from 'vitest';
import { parseNetConfig, type NetConfig } from '../../src/config/netconf.ts';
import { encodeLeaseValue } from '../../src/lease/codec.ts';
import type { LeaseAttrs, LeaseEvent, LeaseStore } from '../../src/lease/types.ts';
import { formatCidr, parseCidr } from '../../src/net/ipv4.ts';
import { waitFor } from '../helpers/ports.ts';

export interface StoreHarness {
  newStore(opts: { prefix: string; ttlSeconds?: number }): Promise<LeaseStore>;
  putRaw(key: string, value: string): Promise<void>;
  deleteRaw(key: string): Promise<void>;
  getRaw(key: string): Promise<string | undefined>;
}

const NETCONF = '{"Network":"10.10.0.0/16","Backend":{"Type":"vxlan","VNI":1}}';
const signal = new AbortController().signal;
let seq = 0;

export function vxlanAttrs(n: number): LeaseAttrs {
  const hex = (n & 0xff).toString(16).padStart(2, '0');
  return { publicIp: `192.0.2.${n}`, publicIpv6: null, backendType: 'vxlan', backendData: { vni: 1, vtepMac: `02:00:00:00:01:${hex}` } };
}

export function leaseStoreContract(name: string, harness: () => StoreHarness): void {
  const setup = async (netconf = NETCONF): Promise<{ prefix: string; config: NetConfig; open: (ttl?: number) => Promise<LeaseStore> }> => {
    const prefix = `/twill-test/${process.pid}-${++seq}`;
    await harness().putRaw(`${prefix}/config`, netconf);
    return { prefix, config: parseNetConfig(netconf), open: (ttlSeconds) => harness().newStore({ prefix, ...(ttlSeconds ? { ttlSeconds } : {}) }) };
  };

  describe(`LeaseStore contract: ${name}`, () => {
    it('reads the network config, and names the key when it is missing or bad', async () => {
      const { prefix, open } = await setup();
      const store = await open();
      expect(formatCidr((await store.getNetworkConfig(signal)).network)).toBe('10.10.0.0/16');
      await harness().deleteRaw(`${prefix}/config`);
      await expect(store.getNetworkConfig(signal)).rejects.toMatchObject({ code: 'CONFIG_MISSING', message: expect.stringContaining(`${prefix}/config`) });
      await harness().putRaw(`${prefix}/config`, '{"Network":"10.10.0.0/30"}');
      await expect(store.getNetworkConfig(signal)).rejects.toMatchObject({ code: 'CONFIG_INVALID', message: expect.stringMatching(/Network.*10\.10\.0\.0\/30/) });
      await store.close();
    });

    it('writes a new lease with flannel\'s key and JSON, inside [SubnetMin, SubnetMax]', async () => {
      const { prefix, config, open } = await setup();
      const store = await open();
      const lease = await store.acquireLease({ config, attrs: vxlanAttrs(1), previous: undefined }, signal);
      expect(lease.subnet.prefix).toBe(24);
      expect(lease.subnet.base).toBeGreaterThanOrEqual(config.subnetMin);
      expect(lease.subnet.base).toBeLessThanOrEqual(config.subnetMax);
      expect(lease.key).toBe(formatCidr(lease.subnet).replace('/', '-'));
      expect(await harness().getRaw(`${prefix}/subnets/${lease.key}`)).toBe(
        '{"PublicIP":"192.0.2.1","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:01:01"}}',
      );
      expect(lease.expiresAt).toBeGreaterThan(Date.now() + 23 * 3600_000);
      // the store tells when a lease runs out (twill status shows it)
      const expiry = await store.leaseExpiry?.(lease.key, signal);
      expect(Math.abs((expiry ?? 0) - lease.expiresAt)).toBeLessThan(3_000);
      expect(await store.leaseExpiry?.('10.10.254.0-24', signal)).toBeUndefined();
      await store.close();
    });

    it('gives a restarted node its existing lease, with updated attributes', async () => {
      const { prefix, config, open } = await setup();
      const first = await (await open()).acquireLease({ config, attrs: vxlanAttrs(2), previous: undefined }, signal);
      const attrs = { ...vxlanAttrs(2), backendData: { vni: 1, vtepMac: '02:00:00:00:09:09' } };
      const again = await (await open()).acquireLease({ config, attrs, previous: undefined }, signal);
      expect(again.key).toBe(first.key);
      expect(again.version).not.toBe(first.version);
      expect(await harness().getRaw(`${prefix}/subnets/${again.key}`)).toBe(encodeLeaseValue(attrs));
    });

    it('prefers the subnet from subnet.env when nobody holds it, never when someone does', async () => {
      const { config, open } = await setup();
      const store = await open();
      const wanted = parseCidr('10.10.77.0/24', { strict: true });
      const a = await store.acquireLease({ config, attrs: vxlanAttrs(3), previous: wanted }, signal);
      expect(formatCidr(a.subnet)).toBe('10.10.77.0/24');
      const b = await store.acquireLease({ config, attrs: vxlanAttrs(4), previous: wanted }, signal);
      expect(formatCidr(b.subnet)).not.toBe('10.10.77.0/24');
    });

    it('gives concurrent nodes distinct subnets', async () => {
      const { config, open } = await setup();
      const stores = await Promise.all(Array.from({ length: 20 }, () => open()));
      const leases = await Promise.all(stores.map((s, i) => s.acquireLease({ config, attrs: vxlanAttrs(10 + i), previous: undefined }, signal)));
      expect(new Set(leases.map((l) => l.key)).size).toBe(20);
      await Promise.all(stores.map((s) => s.close()));
    });

    it('fails with "out of subnets" when the range is full', async () => {
      const { config, open } = await setup('{"Network":"10.20.0.0/28","SubnetLen":30,"Backend":{"Type":"host-gw"}}');
      const store = await open();
      const hostGw = (n: number): LeaseAttrs => ({ publicIp: `192.0.2.${n}`, publicIpv6: null, backendType: 'host-gw', backendData: null });
      const got = [];
      for (let n = 1; n <= 3; n++) got.push(formatCidr((await store.acquireLease({ config, attrs: hostGw(n), previous: undefined }, signal)).subnet));
      expect(got.sort()).toEqual(['10.20.0.12/30', '10.20.0.4/30', '10.20.0.8/30']);
      await expect(store.acquireLease({ config, attrs: hostGw(9), previous: undefined }, signal)).rejects.toMatchObject({
        code: 'SUBNETS_EXHAUSTED',
        message: expect.stringContaining('out of subnets'),
      });
    });

    it('does not let a hostile key block allocation', async () => {
      const { prefix, config, open } = await setup('{"Network":"10.20.0.0/28","SubnetLen":30,"Backend":{"Type":"host-gw"}}');
      await harness().putRaw(`${prefix}/subnets/0.0.0.0-0`, 'anything');
      await harness().putRaw(`${prefix}/subnets/10.20.0.0-28`, 'anything');
      const attrs: LeaseAttrs = { publicIp: '192.0.2.1', publicIpv6: null, backendType: 'host-gw', backendData: null };
      const lease = await (await open()).acquireLease({ config, attrs, previous: undefined }, signal);
      expect(['10.20.0.4/30', '10.20.0.8/30', '10.20.0.12/30']).toContain(formatCidr(lease.subnet));
    });

    it('renews, reports a deleted lease as lost, reclaims it, and refuses to take another node\'s', async () => {
      const { prefix, config, open } = await setup();
      const store = await open();
      const lease = await store.acquireLease({ config, attrs: vxlanAttrs(5), previous: undefined }, signal);
      const renewed = await store.renewLease(lease, signal);
      expect(renewed.version).not.toBe(lease.version);
      const key = `${prefix}/subnets/${lease.key}`;
      await harness().deleteRaw(key);
      await expect(store.renewLease(renewed, signal)).rejects.toMatchObject({ code: 'LEASE_LOST' });
      const back = await store.reclaimLease(renewed, signal);
      expect(back.key).toBe(lease.key);
      expect(await harness().getRaw(key)).toBe(encodeLeaseValue(vxlanAttrs(5)));
      await harness().deleteRaw(key);
      await harness().putRaw(key, encodeLeaseValue(vxlanAttrs(6)));
      await expect(store.reclaimLease(back, signal)).rejects.toMatchObject({ code: 'LEASE_TAKEN', message: expect.stringContaining('192.0.2.6') });
    });

    it('lists then streams puts and deletes, with malformed records reported as such', async () => {
      const { prefix, config, open } = await setup();
      const store = await open();
      await harness().putRaw(`${prefix}/subnets/10.10.5.0-24`, encodeLeaseValue(vxlanAttrs(7)));
      const events: LeaseEvent[] = [];
      const ctl = new AbortController();
      const watching = store.watchLeases({ signal: ctl.signal, onEvent: (e) => events.push(e) });
      await waitFor(() => events.some((e) => e.type === 'snapshot'), { timeoutMs: 5000, what: 'snapshot' });
      const snap = events.find((e) => e.type === 'snapshot');
      expect(snap?.type === 'snapshot' && snap.records.map((r) => r.key)).toEqual(['10.10.5.0-24']);
      const mine = await store.acquireLease({ config, attrs: vxlanAttrs(8), previous: undefined }, signal);
      await harness().putRaw(`${prefix}/subnets/10.10.6.0-24`, 'not json');
      await harness().deleteRaw(`${prefix}/subnets/10.10.5.0-24`);
      await waitFor(() => events.some((e) => e.type === 'delete'), { timeoutMs: 5000, what: 'delete event' });
      const puts = events.flatMap((e) => (e.type === 'put' ? [e.record] : []));
      expect(puts.map((r) => [r.key, r.ok])).toEqual([
        [mine.key, true],
        ['10.10.6.0-24', false],
      ]);
      expect(puts[1]?.ok === false && puts[1].reason).toMatch(/not JSON/);
      expect(events.filter((e) => e.type === 'delete')).toEqual([{ type: 'delete', key: '10.10.5.0-24' }]);
      ctl.abort();
      await watching;
    });

    it('drops a lease whose TTL runs out, and it can be reclaimed in place', async () => {
      const { config, open } = await setup();
      const store = await open(2);
      const lease = await store.acquireLease({ config, attrs: vxlanAttrs(9), previous: undefined }, signal);
      expect(lease.expiresAt).toBeLessThanOrEqual(Date.now() + 2000);
      const deleted: string[] = [];
      const ctl = new AbortController();
      const watching = store.watchLeases({ signal: ctl.signal, onEvent: (e) => e.type === 'delete' && deleted.push(e.key) });
      await waitFor(() => deleted.includes(lease.key), { timeoutMs: 10_000, what: 'expiry' });
      expect((await store.reclaimLease(lease, signal)).key).toBe(lease.key);
      ctl.abort();
      await watching;
    });
  });
}
