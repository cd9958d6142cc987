// The twill-cni executable as a runtime drives it, in namespaces made here:
// a new user's first pod (1.0.0 conflist entry, ADD → CHECK → DEL → DEL),
// two pods pinging through the bridge, a second ADD for the same container,
// DEL once the netns is gone, STATUS, and no node on PATH. And a dual-stack
// node (subnet.env with the IPv6 pair): one ADD gives both families (IPv6
// usable at once, not "tentative"), CHECK, DEL, GC and STATUS cover both,
// pods ping each other over IPv6, a pod whose netns has IPv6 turned off.
import { mkdir, mkdtemp, readFile, readdir, rm, symlink, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import { CniNode } from '../helpers/cni.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const node = new CniNode();
const dual = new CniNode({
  subnet: '10.244.4.0/24',
  network6: 'fd00::/48',
  subnet6: 'fd00:0:0:4::/64',
});

/** What libcni hands the first plugin of this conflist (name and cniVersion filled in). */
function conflistEntry(): Record<string, unknown> {
  const conflist = {
    cniVersion: '1.0.0',
    name: 'twnet',
    plugins: [
      {
        type: 'twill',
        subnetFile: node.subnetFile,
        dataDir: join(node.dir, 'ipam'),
        logFile: join(node.dir, 'cni.log'),
      },
    ],
  };
  return { cniVersion: conflist.cniVersion, name: conflist.name, ...conflist.plugins[0] };
}

beforeAll(async () => {
  await sweepStaleNetns();
  await node.setup();
  await dual.setup('dual');
});

afterAll(async () => {
  await node.destroy();
  await dual.destroy();
});

describe('twill-cni as a new user runs it', () => {
  it('gives a pod an address, a default route via cni0 and a valid result; CHECK passes; DEL twice leaves nothing', async () => {
    const pod = await node.pod('p1');
    const conf = conflistEntry();
    const add = await node.call({ verb: 'ADD', containerId: 'first', netns: pod, conf });
    expect(add.code).toBe(0);
    expect(add.stderr).toBe('');
    const result = add.json as {
      cniVersion: string;
      ips: { address: string; gateway: string; interface: number }[];
      interfaces: { name: string; sandbox?: string }[];
    };
    expect(result.cniVersion).toBe('1.0.0');
    expect(result.ips).toEqual([{ interface: 2, address: '10.244.3.2/24', gateway: '10.244.3.1' }]);
    expect(result.interfaces[2]).toMatchObject({ name: 'eth0', sandbox: `/var/run/netns/${pod}` });
    const routes = (await node.ipJson(pod, ['route', 'show'])) as {
      dst: string;
      gateway?: string;
      dev: string;
    }[];
    expect(routes).toContainEqual(
      expect.objectContaining({ dst: 'default', gateway: '10.244.3.1', dev: 'eth0' }),
    );
    const bridge = (await node.ipJson(node.nodeNs, ['addr', 'show', 'dev', 'cni0'])) as {
      addr_info: { local: string }[];
    }[];
    expect(bridge[0]?.addr_info.map((a) => a.local)).toContain('10.244.3.1');

    const check = await node.call({
      verb: 'CHECK',
      containerId: 'first',
      netns: pod,
      conf: { ...conf, prevResult: result },
    });
    expect(check).toMatchObject({ code: 0, stdout: '' });
    for (let i = 0; i < 2; i++) {
      expect(
        await node.call({ verb: 'DEL', containerId: 'first', netns: pod, conf }),
      ).toMatchObject({ code: 0, stdout: '' });
    }
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
    const log = await readFile(join(node.dir, 'cni.log'), 'utf8');
    const done = log
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { verb: string; msg: string })
      .filter((l) => l.msg === 'done');
    expect(done.map((l) => l.verb)).toEqual(['ADD', 'CHECK', 'DEL', 'DEL']);
  });

  it('lets two pods on the node ping each other through the bridge', async () => {
    const [a, b] = [await node.pod('pa'), await node.pod('pb')];
    const addA = await node.call({ verb: 'ADD', containerId: 'ping-a', netns: a });
    const addB = await node.call({ verb: 'ADD', containerId: 'ping-b', netns: b });
    const ipB = (addB.json as { ips: { address: string }[] }).ips[0]?.address.split('/')[0] ?? '';
    expect(addA.code).toBe(0);
    expect(ipB).toMatch(/^10\.244\.3\.\d+$/);
    const ping = await run('ip', [
      'netns',
      'exec',
      a,
      'ping',
      '-c',
      '2',
      '-i',
      '0.2',
      '-W',
      '2',
      ipB,
    ]);
    expect(ping.stdout).toContain('2 received');
    for (const [id, ns] of [
      ['ping-a', a],
      ['ping-b', b],
    ] as const)
      expect((await node.call({ verb: 'DEL', containerId: id, netns: ns })).code).toBe(0);
  });

  it('refuses a second ADD for the same container and leaves the first one working', async () => {
    const pod = await node.pod('twice');
    const first = await node.call({ verb: 'ADD', containerId: 'twice', netns: pod });
    const second = await node.call({ verb: 'ADD', containerId: 'twice', netns: pod });
    expect(second.code).toBe(1);
    expect(second.json).toMatchObject({
      code: 104,
      msg: expect.stringContaining('already exists'),
    });
    expect((await node.reserved()).length).toBe(1);
    expect(
      (
        await node.call({
          verb: 'CHECK',
          containerId: 'twice',
          netns: pod,
          conf: node.conf('1.0.0', { prevResult: first.json }),
        })
      ).code,
    ).toBe(0);
    expect((await node.call({ verb: 'DEL', containerId: 'twice', netns: pod })).code).toBe(0);
  });

  it('deletes after the netns is gone, and without CNI_NETNS', async () => {
    const pod = await node.pod('gone');
    expect((await node.call({ verb: 'ADD', containerId: 'gone', netns: pod })).code).toBe(0);
    await run('ip', ['netns', 'del', pod]);
    expect((await node.call({ verb: 'DEL', containerId: 'gone', netns: pod })).code).toBe(0);
    expect((await node.call({ verb: 'DEL', containerId: 'gone' })).code).toBe(0);
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
  });

  it('answers STATUS: 50 without subnet.env or with an unready daemon, success otherwise', async () => {
    // two readiness endpoints inside the node namespace: one unready (503), one ready
    const server = (port: number, status: number): string =>
      `require('node:http').createServer((q, r) => r.writeHead(${status}).end()).listen(${port}, '127.0.0.1')`;
    node.lab.spawn(
      node.nodeNs,
      [process.execPath, '-e', server(18181, 503)],
      join(node.dir, 'ready-503.log'),
    );
    node.lab.spawn(
      node.nodeNs,
      [process.execPath, '-e', server(18182, 200)],
      join(node.dir, 'ready-200.log'),
    );
    const status = (extra: Record<string, unknown> = {}) =>
      node.call({ verb: 'STATUS', conf: node.conf('1.1.0', extra) });
    expect(await status()).toMatchObject({ code: 0, stdout: '' });
    await waitFor(
      async () => (await status({ readyUrl: 'http://127.0.0.1:18182/readyz' })).code === 0,
      { timeoutMs: 5000, what: 'ready endpoint' },
    );
    expect((await status({ readyUrl: 'http://127.0.0.1:18181/readyz' })).json).toMatchObject({
      code: 50,
      msg: 'twill is not ready: http://127.0.0.1:18181/readyz answered 503',
    });
    expect((await status({ readyUrl: 'http://127.0.0.1:18183/readyz' })).json).toMatchObject({
      code: 50,
      msg: expect.stringContaining('did not answer'),
    });
    expect((await status({ subnetFile: join(node.dir, 'missing.env') })).json).toMatchObject({
      code: 50,
      msg: expect.stringContaining('missing.env does not exist yet'),
    });
  });

  it('runs with no node on PATH', async () => {
    const bin = await mkdtemp(join(tmpdir(), 'twill-path-'));
    try {
      await mkdir(join(bin, 'b'));
      for (const tool of ['ip', 'nsenter']) {
        const where = (await run('sh', ['-c', `command -v ${tool}`])).stdout.trim();
        await symlink(where, join(bin, 'b', tool));
      }
      const pod = await node.pod('nonode');
      const path = join(bin, 'b');
      expect(await node.call({ verb: 'VERSION', path, conf: {} })).toMatchObject({
        code: 0,
        json: { cniVersion: '1.1.0' },
      });
      expect((await node.call({ verb: 'ADD', containerId: 'nonode', netns: pod, path })).code).toBe(
        0,
      );
      expect((await node.call({ verb: 'DEL', containerId: 'nonode', netns: pod, path })).code).toBe(
        0,
      );
    } finally {
      await rm(bin, { recursive: true, force: true });
    }
  });
});

interface Addr {
  family: string;
  local: string;
  prefixlen: number;
  scope: string;
  tentative?: boolean;
  dadfailed?: boolean;
  nodad?: boolean;
}

async function addrsOf(n: CniNode, ns: string, dev: string): Promise<Addr[]> {
  const [link] = (await n.ipJson(ns, ['addr', 'show', 'dev', dev])) as { addr_info: Addr[] }[];
  return link?.addr_info ?? [];
}

async function routes6(ns: string): Promise<{ dst: string; gateway?: string; dev: string }[]> {
  return JSON.parse((await run('ip', ['-n', ns, '-6', '-json', 'route', 'show'])).stdout) as {
    dst: string;
    gateway?: string;
    dev: string;
  }[];
}

const DUAL_IPS = [
  { interface: 2, address: '10.244.4.2/24', gateway: '10.244.4.1' },
  { interface: 2, address: 'fd00:0:0:4::2/64', gateway: 'fd00:0:0:4::1' },
];

describe('twill-cni on a dual-stack node', () => {
  it('gives a pod an address of each family, both gateways and default routes, IPv6 usable at once; CHECK, DEL', async () => {
    const pod = await dual.pod('d1');
    const add = await dual.call({ verb: 'ADD', containerId: 'd1', netns: pod });
    expect(add.code).toBe(0);
    // right after ADD, no address of the pod is tentative (nodad, accept_dad=0 before link up)
    const addrs = await addrsOf(dual, pod, 'eth0');
    expect(addrs.filter((a) => a.tentative || a.dadfailed)).toEqual([]);
    expect(addrs).toContainEqual(
      expect.objectContaining({ family: 'inet6', local: 'fd00:0:0:4::2', prefixlen: 64 }),
    );
    expect(addrs).toContainEqual(
      expect.objectContaining({ family: 'inet', local: '10.244.4.2', prefixlen: 24 }),
    );
    const result = add.json as { ips: unknown; routes: unknown; interfaces: { name: string }[] };
    expect(result.ips).toEqual(DUAL_IPS);
    expect(result.routes).toEqual([
      { dst: '10.244.0.0/16', gw: '10.244.4.1' },
      { dst: '0.0.0.0/0', gw: '10.244.4.1' },
      { dst: 'fd00::/48', gw: 'fd00:0:0:4::1' },
      { dst: '::/0', gw: 'fd00:0:0:4::1' },
    ]);
    expect(result.interfaces[2]?.name).toBe('eth0');
    const r6 = await routes6(pod);
    for (const dst of ['fd00::/48', 'default'])
      expect(r6).toContainEqual(
        expect.objectContaining({ dst, gateway: 'fd00:0:0:4::1', dev: 'eth0' }),
      );
    const bridge = await addrsOf(dual, dual.nodeNs, 'cni0');
    expect(bridge).toContainEqual(
      expect.objectContaining({ family: 'inet6', local: 'fd00:0:0:4::1', prefixlen: 64 }),
    );
    expect(bridge.filter((a) => a.local === 'fd00:0:0:4::1' && a.tentative)).toEqual([]);
    expect(await dual.reserved()).toEqual(['10.244.4.2', 'fd00:0:0:4::2']);
    expect(await readFile(join(dual.storeDir, 'fd00:0:0:4::2'), 'utf8')).toBe('d1\r\neth0');
    expect(await readFile(join(dual.storeDir, 'last_reserved_ip.1'), 'utf8')).toBe('fd00:0:0:4::2');
    // the pod reaches its IPv6 gateway on the bridge at once
    const ping = await run('ip', [
      'netns',
      'exec',
      pod,
      'ping',
      '-6',
      '-c',
      '1',
      '-W',
      '2',
      'fd00:0:0:4::1',
    ]);
    expect(ping.stdout).toContain('1 received');

    const check = (prev: unknown) =>
      dual.call({
        verb: 'CHECK',
        containerId: 'd1',
        netns: pod,
        conf: dual.conf('1.0.0', { prevResult: prev }),
      });
    expect(await check(result)).toMatchObject({ code: 0, stdout: '' });
    // a prevResult without the IPv6 address, and the IPv6 default route gone: both reported
    await run('ip', ['-n', pod, '-6', 'route', 'del', 'default']);
    const failed = await check({ ...result, ips: [DUAL_IPS[0]] });
    expect(failed.json).toMatchObject({ code: 105 });
    expect(String(failed.json?.msg)).toContain('the store holds fd00:0:0:4::2/64');
    expect(String(failed.json?.msg)).toContain('no default route via fd00:0:0:4::1');
    expect(String(failed.json?.msg)).not.toContain('10.244.4.1');
    for (let i = 0; i < 2; i++)
      expect(await dual.call({ verb: 'DEL', containerId: 'd1', netns: pod })).toMatchObject({
        code: 0,
        stdout: '',
      });
    expect(await dual.reserved()).toEqual([]);
    expect(await dual.hostVeths()).toEqual([]);
  });

  it('marks the IPv6 address in a 0.4.0 result with version 6', async () => {
    const pod = await dual.pod('d04');
    const add = await dual.call({
      verb: 'ADD',
      containerId: 'd04',
      netns: pod,
      conf: dual.conf('0.4.0'),
    });
    const ips = (add.json as { ips: { version: string; address: string }[] }).ips;
    expect(ips.map((i) => [i.version, i.address.includes(':')])).toEqual([
      ['4', false],
      ['6', true],
    ]);
    expect((await dual.call({ verb: 'DEL', containerId: 'd04', netns: pod })).code).toBe(0);
  });

  it('lets two pods ping each other over IPv6 through the bridge', async () => {
    const [a, b] = [await dual.pod('d6a'), await dual.pod('d6b')];
    expect((await dual.call({ verb: 'ADD', containerId: 'd6a', netns: a })).code).toBe(0);
    const addB = await dual.call({ verb: 'ADD', containerId: 'd6b', netns: b });
    const ipB = (addB.json as { ips: { address: string }[] }).ips[1]?.address.split('/')[0] ?? '';
    expect(ipB).toMatch(/^fd00:0:0:4::[0-9a-f]+$/);
    const ping = await run('ip', [
      'netns',
      'exec',
      a,
      'ping',
      '-6',
      '-c',
      '2',
      '-i',
      '0.2',
      '-W',
      '2',
      ipB,
    ]);
    expect(ping.stdout).toContain('2 received');
    for (const [id, ns] of [
      ['d6a', a],
      ['d6b', b],
    ] as const)
      expect((await dual.call({ verb: 'DEL', containerId: id, netns: ns })).code).toBe(0);
    expect(await dual.reserved()).toEqual([]);
  });

  it('turns IPv6 on in a pod netns where it is off, and only there', async () => {
    const pod = await dual.pod('off6');
    for (const key of ['all', 'default'])
      await run('ip', [
        'netns',
        'exec',
        pod,
        'sysctl',
        '-qw',
        `net.ipv6.conf.${key}.disable_ipv6=1`,
      ]);
    const nodeBefore = (
      await run('ip', [
        'netns',
        'exec',
        dual.nodeNs,
        'sysctl',
        '-n',
        'net.ipv6.conf.all.accept_dad',
      ])
    ).stdout;
    const add = await dual.call({ verb: 'ADD', containerId: 'off6', netns: pod });
    expect(add.code).toBe(0);
    expect((add.json as { ips: unknown }).ips).toHaveLength(2);
    expect(
      (await addrsOf(dual, pod, 'eth0')).filter(
        (a) => a.family === 'inet6' && a.scope === 'global',
      ),
    ).toEqual([expect.objectContaining({ prefixlen: 64 })]);
    const sysctl = async (ns: string, key: string): Promise<string> =>
      (await run('ip', ['netns', 'exec', ns, 'sysctl', '-n', key])).stdout.trim();
    expect(await sysctl(pod, 'net.ipv6.conf.all.disable_ipv6')).toBe('0');
    expect(await sysctl(pod, 'net.ipv6.conf.eth0.accept_dad')).toBe('0');
    expect(
      (
        await run('ip', [
          'netns',
          'exec',
          dual.nodeNs,
          'sysctl',
          '-n',
          'net.ipv6.conf.all.accept_dad',
        ])
      ).stdout,
    ).toBe(nodeBefore);
    // the gateway bridge forwards IPv6 too
    expect(await sysctl(dual.nodeNs, 'net.ipv6.conf.all.forwarding')).toBe('1');
    expect((await dual.call({ verb: 'DEL', containerId: 'off6', netns: pod })).code).toBe(0);
  });

  it('GC releases both addresses of an attachment the runtime no longer knows, and keeps the others', async () => {
    const [a, b] = [await dual.pod('gca'), await dual.pod('gcb')];
    const addA = await dual.call({ verb: 'ADD', containerId: 'gca', netns: a });
    const addB = await dual.call({ verb: 'ADD', containerId: 'gcb', netns: b });
    expect([addA.code, addB.code]).toEqual([0, 0]);
    const ipsOf = (json: unknown): string[] =>
      (json as { ips: { address: string }[] }).ips.map((i) => i.address.split('/')[0] ?? '');
    const [ipsA, ipsB] = [ipsOf(addA.json), ipsOf(addB.json)];
    expect(ipsA).toHaveLength(2);
    // both reservations predate GC's grace period
    const past = new Date(Date.now() - 600_000);
    for (const name of await readdir(dual.storeDir))
      if (!name.startsWith('.')) await utimes(join(dual.storeDir, name), past, past);
    const gc = await dual.call({
      verb: 'GC',
      conf: dual.conf('1.1.0', {
        'cni.dev/valid-attachments': [{ containerID: 'gcb', ifname: 'eth0' }],
      }),
    });
    expect(gc).toMatchObject({ code: 0, stdout: '' });
    expect(await dual.reserved()).toEqual([...ipsB].sort());
    expect((await dual.hostVeths()).length).toBe(1);
    expect((await dual.call({ verb: 'DEL', containerId: 'gcb', netns: b })).code).toBe(0);
    expect(await dual.reserved()).toEqual([]);
  });

  it('answers STATUS: ready, and 50 once the bridge carries another address of the IPv6 network', async () => {
    const status = () => dual.call({ verb: 'STATUS', conf: dual.conf('1.1.0') });
    expect(await status()).toMatchObject({ code: 0, stdout: '' });
    await run('ip', ['-n', dual.nodeNs, 'addr', 'add', 'fd00:0:0:9::1/64', 'dev', 'cni0', 'nodad']);
    try {
      expect((await status()).json).toMatchObject({
        code: 50,
        msg: expect.stringContaining(
          'gives the node the IPv6 subnet fd00:0:0:4::/64 (gateway fd00:0:0:4::1/64), but cni0 carries fd00:0:0:9::1/64 from the IPv6 cluster network fd00::/48',
        ),
      });
    } finally {
      await run('ip', ['-n', dual.nodeNs, 'addr', 'del', 'fd00:0:0:9::1/64', 'dev', 'cni0']);
    }
    expect(await status()).toMatchObject({ code: 0, stdout: '' });
  });
});
