// The etcd password against a real etcd with auth enabled (root user), over
// plain http inside a test network namespace: from --etcd-password-file with
// --etcd-allow-insecure-password twill leases (so the password works);
// without the opt-in it stops at start-up with exit code 2; credentials in an
// endpoint URL work and are never printed; and the password appears in no
// line twill writes, on a succeeding run or a failing one.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { startEtcd, type EtcdServer } from '../../lab/kit/etcd.ts';
import { NetnsLab, sweepStaleNetns } from '../../lab/kit/netns.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';
import { exited, stopProcess } from '../../lab/kit/process.ts';

const MAIN = resolve(import.meta.dirname, '../../src/cli/main.ts');
const PASSWORD = 'Tw1ll-s3cret-pw';
const lab = new NetnsLab();
let ns: string;
let etcd: EtcdServer;
let dir: string;
let passwordFile: string;

function startTwill(name: string, extra: string[]): ReturnType<NetnsLab['spawn']> {
  const argv = [
    process.execPath,
    MAIN,
    'run',
    '--etcd-prefix',
    '/auth',
    '--subnet-file',
    join(dir, `${name}.env`),
    '--node-name',
    name,
    '--iface',
    'eth0',
    '--log-level',
    'debug',
    ...extra,
  ];
  const child = lab.spawn(ns, argv, join(dir, `${name}.log`));
  onTestFinished(() => stopProcess(child)); // a failed assertion must not leave it holding the port
  return child;
}

const logOf = (name: string): Promise<string> =>
  readFile(join(dir, `${name}.log`), 'utf8').catch(() => '');
const etcdctl = (...args: string[]): Promise<string> =>
  lab.exec(ns, 'etcdctl', ['--endpoints', etcd.endpoint, ...args]);
const withUrlCredentials = (endpoint: string): string =>
  endpoint.replace('http://', `http://root:${encodeURIComponent(PASSWORD)}@`);

beforeAll(async () => {
  await sweepStaleNetns();
  dir = await mkdtemp(join(tmpdir(), 'twill-auth-'));
  passwordFile = join(dir, 'etcd-password');
  await writeFile(passwordFile, `${PASSWORD}\n`, { mode: 0o600 });
  ns = await lab.add('auth');
  await lab.link(
    { ns, dev: 'eth0', cidr: '10.126.0.2/24' },
    { ns: await lab.add('auth-peer'), dev: 'eth0', cidr: '10.126.0.1/24' },
  );
  etcd = await startEtcd({ netns: ns });
  await etcdctl('put', '/auth/config', '{"Network":"10.247.0.0/16","Backend":{"Type":"host-gw"}}');
  await etcdctl('user', 'add', 'root', '--new-user-password', PASSWORD);
  await etcdctl('auth', 'enable');
});

afterAll(async () => {
  await etcd?.destroy();
  await lab.destroy();
  await rm(dir, { recursive: true, force: true });
});

describe('the etcd password', () => {
  it('is read from --etcd-password-file and works over http with --etcd-allow-insecure-password', async () => {
    const twill = startTwill('file', [
      '--etcd-endpoints',
      etcd.endpoint,
      '--etcd-username',
      'root',
      '--etcd-password-file',
      passwordFile,
      '--etcd-allow-insecure-password',
    ]);
    await waitFor(async () => (await logOf('file')).includes('lease acquired'), {
      timeoutMs: slowBound(5_000),
      what: 'lease acquired',
    });
    expect(
      await etcdctl(
        '--user',
        `root:${PASSWORD}`,
        'get',
        '--prefix',
        '--keys-only',
        '/auth/subnets/',
      ),
    ).toMatch(/\/auth\/subnets\/10\.247\.\d+\.0-24/);
    expect(await readFile(join(dir, 'file.env'), 'utf8')).toContain(
      'FLANNEL_NETWORK=10.247.0.0/16\n',
    );
    await stopProcess(twill);
    expect(twill.exitCode).toBe(0);
    expect(await logOf('file')).not.toContain(PASSWORD);
  });

  it('is refused over http without the opt-in: exit code 2 and a message saying what to do', async () => {
    for (const [name, flags] of [
      [
        'refused-file',
        [
          '--etcd-endpoints',
          etcd.endpoint,
          '--etcd-username',
          'root',
          '--etcd-password-file',
          passwordFile,
        ],
      ],
      [
        'refused-flag',
        ['--etcd-endpoints', etcd.endpoint, '--etcd-username', 'root', '--etcd-password', PASSWORD],
      ],
      ['refused-url', ['--etcd-endpoints', withUrlCredentials(etcd.endpoint)]],
    ] as const) {
      const twill = startTwill(name, [...flags]);
      expect(await exited(twill)).toBe(2);
      const out = await logOf(name);
      expect(out).toContain(
        `twill: --etcd-endpoints "${etcd.endpoint}": refusing to send the etcd password over plain http, where anyone on the path can read it; use https:// endpoints (with --etcd-cafile), or pass --etcd-allow-insecure-password to send it in clear text anyway`,
      );
      expect(out).not.toContain(PASSWORD);
    }
  });

  it('is taken from an endpoint URL, which is never printed with it', async () => {
    const twill = startTwill('url', [
      '--etcd-endpoints',
      withUrlCredentials(etcd.endpoint),
      '--etcd-allow-insecure-password',
      '--public-ip',
      '10.126.0.3',
    ]);
    await waitFor(async () => (await logOf('url')).includes('lease acquired'), {
      timeoutMs: slowBound(5_000),
      what: 'lease acquired',
    });
    await stopProcess(twill);
    const log = await logOf('url');
    expect(log).toContain(`"store":"etcd ${etcd.endpoint} `);
    expect(log).not.toContain(PASSWORD);
    expect(log).not.toContain(encodeURIComponent(PASSWORD));
  });

  it('never appears while twill fails: a wrong endpoint, a wrong password', async () => {
    const wrongPort = etcd.endpoint.replace(/:\d+$/, ':2');
    const unreachable = startTwill('unreachable', [
      '--etcd-endpoints',
      withUrlCredentials(wrongPort),
      '--etcd-allow-insecure-password',
    ]);
    const wrongFile = join(dir, 'wrong-password');
    await writeFile(wrongFile, 'Wr0ng-password-xyz\n');
    const wrong = startTwill('wrong', [
      '--etcd-endpoints',
      etcd.endpoint,
      '--etcd-username',
      'root',
      '--etcd-password-file',
      wrongFile,
      '--etcd-allow-insecure-password',
    ]);
    await waitFor(
      async () => (await logOf('unreachable')).split('lease store unreachable').length > 2,
      { timeoutMs: slowBound(10_000), what: 'unreachable: retries' },
    );
    await waitFor(async () => (await logOf('wrong')).split('lease store unreachable').length > 2, {
      timeoutMs: slowBound(10_000),
      what: 'wrong password: retries',
    });
    unreachable.kill('SIGTERM');
    wrong.kill('SIGTERM');
    expect(await exited(unreachable)).toBe(0);
    expect(await exited(wrong)).toBe(0);
    const u = await logOf('unreachable');
    expect(u).not.toContain(PASSWORD);
    expect(u).not.toContain(encodeURIComponent(PASSWORD));
    expect(u).toContain(`"store":"etcd ${wrongPort} `);
    const w = await logOf('wrong');
    expect(w).toContain('authentication failed');
    expect(w).not.toContain('Wr0ng-password-xyz');
  });
});
