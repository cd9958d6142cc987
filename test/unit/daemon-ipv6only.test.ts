// The daemon's IPv6-only start-up ("EnableIPv4": false), up to subnet.env and
// the iptables detection that follows it (no kernel is touched before): the
// interface of the IPv6 default route, which has no IPv4 address; a lease
// request without PublicIP or BackendData, with PublicIPv6 and an IPv6
// VtepMAC, asking for subnet.env's IPv6 subnet again; subnet.env without the
// IPv4 pair and with the IPv6 tunnel's MTU; ip6tables asked, not iptables.
// --public-ip is a config error, a lease without an IPv6 subnet stops
// start-up, and a store that refuses IPv6 only (etcd) stops it at once with
// its CONFIG_UNSUPPORTED error, which `twill run` reports as a usage error.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { derivedVtepMac, runDaemon } from '../../src/daemon.ts';
import { TwillError } from '../../src/errors.ts';
import type { Runner } from '../../src/exec/runner.ts';
import type { IfaceRequest } from '../../src/net/iface.ts';
import type { AcquireRequest, Lease, LeaseStore } from '../../src/lease/types.ts';
import type { Cidr } from '../../src/net/ipv4.ts';
import { formatCidr6, parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
import { captureLog } from '../helpers/log.ts';

const VXLAN =
  '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}';
const HOST_GW =
  '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"}}';
const DUAL =
  '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}';

// eth0: IPv6 only (a global address and its link-local); eth1: an IPv4 address only; eth2: both
// families (for a dual-stack node)
const IP_ADDR = JSON.stringify([
  {
    ifname: 'eth0',
    mtu: 1500,
    address: '02:fc:00:00:00:01',
    addr_info: [
      { family: 'inet6', local: 'fd00:123::2', prefixlen: 64, scope: 'global' },
      { family: 'inet6', local: 'fe80::fc:ff:fe00:1', prefixlen: 64, scope: 'link' },
    ],
  },
  {
    ifname: 'eth1',
    mtu: 9000,
    address: '02:fc:00:00:00:02',
    addr_info: [{ family: 'inet', local: '192.0.2.2', prefixlen: 24, scope: 'global' }],
  },
  {
    ifname: 'eth2',
    mtu: 1500,
    address: '02:fc:00:00:00:03',
    addr_info: [
      { family: 'inet', local: '198.51.100.2', prefixlen: 24, scope: 'global' },
      { family: 'inet6', local: 'fd00:124::2', prefixlen: 64, scope: 'global' },
    ],
  },
]);
const ROUTE6_DEFAULT = JSON.stringify([
  { dst: 'default', gateway: 'fe80::1', dev: 'eth0', protocol: 'ra', metric: 1024, flags: [] },
]);

/**
 * The reads start-up makes: the addresses, the IPv6 default route and (vxlan) existing devices'
 * MACs; then, after subnet.env, which iptables there is, which this test refuses (start-up ends
 * there).
 */
function recordingRunner(calls: string[]): Runner {
  return async (file, args) => {
    const cmd = `${file} ${args.join(' ')}`;
    calls.push(cmd);
    if (cmd === 'ip -json addr show') return { stdout: IP_ADDR, stderr: '' };
    if (cmd === 'ip -json -6 route show default') return { stdout: ROUTE6_DEFAULT, stderr: '' };
    if (cmd === 'ip -json link show') return { stdout: '[]', stderr: '' };
    throw new Error(`not in this test: ${cmd}`);
  };
}

const v6 = (t: string): Cidr6 => parseCidr6(t, { strict: true }) as Cidr6;

/** A store with `config` that leases `subnet6` (and `subnet`), recording the requests. */
function storeGiving(
  config: string,
  o: { subnet6: Cidr6 | null; subnet?: Cidr | null },
  seen: AcquireRequest[],
): LeaseStore {
  const never = (): Promise<never> => Promise.reject(new Error('not reached in this test'));
  return {
    description: 'test store',
    anySubnetSize: true,
    getNetworkConfig: async () => parseNetConfig(config),
    acquireLease: async (req): Promise<Lease> => {
      seen.push(req);
      return {
        key: 'n1',
        subnet: o.subnet ?? null,
        ...(o.subnet6 ? { subnet6: o.subnet6 } : {}),
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
beforeAll(async () => (dir = await mkdtemp(join(tmpdir(), 'twill-v6only-'))));
afterAll(() => rm(dir, { recursive: true, force: true }));

const NO_FLAGS: IfaceRequest = { iface: [], ifaceRegex: [], publicIp: undefined };

async function start(
  store: LeaseStore,
  subnetFile: string,
  o: { iface?: IfaceRequest; calls?: string[] } = {},
): Promise<unknown> {
  return runDaemon(
    {
      store,
      runner: recordingRunner(o.calls ?? []),
      watch: () => Promise.reject(new Error('no monitors in this test')),
      logger: captureLog().logger,
      ensureForwarding: async () => false,
      bridgeNetfilterProblem: async () => undefined,
    },
    {
      nodeName: 'n1',
      iface: o.iface ?? NO_FLAGS,
      subnetFile,
      renewMarginMs: 3_600_000,
      ipMasq: true,
      resyncMs: 5_000,
    },
    AbortSignal.timeout(10_000),
  ).catch((err: unknown) => err);
}

describe('IPv6-only start-up', () => {
  it('leases IPv6 alone on the IPv6 default route interface and writes subnet.env without the IPv4 pair', async () => {
    const subnetFile = join(dir, 'vxlan.env');
    // held before, in the same IPv6 network: asked for again
    await writeFile(
      subnetFile,
      'FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:7::1/64\nFLANNEL_MTU=1430\nFLANNEL_IPMASQ=true\n',
    );
    const seen: AcquireRequest[] = [];
    const calls: string[] = [];
    const err = await start(
      storeGiving(VXLAN, { subnet6: v6('fd00:10:244:7::/64') }, seen),
      subnetFile,
      { calls },
    );
    expect(seen).toHaveLength(1);
    const req = seen[0] as AcquireRequest;
    expect(req.previous).toBeUndefined();
    expect(req.previous6 && formatCidr6(req.previous6)).toBe('fd00:10:244:7::/64');
    // flannel's kube subnet manager with IPv4 off: no public-ip, no backend-data
    expect(req.attrs).toEqual({
      publicIp: null,
      publicIpv6: 'fd00:123::2',
      backendType: 'vxlan',
      backendData: null,
      backendData6: { vni: 1, vtepMac: derivedVtepMac('n1', 1, 6) },
    });
    // pods get the IPv6 tunnel's MTU (1500 − 70)
    expect(await readFile(subnetFile, 'utf8')).toBe(
      'FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:7::1/64\nFLANNEL_MTU=1430\nFLANNEL_IPMASQ=true\n',
    );
    // the IPv6 default route chose the interface; ip6tables is the one asked, as soon as the
    // config is read (beside the acquisition), and its failure stops start-up once that is done;
    // the IPv6 routes alone are looked at for twill's (a cold start starts `ip monitor` later)
    expect(calls).toEqual([
      'ip6tables --version',
      'ip -6 route show proto 151',
      'ip -json addr show',
      'ip -json -6 route show default',
      'ip -json link show',
    ]);
    expect((err as Error).message).toBe('not in this test: ip6tables --version');
  });

  it('host-gw: no VtepMAC, the underlay MTU, and --public-ipv6 published', async () => {
    const subnetFile = join(dir, 'hostgw.env');
    // subnet.env of an earlier dual-stack run in the same IPv6 network: its IPv4 subnet is not
    // asked for
    await writeFile(
      subnetFile,
      'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:9::1/64\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n',
    );
    const seen: AcquireRequest[] = [];
    await start(storeGiving(HOST_GW, { subnet6: v6('fd00:10:244:9::/64') }, seen), subnetFile, {
      iface: { ...NO_FLAGS, iface: ['eth0'], publicIpv6: '2001:db8::2' },
    });
    const req = seen[0] as AcquireRequest;
    expect(req.previous).toBeUndefined();
    expect(req.previous6 && formatCidr6(req.previous6)).toBe('fd00:10:244:9::/64');
    expect(req.attrs).toEqual({
      publicIp: null,
      publicIpv6: '2001:db8::2',
      backendType: 'host-gw',
      backendData: null,
    });
    expect(await readFile(subnetFile, 'utf8')).toBe(
      'FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:9::1/64\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n',
    );
  });

  it('refuses --public-ip as a config error before asking for a lease', async () => {
    const subnetFile = join(dir, 'public-ip.env');
    const seen: AcquireRequest[] = [];
    const err = await start(
      storeGiving(VXLAN, { subnet6: v6('fd00:10:244:7::/64') }, seen),
      subnetFile,
      {
        iface: { ...NO_FLAGS, publicIp: '192.0.2.2' },
      },
    );
    expect(err).toBeInstanceOf(TwillError);
    expect((err as TwillError).code).toBe('CONFIG_INVALID');
    expect((err as TwillError).message).toContain('--public-ipv6');
    expect(seen).toEqual([]);
    expect(await readFile(subnetFile, 'utf8').catch(() => 'none')).toBe('none');
  });

  it('stops when the store hands back a lease without an IPv6 subnet', async () => {
    const subnetFile = join(dir, 'no-subnet6.env');
    const err = await start(storeGiving(VXLAN, { subnet6: null }, []), subnetFile);
    expect((err as TwillError).code).toBe('LEASE_INVALID');
    expect((err as TwillError).message).toContain('lease n1 without an IPv6 subnet');
    expect(await readFile(subnetFile, 'utf8').catch(() => 'none')).toBe('none');
  });

  it("a store that refuses IPv6 only (etcd's CONFIG_UNSUPPORTED) stops start-up at once with its error", async () => {
    let reads = 0;
    const refusing: LeaseStore = {
      ...storeGiving(VXLAN, { subnet6: null }, []),
      getNetworkConfig: async () => {
        reads++;
        throw new TwillError(
          'CONFIG_UNSUPPORTED',
          '/coreos.com/network/config: IPv6-only ("EnableIPv4": false) needs the Kubernetes store: run twill with --kube-subnet-mgr',
        );
      },
    };
    const calls: string[] = [];
    const err = await start(refusing, join(dir, 'etcd.env'), { calls });
    expect(err).toBeInstanceOf(TwillError);
    expect((err as TwillError).code).toBe('CONFIG_UNSUPPORTED');
    expect((err as TwillError).message).toContain('--kube-subnet-mgr');
    // not retried as an unreachable store would be, and no interface looked at
    expect(reads).toBe(1);
    expect(calls).toEqual([]);
  });
});

describe('a dual-stack start-up', () => {
  it('stops when the store hands back a lease without an IPv4 subnet', async () => {
    const subnetFile = join(dir, 'dual-no-subnet.env');
    const err = await start(
      storeGiving(DUAL, { subnet6: v6('fd00:10:244:7::/64'), subnet: null }, []),
      subnetFile,
      { iface: { ...NO_FLAGS, iface: ['eth2'] } },
    );
    expect(err).toBeInstanceOf(TwillError);
    expect((err as TwillError).code).toBe('LEASE_INVALID');
    expect((err as TwillError).message).toContain(
      'lease n1 without an IPv4 subnet, but the network config has IPv4 (Network 10.244.0.0/16)',
    );
    expect(await readFile(subnetFile, 'utf8').catch(() => 'none')).toBe('none');
  });
});
