// The twill-cni executable as a runtime drives it, in namespaces made here:
// a new user's first pod (1.0.0 conflist entry, ADD → CHECK → DEL → DEL),
// two pods pinging through the bridge, a second ADD for the same container,
// DEL once the netns is gone, STATUS, and no node on PATH.
import { mkdir, mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import { CniNode } from '../helpers/cni.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const node = new CniNode();

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
});

afterAll(async () => {
  await node.destroy();
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
