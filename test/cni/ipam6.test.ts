// Unit tests of the dual-stack side of the plugin, no kernel: the IPv6 pool
// (round-robin over bigints, the subnet's last address included as
// host-local has it, a /64 walked lazily), the IP store reserving both
// families under one lock (exhaustion of either leaves nothing reserved,
// release of both), and the IPv6 lines of the batches, the result and
// CHECK's comparison, with the IPv4-only output unchanged.
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkProblems } from '../../cni/check-problems.ts';
import { CniError } from '../../cni/errors.ts';
import { hostAddBatch, podAddBatch, podCheckBatch } from '../../cni/ip-batch.ts';
import { LOCK_NAME } from '../../cni/ipam/lock.ts';
import {
  candidates6,
  pickAddress6,
  poolOf,
  poolOf6,
  poolSize6,
  type Pool6,
} from '../../cni/ipam/pool.ts';
import { IpStore, isAddressName } from '../../cni/ipam/store.ts';
import { renderResult, type Attachment } from '../../cni/result.ts';
import { parseCidr, parseIpv4, type Cidr } from '../../src/net/ipv4.ts';
import { formatIpv6, parseCidr6, parseIpv6, type Cidr6 } from '../../src/net/ipv6.ts';

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text}`);
  return c;
}

function cidr6(text: string): Cidr6 {
  const c = parseCidr6(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text}`);
  return c;
}

const ip6 = (t: string): bigint => parseIpv6(t) ?? -1n;
const fmt = (all: Iterable<bigint>): string[] => [...all].map(formatIpv6);

describe('IPv6 pool', () => {
  const pool = poolOf6(cidr6('fd00:0:0:3::/125'));

  it('hands out every address but the subnet address and the gateway, the last one included', () => {
    expect(formatIpv6(pool.gateway)).toBe('fd00:0:0:3::1');
    expect(fmt(candidates6(pool))).toEqual([
      'fd00:0:0:3::2',
      'fd00:0:0:3::3',
      'fd00:0:0:3::4',
      'fd00:0:0:3::5',
      'fd00:0:0:3::6',
      'fd00:0:0:3::7',
    ]);
    expect(poolSize6(pool)).toBe(6n);
    expect(poolSize6(poolOf6(cidr6('fd00:0:0:3::/64')))).toBe((1n << 64n) - 2n);
    expect(fmt(candidates6(poolOf6(cidr6('fd00::/127'))))).toEqual([]);
    expect(poolSize6(poolOf6(cidr6('fd00::/128')))).toBe(0n);
  });

  it('goes round-robin after the last reserved address, wrapping', () => {
    expect(fmt(candidates6(pool, ip6('fd00:0:0:3::5')))).toEqual([
      'fd00:0:0:3::6',
      'fd00:0:0:3::7',
      'fd00:0:0:3::2',
      'fd00:0:0:3::3',
      'fd00:0:0:3::4',
      'fd00:0:0:3::5',
    ]);
    // a hint outside the pool starts at the beginning
    expect(fmt(candidates6(pool, ip6('fd00:0:0:9::5'))).slice(0, 1)).toEqual(['fd00:0:0:3::2']);
    const used = new Set([ip6('fd00:0:0:3::6')]);
    expect(formatIpv6(pickAddress6(pool, used, ip6('fd00:0:0:3::5')) ?? 0n)).toBe('fd00:0:0:3::7');
    expect(pickAddress6(pool, new Set(candidates6(pool)))).toBeUndefined();
  });

  it('walks a /64 lazily, wrapping from its last address', () => {
    const big: Pool6 = poolOf6(cidr6('fd00:0:0:3::/64'));
    const it6 = candidates6(big, ip6('fd00:0:0:3:ffff:ffff:ffff:fffe'));
    const next = (): string => {
      const n = it6.next();
      return n.done ? 'done' : formatIpv6(n.value);
    };
    const first = [next(), next()];
    expect(first).toEqual(['fd00::3:ffff:ffff:ffff:ffff', 'fd00:0:0:3::2']);
  });
});

describe('IpStore with both families', () => {
  let dir: string;
  let store: IpStore;
  const pool = poolOf(cidr('10.244.3.0/28'));
  const pool6 = poolOf6(cidr6('fd00:0:0:3::/126'));

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'twill-ipam6-'));
    store = new IpStore(join(dir, 'twnet'));
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const reserve = (containerId: string) =>
    store.reserveAll({ pool, pool6, containerId, ifname: 'eth0' });

  it("reserves one address of each family in host-local's layout", async () => {
    const r = await reserve('c1');
    expect(r).toEqual({ addr: parseIpv4('10.244.3.2'), addr6: ip6('fd00:0:0:3::2') });
    expect(await readFile(join(store.dir, 'fd00:0:0:3::2'), 'utf8')).toBe('c1\r\neth0');
    expect(await readFile(join(store.dir, 'last_reserved_ip.1'), 'utf8')).toBe('fd00:0:0:3::2');
    expect(await readFile(join(store.dir, 'last_reserved_ip.0'), 'utf8')).toBe('10.244.3.2');
    expect((await store.find('c1', 'eth0')).sort()).toEqual(['10.244.3.2', 'fd00:0:0:3::2']);
    // no lock or temp file left behind
    expect((await readdir(store.dir)).filter((n) => n.startsWith('.'))).toEqual([]);
    // without pool6, an IPv4 address only
    expect(await store.reserveAll({ pool, containerId: 'c2', ifname: 'eth0' })).toEqual({
      addr: parseIpv4('10.244.3.3'),
      addr6: undefined,
    });
  });

  it('answers 103 when the IPv6 pool is full, leaving no IPv4 address reserved for the call', async () => {
    await reserve('c1');
    await reserve('c2');
    const err = await reserve('c3').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CniError);
    expect(err).toMatchObject({
      cniCode: 103,
      message: expect.stringContaining(
        "all 2 addresses of the node's IPv6 subnet are reserved",
      ) as unknown,
    });
    expect((await store.entries()).map((e) => e.containerId).sort()).toEqual([
      'c1',
      'c1',
      'c2',
      'c2',
    ]);
    expect(await readdir(store.dir)).not.toContain(LOCK_NAME);
  });

  it('releases both addresses of an attachment and goes round-robin in each family', async () => {
    await reserve('c1');
    await reserve('c2');
    expect((await store.releaseAttachment('c1', 'eth0')).sort()).toEqual([
      '10.244.3.2',
      'fd00:0:0:3::2',
    ]);
    // the IPv6 pool (::2, ::3) wraps back to ::2 after ::3; the IPv4 one goes on to .4
    const r = await reserve('c3');
    expect([r.addr, formatIpv6(r.addr6 ?? 0n)]).toEqual([parseIpv4('10.244.3.4'), 'fd00:0:0:3::2']);
    expect(await store.releaseAll(['10.244.3.4', 'fd00:0:0:3::2', 'fd00:0:0:3::9'])).toEqual([
      '10.244.3.4',
      'fd00:0:0:3::2',
    ]);
    expect((await store.entries()).map((e) => e.ip).sort()).toEqual([
      '10.244.3.3',
      'fd00:0:0:3::3',
    ]);
  });

  it('tells address files from the hints, the lock and temp files', () => {
    expect(['10.244.3.2', 'fd00:0:0:3::2', '::1'].every(isAddressName)).toBe(true);
    expect(
      ['last_reserved_ip.0', 'last_reserved_ip.1', LOCK_NAME, '.twill-x.tmp', 'abc'].some(
        isAddressName,
      ),
    ).toBe(false);
  });
});

describe('dual-stack batches, result and CHECK', () => {
  const wiring = {
    bridge: 'cni0',
    bridgeMac: '0a:58:0a:f4:03:01',
    hostVeth: 'twv0123456789ab',
    ifname: 'eth0',
    netns: '/var/run/netns/p1',
    mtu: 1450,
    gateway: { addr: parseIpv4('10.244.3.1') ?? 0, prefix: 24 },
    hairpin: true,
  };

  it('puts the IPv6 gateway on the bridge without DAD, after the IPv4 one', () => {
    const v4 = hostAddBatch(wiring, false);
    const dual = hostAddBatch(
      { ...wiring, gateway6: { addr: ip6('fd00:0:0:3::1'), prefix: 64 } },
      false,
    );
    const at = v4.lines.indexOf('addr replace 10.244.3.1/24 broadcast + dev cni0') + 1;
    expect(dual.lines).toEqual([
      ...v4.lines.slice(0, at),
      'addr replace fd00:0:0:3::1/64 dev cni0 nodad',
      ...v4.lines.slice(at),
    ]);
  });

  it('gives the pod its IPv6 address (nodad) and routes in the same batch', () => {
    const base = {
      ifname: 'eth0',
      defaultRoute: true,
      v4: {
        address: parseIpv4('10.244.3.5') ?? 0,
        subnet: cidr('10.244.3.0/24'),
        gateway: parseIpv4('10.244.3.1') ?? 0,
        network: cidr('10.244.0.0/16'),
      },
    };
    const v6 = {
      address: ip6('fd00:0:0:3::5'),
      subnet: cidr6('fd00:0:0:3::/64'),
      gateway: ip6('fd00:0:0:3::1'),
      network: cidr6('fd00::/48'),
    };
    expect(podAddBatch({ ...base, v6 })).toEqual([
      'link set dev lo up',
      'addr add 10.244.3.5/24 broadcast + dev eth0',
      'addr add fd00:0:0:3::5/64 dev eth0 nodad',
      'link set dev eth0 up',
      'route add 10.244.0.0/16 via 10.244.3.1 dev eth0',
      'route add default via 10.244.3.1 dev eth0',
      'route add fd00::/48 via fd00:0:0:3::1 dev eth0',
      'route add ::/0 via fd00:0:0:3::1 dev eth0',
      'link show dev eth0',
    ]);
    expect(podAddBatch({ ...base, v6, defaultRoute: false })).not.toContain(
      'route add ::/0 via fd00:0:0:3::1 dev eth0',
    );
    expect(podAddBatch(base).join('\n')).not.toMatch(/fd00|nodad/);
    expect(podCheckBatch('eth0')).toEqual(['addr show dev eth0', 'route show dev eth0']);
    expect(podCheckBatch('eth0', { ipv4: true, ipv6: true })).toEqual([
      'addr show dev eth0',
      'route show dev eth0',
      'route show table all dev eth0',
    ]);
  });

  it('lists the IPv6 address after the IPv4 one, with version 6 before 1.0.0', () => {
    const iface = { name: 'x', mac: '00:00:00:00:00:01', mtu: 1450 };
    const a: Attachment = {
      bridge: iface,
      host: iface,
      pod: { ...iface, sandbox: '/var/run/netns/p' },
      ip4: { address: '10.244.3.5/24', gateway: '10.244.3.1' },
      ip6: { address: 'fd00:0:0:3::5/64', gateway: 'fd00:0:0:3::1' },
      routes: [],
    };
    expect(renderResult('1.0.0', a).ips).toEqual([
      { interface: 2, address: '10.244.3.5/24', gateway: '10.244.3.1' },
      { interface: 2, address: 'fd00:0:0:3::5/64', gateway: 'fd00:0:0:3::1' },
    ]);
    expect(renderResult('0.3.1', a).ips).toEqual([
      { version: '4', interface: 2, address: '10.244.3.5/24', gateway: '10.244.3.1' },
      { version: '6', interface: 2, address: 'fd00:0:0:3::5/64', gateway: 'fd00:0:0:3::1' },
    ]);
  });

  it('CHECK reports a missing, tentative or failed IPv6 address and missing IPv6 routes', () => {
    const expected = {
      ifname: 'eth0',
      mtu: 1450,
      defaultRoute: true,
      v4: { address: '10.244.3.5/24', gateway: '10.244.3.1', network: '10.244.0.0/16' },
      v6: { address: 'fd00:0:0:3::5/64', gateway: 'fd00:0:0:3::1', network: 'fd00::/48' },
    };
    const link = (extra: Record<string, unknown>[]) => [
      {
        ifname: 'eth0',
        mtu: 1450,
        flags: ['UP'],
        addr_info: [{ family: 'inet', local: '10.244.3.5', prefixlen: 24 }, ...extra],
      },
    ];
    const routes = [
      { dst: '10.244.0.0/16', gateway: '10.244.3.1' },
      { dst: 'default', gateway: '10.244.3.1' },
    ];
    const allRoutes = [
      ...routes,
      { dst: 'fd00::/48', gateway: 'fd00:0:0:3::1' },
      { dst: 'default', gateway: 'fd00:0:0:3::1' },
    ];
    const good = { family: 'inet6', local: 'fd00:0:0:3::5', prefixlen: 64 };
    expect(checkProblems(expected, { addrs: link([good]), routes, allRoutes })).toEqual([]);
    expect(
      checkProblems(expected, { addrs: link([{ ...good, tentative: true }]), routes, allRoutes }),
    ).toEqual(['IPv6 address fd00:0:0:3::5/64 on eth0 is still tentative']);
    expect(
      checkProblems(expected, { addrs: link([{ ...good, dadfailed: true }]), routes, allRoutes }),
    ).toEqual(['IPv6 address fd00:0:0:3::5/64 on eth0 failed duplicate detection']);
    // gone address; routes only in another table do not count
    expect(
      checkProblems(expected, {
        addrs: link([]),
        routes,
        allRoutes: [...routes, { dst: 'fd00::/48', gateway: 'fd00:0:0:3::1', table: '100' }],
      }),
    ).toEqual([
      'interface eth0 has IPv6 addresses [], expected fd00:0:0:3::5/64',
      'no route to fd00::/48 via fd00:0:0:3::1',
      'no default route via fd00:0:0:3::1',
    ]);
  });
});
