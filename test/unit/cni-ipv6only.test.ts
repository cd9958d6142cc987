// Unit tests of the plugin on an IPv6-only node (subnet.env with only the
// IPv6 pair), no kernel: the bridge MAC made from the IPv6 gateway, the host
// and pod batches without their IPv4 lines, CHECK's batch and comparison for
// IPv6 alone, a result listing only the IPv6 address, the IP store reserving
// only an IPv6 address (hint last_reserved_ip.0, host-local's file for its
// only range set), and ADD through a fake process runner: the same processes
// as a dual-stack ADD, no IPv4 anywhere, and a rollback that gives the IPv6
// address back.
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkProblems } from '../../cni/check-problems.ts';
import { parseNetConf } from '../../cni/config.ts';
import { parseEnv } from '../../cni/env.ts';
import { CniError } from '../../cni/errors.ts';
import {
  POD_IPV6_PRELUDE,
  bridgeMac,
  bridgeMac6,
  hostAddBatch,
  podAddBatch,
  podCheckBatch,
} from '../../cni/ip-batch.ts';
import { poolOf, poolOf6 } from '../../cni/ipam/pool.ts';
import { IpStore } from '../../cni/ipam/store.ts';
import { hostVethName } from '../../cni/names.ts';
import { renderResult, type Attachment } from '../../cni/result.ts';
import { cmdAdd } from '../../cni/verbs/add.ts';
import type { PluginDeps } from '../../cni/verbs/common.ts';
import { subnetEnvText } from '../../lab/kit/call-cni.ts';
import { CommandError, type RunOptions } from '../../src/exec/runner.ts';
import { parseCidr, parseIpv4 } from '../../src/net/ipv4.ts';
import { formatIpv6, parseCidr6, parseIpv6, type Cidr6 } from '../../src/net/ipv6.ts';
import { renderSubnetEnv } from '../../src/subnetenv.ts';

function cidr6(text: string): Cidr6 {
  const c = parseCidr6(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text}`);
  return c;
}

const ip6 = (t: string): bigint => parseIpv6(t) ?? -1n;

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'twill-v6only-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('IPv6-only batches, result and CHECK', () => {
  it('makes a stable, locally administered bridge MAC from the IPv6 gateway, different per subnet', () => {
    const mac = bridgeMac6(ip6('fd00:0:0:3::1'));
    expect(mac).toMatch(/^0a:58(:[0-9a-f]{2}){4}$/);
    expect(bridgeMac6(ip6('fd00:0:0:3::1'))).toBe(mac);
    expect(bridgeMac6(ip6('fd00:0:0:4::1'))).not.toBe(mac);
    // the IPv4 one is unchanged
    expect(bridgeMac(parseIpv4('10.244.3.1') ?? 0)).toBe('0a:58:0a:f4:03:01');
  });

  it('puts only the IPv6 gateway (nodad) on the bridge', () => {
    const { lines, vethLine } = hostAddBatch(
      {
        bridge: 'cni0',
        bridgeMac: '0a:58:01:02:03:04',
        hostVeth: 'twv0123456789ab',
        ifname: 'eth0',
        netns: '/var/run/netns/p1',
        mtu: 1430,
        gateway: undefined,
        gateway6: { addr: ip6('fd00:0:0:3::1'), prefix: 64 },
        hairpin: true,
      },
      true,
    );
    expect(lines).toEqual([
      'link add name cni0 address 0a:58:01:02:03:04 mtu 1430 type bridge',
      'link add name twv0123456789ab mtu 1430 type veth peer name eth0 mtu 1430 netns /var/run/netns/p1',
      'link set dev twv0123456789ab master cni0 up',
      'link set dev twv0123456789ab type bridge_slave hairpin on',
      'link set dev cni0 up',
      'addr replace fd00:0:0:3::1/64 dev cni0 nodad',
      'link show dev cni0',
      'link show dev twv0123456789ab',
    ]);
    expect(vethLine).toBe(2);
  });

  it('gives the pod only its IPv6 address (nodad) and IPv6 routes', () => {
    const v6 = {
      address: ip6('fd00:0:0:3::5'),
      subnet: cidr6('fd00:0:0:3::/64'),
      gateway: ip6('fd00:0:0:3::1'),
      network: cidr6('fd00::/48'),
    };
    expect(podAddBatch({ ifname: 'eth0', defaultRoute: true, v6 })).toEqual([
      'link set dev lo up',
      'addr add fd00:0:0:3::5/64 dev eth0 nodad',
      'link set dev eth0 up',
      'route add fd00::/48 via fd00:0:0:3::1 dev eth0',
      'route add ::/0 via fd00:0:0:3::1 dev eth0',
      'link show dev eth0',
    ]);
    expect(podAddBatch({ ifname: 'eth0', defaultRoute: false, v6 })).not.toContain(
      'route add ::/0 via fd00:0:0:3::1 dev eth0',
    );
    // CHECK reads the addresses and every route, not the IPv4 routes
    expect(podCheckBatch('eth0', { ipv4: false, ipv6: true })).toEqual([
      'addr show dev eth0',
      'route show table all dev eth0',
    ]);
    // the IPv4-only default is unchanged
    expect(podCheckBatch('eth0')).toEqual(['addr show dev eth0', 'route show dev eth0']);
  });

  it('lists only the IPv6 address in the result, with version 6 before 1.0.0', () => {
    const iface = { name: 'x', mac: '00:00:00:00:00:01', mtu: 1430 };
    const a: Attachment = {
      bridge: iface,
      host: iface,
      pod: { ...iface, sandbox: '/var/run/netns/p' },
      ip6: { address: 'fd00:0:0:3::5/64', gateway: 'fd00:0:0:3::1' },
      routes: [
        { dst: 'fd00::/48', gw: 'fd00:0:0:3::1' },
        { dst: '::/0', gw: 'fd00:0:0:3::1' },
      ],
    };
    expect(renderResult('1.1.0', a)).toMatchObject({
      ips: [{ interface: 2, address: 'fd00:0:0:3::5/64', gateway: 'fd00:0:0:3::1' }],
      routes: a.routes,
    });
    expect(renderResult('0.4.0', a).ips).toEqual([
      { version: '6', interface: 2, address: 'fd00:0:0:3::5/64', gateway: 'fd00:0:0:3::1' },
    ]);
  });

  it('CHECK compares the IPv6 side alone: no IPv4 address or route is missed', () => {
    const expected = {
      ifname: 'eth0',
      mtu: 1430,
      defaultRoute: true,
      v6: { address: 'fd00:0:0:3::5/64', gateway: 'fd00:0:0:3::1', network: 'fd00::/48' },
    };
    const addrs = (extra: Record<string, unknown>[] = []) => [
      {
        ifname: 'eth0',
        mtu: 1430,
        flags: ['UP'],
        addr_info: [{ family: 'inet6', local: 'fd00:0:0:3::5', prefixlen: 64 }, ...extra],
      },
    ];
    const allRoutes = [
      { dst: 'fd00:0:0:3::/64' },
      { dst: 'fd00::/48', gateway: 'fd00:0:0:3::1' },
      { dst: 'default', gateway: 'fd00:0:0:3::1' },
    ];
    expect(checkProblems(expected, { addrs: addrs(), allRoutes })).toEqual([]);
    expect(
      checkProblems(expected, {
        addrs: [{ ...addrs()[0], mtu: 1500, addr_info: [] }],
        allRoutes: allRoutes.slice(0, 2),
      }),
    ).toEqual([
      'interface eth0 has MTU 1500, expected 1430',
      'interface eth0 has IPv6 addresses [], expected fd00:0:0:3::5/64',
      'no default route via fd00:0:0:3::1',
    ]);
  });
});

describe('IpStore on an IPv6-only node', () => {
  const pool6 = poolOf6(cidr6('fd00:0:0:3::/126'));
  const reserve = (store: IpStore, containerId: string) =>
    store.reserveAll({ pool: undefined, pool6, containerId, ifname: 'eth0' });

  it('reserves an IPv6 address only, its hint in last_reserved_ip.0 as host-local with one range', async () => {
    const store = new IpStore(join(dir, 'twnet'));
    expect(await reserve(store, 'c1')).toEqual({ addr: undefined, addr6: ip6('fd00:0:0:3::2') });
    expect((await readdir(store.dir)).sort()).toEqual(['fd00:0:0:3::2', 'last_reserved_ip.0']);
    expect(await readFile(join(store.dir, 'fd00:0:0:3::2'), 'utf8')).toBe('c1\r\neth0');
    expect(await readFile(join(store.dir, 'last_reserved_ip.0'), 'utf8')).toBe('fd00:0:0:3::2');
    // round-robin from that hint, then 103 once the pool (::2, ::3) is full, nothing left behind
    const second = await reserve(store, 'c2');
    expect(formatIpv6(second.addr6 ?? 0n)).toBe('fd00:0:0:3::3');
    const err = await reserve(store, 'c3').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CniError);
    expect(err).toMatchObject({ cniCode: 103 });
    expect((await readdir(store.dir)).sort()).toEqual([
      'fd00:0:0:3::2',
      'fd00:0:0:3::3',
      'last_reserved_ip.0',
    ]);
    expect(await store.releaseAttachment('c1', 'eth0')).toEqual(['fd00:0:0:3::2']);
    expect(formatIpv6((await reserve(store, 'c4')).addr6 ?? 0n)).toBe('fd00:0:0:3::2');
  });

  it('reads an IPv4 hint left by an earlier IPv4 run as no hint', async () => {
    const store = new IpStore(join(dir, 'twnet'));
    const subnet = parseCidr('10.244.3.0/24', { strict: true });
    if (!subnet) throw new Error('test setup');
    await store.reserve({ pool: poolOf(subnet), containerId: 'old', ifname: 'eth0' });
    expect(await readFile(join(store.dir, 'last_reserved_ip.0'), 'utf8')).toBe('10.244.3.2');
    expect(formatIpv6((await reserve(store, 'c1')).addr6 ?? 0n)).toBe('fd00:0:0:3::2');
    expect(await readFile(join(store.dir, 'last_reserved_ip.0'), 'utf8')).toBe('fd00:0:0:3::2');
  });

  it('refuses a reservation of neither family', async () => {
    const store = new IpStore(join(dir, 'twnet'));
    await expect(
      store.reserveAll({ pool: undefined, containerId: 'c1', ifname: 'eth0' }),
    ).rejects.toThrow('no pool of either family');
  });
});

interface Call {
  readonly file: string;
  readonly args: readonly string[];
  readonly input: string | undefined;
}

/**
 * ADD through a fake runner: the host batch succeeds (printing the two links), the pod batch
 * fails, so ADD rolls back. Returns the calls and the store's files as the pod batch saw them.
 */
async function failedAdd(
  subnetEnv: string,
): Promise<{ calls: Call[]; storeDuringPod: string[]; err: unknown }> {
  const netns = join(dir, 'netns');
  await writeFile(netns, '');
  await writeFile(join(dir, 'subnet.env'), subnetEnv);
  const storeDir = join(dir, 'ipam', 'twnet');
  const calls: Call[] = [];
  let storeDuringPod: string[] = [];
  const veth = hostVethName('v6only', 'eth0');
  const deps: PluginDeps = {
    log: { info: () => undefined, error: () => undefined },
    signal: new AbortController().signal,
    runner: async (file, args, opts?: RunOptions) => {
      calls.push({ file, args, input: opts?.input });
      if (file === 'ip' && args.includes('-batch'))
        return {
          stdout: `[{"ifname":"twtnobr0","address":"0a:58:00:00:00:01","mtu":1430,"flags":[]}]\n[{"ifname":"${veth}","address":"02:00:00:00:00:01","mtu":1430,"flags":[]}]\n`,
          stderr: '',
        };
      if (file === 'nsenter') {
        storeDuringPod = (await readdir(storeDir)).filter((n) => !n.startsWith('.')).sort();
        throw new CommandError({
          command: [file, ...args],
          exitCode: 2,
          stderr: 'RTNETLINK answers: File exists\nCommand failed -:4\n',
          reason: 'exit code 2',
        });
      }
      return { stdout: '', stderr: '' };
    },
  };
  const env = parseEnv({
    CNI_COMMAND: 'ADD',
    CNI_CONTAINERID: 'v6only',
    CNI_NETNS: netns,
    CNI_IFNAME: 'eth0',
  });
  const conf = parseNetConf(
    JSON.stringify({
      cniVersion: '1.0.0',
      name: 'twnet',
      bridge: 'twtnobr0',
      subnetFile: join(dir, 'subnet.env'),
      dataDir: join(dir, 'ipam'),
    }),
  );
  const err = await cmdAdd(deps, { env, conf }).catch((e: unknown) => e);
  return { calls, storeDuringPod, err };
}

const V6ONLY_ENV = renderSubnetEnv({
  network: null,
  subnet: null,
  network6: cidr6('fd00::/48'),
  subnet6: cidr6('fd00:0:0:3::/64'),
  mtu: 1430,
  ipMasq: false,
});

describe('ADD on an IPv6-only node (fake runner)', () => {
  it('wires IPv6 alone through the dual-stack processes, and rolls back the IPv6 address', async () => {
    const { calls, storeDuringPod, err } = await failedAdd(V6ONLY_ENV);
    expect(err).toBeInstanceOf(CommandError);
    const veth = hostVethName('v6only', 'eth0');
    const mac = bridgeMac6(ip6('fd00:0:0:3::1'));
    expect(calls.map((c) => [c.file, ...c.args])).toEqual([
      ['ip', '-json', '-batch', '-'],
      ['nsenter', `--net=${join(dir, 'netns')}`, '/bin/sh', '-c', POD_IPV6_PRELUDE, 'sh', 'eth0'],
      ['ip', 'link', 'del', 'dev', veth],
    ]);
    expect(calls[0]?.input).toBe(
      [
        `link add name twtnobr0 address ${mac} mtu 1430 type bridge`,
        `link add name ${veth} mtu 1430 type veth peer name eth0 mtu 1430 netns ${join(dir, 'netns')}`,
        `link set dev ${veth} master twtnobr0 up`,
        `link set dev ${veth} type bridge_slave hairpin on`,
        'link set dev twtnobr0 up',
        'addr replace fd00:0:0:3::1/64 dev twtnobr0 nodad',
        'link show dev twtnobr0',
        `link show dev ${veth}`,
        '',
      ].join('\n'),
    );
    expect(calls[1]?.input).toBe(
      [
        'link set dev lo up',
        'addr add fd00:0:0:3::2/64 dev eth0 nodad',
        'link set dev eth0 up',
        'route add fd00::/48 via fd00:0:0:3::1 dev eth0',
        'route add ::/0 via fd00:0:0:3::1 dev eth0',
        'link show dev eth0',
        '',
      ].join('\n'),
    );
    // the store held the IPv6 address only (no IPv4 file or hint) while the pod was wired
    expect(storeDuringPod).toEqual(['fd00:0:0:3::2', 'last_reserved_ip.0']);
    expect((await readdir(join(dir, 'ipam', 'twnet'))).filter((n) => !n.startsWith('.'))).toEqual([
      'last_reserved_ip.0',
    ]);
  });

  it('runs as many processes as a dual-stack ADD', async () => {
    const v6only = await failedAdd(V6ONLY_ENV);
    await rm(join(dir, 'ipam'), { recursive: true, force: true });
    const dual = await failedAdd(
      subnetEnvText({
        network: '10.244.0.0/16',
        subnet: '10.244.3.0/24',
        mtu: 1430,
        network6: 'fd00::/48',
        subnet6: 'fd00:0:0:3::/64',
      }),
    );
    expect(v6only.calls.map((c) => c.args.slice(0, 3))).toEqual(
      dual.calls.map((c) => c.args.slice(0, 3)),
    );
    expect(dual.calls[0]?.input).toContain('addr replace 10.244.3.1/24 broadcast + dev twtnobr0');
  });
});
