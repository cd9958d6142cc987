// The twill-cni executable on an IPv6-only node (subnet.env with only
// FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET, as flannel writes it with
// EnableIPv4 off), in namespaces made here: ADD gives the pod only its IPv6
// address, gateway and routes, usable at once (no DAD wait), the bridge only
// the IPv6 gateway, the store only an IPv6 address; the result lists IPv6
// only; CHECK, DEL, GC and STATUS cover IPv6 alone; IPv4 forwarding is left
// as it was. And bad requests get the spec's error JSON with nothing left
// behind.
import { readFile, readdir, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import { CniNode } from '../helpers/cni.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';

const node = new CniNode({
  ipv4: false,
  network6: 'fd00::/48',
  subnet6: 'fd00:0:0:7::/64',
  mtu: 1430,
});

beforeAll(async () => {
  await sweepStaleNetns();
  await node.setup('v6only');
});

afterAll(async () => {
  await node.destroy();
});

interface Addr {
  family: string;
  local: string;
  prefixlen: number;
  scope: string;
  tentative?: boolean;
  dadfailed?: boolean;
}

async function addrsOf(ns: string, dev: string): Promise<Addr[]> {
  const [link] = (await node.ipJson(ns, ['addr', 'show', 'dev', dev])) as { addr_info: Addr[] }[];
  return link?.addr_info ?? [];
}

async function routesOf(
  ns: string,
  family: '-4' | '-6',
): Promise<{ dst: string; gateway?: string; dev: string }[]> {
  return JSON.parse((await run('ip', ['-n', ns, family, '-json', 'route', 'show'])).stdout) as {
    dst: string;
    gateway?: string;
    dev: string;
  }[];
}

async function sysctl(ns: string, key: string): Promise<string> {
  return (await run('ip', ['netns', 'exec', ns, 'sysctl', '-n', key])).stdout.trim();
}

async function ping6(from: string, to: string): Promise<string> {
  const args = ['netns', 'exec', from, 'ping', '-6', '-c', '2', '-i', '0.2', '-W', '2', to];
  return (await run('ip', args)).stdout;
}

const IPS = [{ interface: 2, address: 'fd00:0:0:7::2/64', gateway: 'fd00:0:0:7::1' }];

describe('twill-cni on an IPv6-only node', () => {
  it('gives a pod only its IPv6 address, gateway and routes, usable at once; CHECK passes; DEL twice leaves nothing', async () => {
    await run('ip', ['netns', 'exec', node.nodeNs, 'sysctl', '-qw', 'net.ipv4.ip_forward=0']);
    const pod = await node.pod('v1');
    const add = await node.call({ verb: 'ADD', containerId: 'v1', netns: pod });
    expect(add.code).toBe(0);
    expect(add.stderr).toBe('');
    const result = add.json as {
      cniVersion: string;
      ips: unknown;
      routes: unknown;
      interfaces: { name: string; sandbox?: string }[];
    };
    expect(result.ips).toEqual(IPS);
    expect(result.routes).toEqual([
      { dst: 'fd00::/48', gw: 'fd00:0:0:7::1' },
      { dst: '::/0', gw: 'fd00:0:0:7::1' },
    ]);
    expect(result.interfaces.map((i) => i.name)).toEqual(['cni0', expect.any(String), 'eth0']);
    expect(result.interfaces[2]?.sandbox).toBe(`/var/run/netns/${pod}`);

    // the pod: its IPv6 address (no IPv4 one), none of its addresses tentative right after ADD
    const addrs = await addrsOf(pod, 'eth0');
    expect(addrs.filter((a) => a.family === 'inet')).toEqual([]);
    expect(addrs.filter((a) => a.tentative || a.dadfailed)).toEqual([]);
    expect(addrs.filter((a) => a.family === 'inet6' && a.scope === 'global')).toEqual([
      expect.objectContaining({ local: 'fd00:0:0:7::2', prefixlen: 64 }),
    ]);
    expect(await routesOf(pod, '-4')).toEqual([]);
    const r6 = await routesOf(pod, '-6');
    for (const dst of ['fd00::/48', 'default'])
      expect(r6).toContainEqual(
        expect.objectContaining({ dst, gateway: 'fd00:0:0:7::1', dev: 'eth0' }),
      );
    const [eth0] = (await node.ipJson(pod, ['link', 'show', 'dev', 'eth0'])) as { mtu: number }[];
    expect(eth0?.mtu).toBe(1430);

    // the node: the IPv6 gateway (not tentative) and no IPv4 address on the bridge; IPv6
    // forwarding on, IPv4 forwarding left off
    const bridge = await addrsOf(node.nodeNs, 'cni0');
    expect(bridge.filter((a) => a.family === 'inet')).toEqual([]);
    expect(bridge).toContainEqual(
      expect.objectContaining({ family: 'inet6', local: 'fd00:0:0:7::1', prefixlen: 64 }),
    );
    expect(bridge.filter((a) => a.local === 'fd00:0:0:7::1' && a.tentative)).toEqual([]);
    expect(await sysctl(node.nodeNs, 'net.ipv6.conf.all.forwarding')).toBe('1');
    expect(await sysctl(node.nodeNs, 'net.ipv4.ip_forward')).toBe('0');

    // the store: the IPv6 address and its hint, as host-local with one IPv6 range writes them
    expect(await node.reserved()).toEqual(['fd00:0:0:7::2']);
    expect(await readFile(join(node.storeDir, 'fd00:0:0:7::2'), 'utf8')).toBe('v1\r\neth0');
    expect((await readdir(node.storeDir)).filter((n) => !n.startsWith('.')).sort()).toEqual([
      'fd00:0:0:7::2',
      'last_reserved_ip.0',
    ]);
    expect(await readFile(join(node.storeDir, 'last_reserved_ip.0'), 'utf8')).toBe('fd00:0:0:7::2');

    // the pod reaches its gateway on the bridge at once
    expect(await ping6(pod, 'fd00:0:0:7::1')).toContain('2 received');

    const check = (prev: unknown) =>
      node.call({
        verb: 'CHECK',
        containerId: 'v1',
        netns: pod,
        conf: node.conf('1.0.0', { prevResult: prev }),
      });
    expect(await check(result)).toMatchObject({ code: 0, stdout: '' });
    // a prevResult without the address, and the default route gone: both reported, IPv6 only
    await run('ip', ['-n', pod, '-6', 'route', 'del', 'default']);
    const failed = await check({ ...result, ips: [] });
    expect(failed.json).toMatchObject({ code: 105 });
    const msg = String(failed.json?.msg);
    expect(msg).toContain('prevResult gives eth0 [], the store holds fd00:0:0:7::2/64');
    expect(msg).toContain('no default route via fd00:0:0:7::1');
    expect(msg).not.toMatch(/10\.|IPv4|has addresses \[/);

    for (let i = 0; i < 2; i++)
      expect(await node.call({ verb: 'DEL', containerId: 'v1', netns: pod })).toMatchObject({
        code: 0,
        stdout: '',
      });
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
  });

  it('marks the only address of a 0.4.0 result with version 6', async () => {
    const pod = await node.pod('v04');
    const add = await node.call({
      verb: 'ADD',
      containerId: 'v04',
      netns: pod,
      conf: node.conf('0.4.0'),
    });
    expect(add.code).toBe(0);
    expect((add.json as { ips: unknown }).ips).toEqual([
      {
        version: '6',
        interface: 2,
        address: expect.stringMatching(/^fd00:0:0:7::/),
        gateway: 'fd00:0:0:7::1',
      },
    ]);
    // CHECK reads the 0.4.0 result too
    const check = await node.call({
      verb: 'CHECK',
      containerId: 'v04',
      netns: pod,
      conf: node.conf('0.4.0', { prevResult: add.json }),
    });
    expect(check).toMatchObject({ code: 0, stdout: '' });
    expect((await node.call({ verb: 'DEL', containerId: 'v04', netns: pod })).code).toBe(0);
  });

  it('lets two pods ping each other over IPv6 through the bridge', async () => {
    const [a, b] = [await node.pod('v6a'), await node.pod('v6b')];
    expect((await node.call({ verb: 'ADD', containerId: 'v6a', netns: a })).code).toBe(0);
    const addB = await node.call({ verb: 'ADD', containerId: 'v6b', netns: b });
    const ips = (addB.json as { ips: { address: string }[] }).ips;
    expect(ips).toHaveLength(1);
    const ipB = ips[0]?.address.split('/')[0] ?? '';
    expect(ipB).toMatch(/^fd00:0:0:7::[0-9a-f]+$/);
    expect(await ping6(a, ipB)).toContain('2 received');
    for (const [id, ns] of [
      ['v6a', a],
      ['v6b', b],
    ] as const)
      expect((await node.call({ verb: 'DEL', containerId: id, netns: ns })).code).toBe(0);
    expect(await node.reserved()).toEqual([]);
  });

  it('GC releases the IPv6 address of an attachment the runtime no longer knows, and keeps the others', async () => {
    const [a, b] = [await node.pod('gca'), await node.pod('gcb')];
    const addA = await node.call({ verb: 'ADD', containerId: 'gca', netns: a });
    const addB = await node.call({ verb: 'ADD', containerId: 'gcb', netns: b });
    expect([addA.code, addB.code]).toEqual([0, 0]);
    const ipOf = (json: unknown): string =>
      (json as { ips: { address: string }[] }).ips[0]?.address.split('/')[0] ?? '';
    // both reservations predate GC's grace period
    const past = new Date(Date.now() - 600_000);
    for (const name of await readdir(node.storeDir))
      if (!name.startsWith('.')) await utimes(join(node.storeDir, name), past, past);
    const gc = await node.call({
      verb: 'GC',
      conf: node.conf('1.1.0', {
        'cni.dev/valid-attachments': [{ containerID: 'gcb', ifname: 'eth0' }],
      }),
    });
    expect(gc).toMatchObject({ code: 0, stdout: '' });
    expect(await node.reserved()).toEqual([ipOf(addB.json)]);
    expect((await node.hostVeths()).length).toBe(1);
    expect((await node.call({ verb: 'DEL', containerId: 'gcb', netns: b })).code).toBe(0);
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
  });

  it('answers STATUS: ready (IPv4 addresses on the bridge are not looked at), 50 with another address of the IPv6 network or an inconsistent subnet.env', async () => {
    const status = () => node.call({ verb: 'STATUS', conf: node.conf('1.1.0') });
    expect(await status()).toMatchObject({ code: 0, stdout: '' });
    await run('ip', ['-n', node.nodeNs, 'addr', 'add', '10.244.9.1/24', 'dev', 'cni0']);
    try {
      expect(await status()).toMatchObject({ code: 0, stdout: '' });
    } finally {
      await run('ip', ['-n', node.nodeNs, 'addr', 'del', '10.244.9.1/24', 'dev', 'cni0']);
    }
    await run('ip', ['-n', node.nodeNs, 'addr', 'add', 'fd00:0:0:9::1/64', 'dev', 'cni0', 'nodad']);
    try {
      expect((await status()).json).toMatchObject({
        code: 50,
        msg: expect.stringContaining(
          'gives the node the IPv6 subnet fd00:0:0:7::/64 (gateway fd00:0:0:7::1/64), but cni0 carries fd00:0:0:9::1/64 from the IPv6 cluster network fd00::/48',
        ) as unknown,
      });
    } finally {
      await run('ip', ['-n', node.nodeNs, 'addr', 'del', 'fd00:0:0:9::1/64', 'dev', 'cni0']);
    }
    expect(await status()).toMatchObject({ code: 0, stdout: '' });
    await node.writeSubnetEnv(
      'FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd01:0:0:7::1/64\nFLANNEL_MTU=1430\nFLANNEL_IPMASQ=false\n',
    );
    try {
      expect((await status()).json).toMatchObject({
        code: 50,
        msg: `twill is not ready: ${node.subnetFile}: FLANNEL_IPV6_SUBNET fd01:0:0:7::/64 is not inside FLANNEL_IPV6_NETWORK fd00::/48`,
      });
    } finally {
      await node.writeSubnetEnv();
    }
    expect(await status()).toMatchObject({ code: 0, stdout: '' });
  });
});

describe('twill-cni on an IPv6-only node with bad input', () => {
  const V6 = 'FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:7::1/64\n';
  const TAIL = 'FLANNEL_MTU=1430\nFLANNEL_IPMASQ=false\n';
  const rows: readonly {
    name: string;
    verb?: string;
    env?: Record<string, string | undefined>;
    conf?: () => unknown;
    subnetEnv?: string;
    code: number;
    msg: string;
  }[] = [
    {
      name: 'CNI_NETNS missing',
      env: { CNI_NETNS: undefined },
      code: 4,
      msg: 'CNI_NETNS is not set; ADD needs it',
    },
    {
      name: 'a prevResult on ADD',
      conf: () => node.conf('1.0.0', { prevResult: { cniVersion: '1.0.0', ips: [] } }),
      code: 7,
      msg: 'must be the first plugin of the conflist',
    },
    {
      name: 'CHECK without prevResult',
      verb: 'CHECK',
      code: 7,
      msg: 'CHECK needs "prevResult"',
    },
    {
      name: 'CHECK of an attachment without an address',
      verb: 'CHECK',
      conf: () => node.conf('1.0.0', { prevResult: { cniVersion: '1.0.0', ips: [] } }),
      code: 105,
      msg: 'CHECK: no address is reserved in',
    },
    {
      name: 'FLANNEL_NETWORK without FLANNEL_SUBNET',
      subnetEnv: `FLANNEL_NETWORK=10.244.0.0/16\n${V6}${TAIL}`,
      code: 102,
      msg: 'FLANNEL_SUBNET is missing: FLANNEL_NETWORK and FLANNEL_SUBNET must be given together',
    },
    {
      name: 'neither pair',
      subnetEnv: TAIL,
      code: 102,
      msg: 'a node needs the subnet of at least one family',
    },
    {
      name: 'FLANNEL_IPV6_SUBNET without FLANNEL_IPV6_NETWORK',
      subnetEnv: `FLANNEL_IPV6_SUBNET=fd00:0:0:7::1/64\n${TAIL}`,
      code: 102,
      msg: 'FLANNEL_IPV6_NETWORK is missing: FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET must be given together',
    },
  ];

  it.each(rows)('$name → code $code', async (row) => {
    const pod = await node.pod(`bad${rows.indexOf(row)}`);
    if (row.subnetEnv) await node.writeSubnetEnv(row.subnetEnv);
    try {
      const answer = await node.call({
        verb: row.verb ?? 'ADD',
        containerId: 'bad',
        netns: pod,
        conf: row.conf?.() ?? node.conf(),
        ...(row.env ? { env: row.env } : {}),
      });
      expect(answer.code).toBe(1);
      expect(answer.stdout.trim().split('\n')).toHaveLength(1);
      expect(answer.json).toMatchObject({
        cniVersion: '1.0.0',
        code: row.code,
        msg: expect.stringContaining(row.msg) as unknown,
      });
    } finally {
      if (row.subnetEnv) await node.writeSubnetEnv();
    }
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
    expect(JSON.stringify(await node.ipJson(pod, ['link', 'show']))).not.toContain('eth0');
  });

  it('answers 103 once the IPv6 subnet is full, keeping the pods it has', async () => {
    // a /126: the gateway ::1, then ::2 and ::3 for pods
    await node.writeSubnetEnv(
      `FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:7::1/126\n${TAIL}`,
    );
    const pods = [await node.pod('full1'), await node.pod('full2'), await node.pod('full3')];
    try {
      for (const [i, pod] of pods.slice(0, 2).entries())
        expect((await node.call({ verb: 'ADD', containerId: `full${i}`, netns: pod })).code).toBe(
          0,
        );
      const answer = await node.call({ verb: 'ADD', containerId: 'full2', netns: pods[2] });
      expect(answer.json).toMatchObject({
        code: 103,
        msg: expect.stringContaining(
          "all 2 addresses of the node's IPv6 subnet are reserved",
        ) as unknown,
      });
      expect(await node.reserved()).toEqual(['fd00:0:0:7::2', 'fd00:0:0:7::3']);
      expect(await node.hostVeths()).toHaveLength(2);
    } finally {
      for (const [i, pod] of pods.entries())
        await node.call({ verb: 'DEL', containerId: `full${i}`, netns: pod });
      await node.writeSubnetEnv();
    }
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
  });

  it('rolls back the IPv6 address and the veth when the pod side fails half way', async () => {
    const busy = await node.pod('busy');
    await run('ip', ['-n', busy, 'link', 'add', 'in0', 'type', 'veth', 'peer', 'name', 'in1']);
    for (const dev of ['in0', 'in1']) await run('ip', ['-n', busy, 'link', 'set', dev, 'up']);
    // the IPv6 network route the pod batch will find in its way
    await run('ip', ['-n', busy, 'route', 'add', 'fd00::/48', 'dev', 'in0']);
    const answer = await node.call({ verb: 'ADD', containerId: 'busy', netns: busy });
    expect(answer.code).toBe(1);
    expect(answer.json).toMatchObject({ code: 101, msg: expect.stringContaining('File exists') });
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
    expect(JSON.stringify(await node.ipJson(busy, ['link', 'show']))).not.toContain('eth0');
  });
});
