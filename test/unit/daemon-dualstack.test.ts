// The daemon's dual-stack start-up, up to subnet.env (no kernel is touched before it): the lease
// request carries PublicIPv6, an IPv6 VtepMAC of its own and subnet.env's IPv6 subnet; subnet.env
// gets both families; a store that hands back a lease without an IPv6 subnet stops start-up.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { derivedVtepMac, runDaemon } from '../../src/daemon.ts';
import { TwillError } from '../../src/errors.ts';
import type { Runner } from '../../src/exec/runner.ts';
import type { AcquireRequest, Lease, LeaseStore } from '../../src/lease/types.ts';
import { parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { formatCidr6, parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
import { captureLog } from '../helpers/log.ts';

const CONFIG =
  '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}';
const IP_ADDR = JSON.stringify([
  {
    ifname: 'eth0',
    mtu: 1500,
    address: '02:fc:00:00:00:01',
    addr_info: [
      { family: 'inet', local: '192.0.2.2', prefixlen: 24, scope: 'global' },
      { family: 'inet6', local: 'fd00:123::2', prefixlen: 64, scope: 'global' },
    ],
  },
]);

/** The reads start-up makes before the lease: the addresses and (vxlan) existing devices' MACs. */
const runner: Runner = async (file, args) => {
  const cmd = `${file} ${args.join(' ')}`;
  if (cmd === 'ip -json addr show') return { stdout: IP_ADDR, stderr: '' };
  if (cmd === 'ip -json link show') return { stdout: '[]', stderr: '' };
  throw new Error(`not in this test: ${cmd}`);
};

const v4 = (t: string): Cidr => parseCidr(t, { strict: true }) as Cidr;
const v6 = (t: string): Cidr6 => parseCidr6(t, { strict: true }) as Cidr6;

function storeGiving(subnet6: Cidr6 | null, seen: AcquireRequest[]): LeaseStore {
  const never = (): Promise<never> => Promise.reject(new Error('not reached in this test'));
  return {
    description: 'test store',
    getNetworkConfig: async () => parseNetConfig(CONFIG),
    acquireLease: async (req): Promise<Lease> => {
      seen.push(req);
      return {
        key: subnet6 ? '10.244.7.0-24&fd00:10:244:7::-64' : '10.244.7.0-24',
        subnet: v4('10.244.7.0/24'),
        ...(subnet6 ? { subnet6 } : {}),
        attrs: req.attrs,
        expiresAt: Date.now() + 3_600_000,
        version: '1',
      };
    },
    renewLease: never,
    reclaimLease: never,
    watchLeases: never,
    close: async () => undefined,
  };
}

let dir = '';
beforeAll(async () => (dir = await mkdtemp(join(tmpdir(), 'twill-dual-'))));
afterAll(() => rm(dir, { recursive: true, force: true }));

async function start(store: LeaseStore, subnetFile: string): Promise<unknown> {
  return runDaemon(
    {
      store,
      runner,
      watch: () => Promise.reject(new Error('no monitors in this test')),
      logger: captureLog().logger,
      ensureForwarding: async () => false,
      bridgeNetfilterProblem: async () => undefined,
    },
    {
      nodeName: 'n1',
      iface: {
        iface: [],
        ifaceRegex: ['^192\\.0\\.2\\.'],
        publicIp: undefined,
        publicIpv6: '2001:db8::2',
      },
      subnetFile,
      renewMarginMs: 3_600_000,
      ipMasq: true,
      resyncMs: 5_000,
    },
    AbortSignal.timeout(10_000),
  ).catch((err: unknown) => err);
}

describe('dual-stack start-up', () => {
  it('asks for both families and writes both to subnet.env', async () => {
    const subnetFile = join(dir, 'both.env');
    // the IPv6 subnet held before, in the same IPv6 network: asked for again
    await writeFile(
      subnetFile,
      'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:7::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n',
    );
    const seen: AcquireRequest[] = [];
    // start-up goes on past subnet.env to the kernel, which this test's runner refuses
    await start(storeGiving(v6('fd00:10:244:7::/64'), seen), subnetFile);
    expect(seen).toHaveLength(1);
    const req = seen[0] as AcquireRequest;
    expect(req.previous6 && formatCidr6(req.previous6)).toBe('fd00:10:244:7::/64');
    expect(req.attrs.publicIpv6).toBe('2001:db8::2');
    const mac4 = req.attrs.backendData?.vtepMac;
    const mac6 = req.attrs.backendData6?.vtepMac;
    expect(mac4).toBe(derivedVtepMac('n1', 1));
    expect(mac6).toBe(derivedVtepMac('n1', 1, 6));
    expect(mac6).not.toBe(mac4);
    expect(req.attrs.backendData6?.vni).toBe(1);
    // a dual-stack vxlan node's pods get the IPv6 tunnel's MTU (1500 − 70), which fits both
    expect(await readFile(subnetFile, 'utf8')).toBe(
      'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:7::1/64\nFLANNEL_MTU=1430\nFLANNEL_IPMASQ=true\n',
    );
  });

  it('does not ask for an IPv6 subnet from another IPv6 network', async () => {
    const subnetFile = join(dir, 'other.env');
    await writeFile(
      subnetFile,
      'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_IPV6_NETWORK=fd00:99::/56\nFLANNEL_IPV6_SUBNET=fd00:99:0:7::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n',
    );
    const seen: AcquireRequest[] = [];
    await start(storeGiving(v6('fd00:10:244:7::/64'), seen), subnetFile);
    expect(seen[0]?.previous6).toBeUndefined();
    expect(seen[0]?.previous && seen[0].previous.base).toBe(v4('10.244.7.0/24').base);
  });

  it('stops when the store hands back a lease without an IPv6 subnet', async () => {
    const subnetFile = join(dir, 'v4only.env');
    const err = await start(storeGiving(null, []), subnetFile);
    expect(err).toBeInstanceOf(TwillError);
    expect((err as TwillError).code).toBe('LEASE_INVALID');
    expect((err as TwillError).message).toContain(
      'lease 10.244.7.0-24 without an IPv6 subnet, but the network config sets EnableIPv6',
    );
    expect(await readFile(subnetFile, 'utf8').catch(() => 'none')).toBe('none');
  });

  it('derives IPv6 VtepMACs that are unicast, locally administered and stable', () => {
    const mac = derivedVtepMac('n1', 1, 6);
    expect(mac).toBe(derivedVtepMac('n1', 1, 6));
    const first = parseInt(mac.slice(0, 2), 16);
    expect(first & 0x01).toBe(0);
    expect(first & 0x02).toBe(2);
  });
});
