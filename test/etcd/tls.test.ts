// `twill run` as a real process against a real etcd that speaks only TLS and
// demands client certificates (--client-cert-auth), both in one test network
// namespace: with --etcd-cafile/--etcd-certfile/--etcd-keyfile it leases and
// writes subnet.env; with no client certificate, one from a CA etcd does not
// trust, or no CA for etcd's own certificate it keeps retrying, says which
// certificate is wrong, answers /healthz 200 and /readyz 503.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { startTlsEtcd, type TlsEtcdServer } from '../helpers/etcd-tls.ts';
import { NetnsLab, sweepStaleNetns } from '../../lab/kit/netns.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';
import { exited, stopProcess } from '../../lab/kit/process.ts';

const MAIN = resolve(import.meta.dirname, '../../src/cli/main.ts');
const PORT = 9820;
const lab = new NetnsLab();
let ns: string;
let etcd: TlsEtcdServer;
let dir: string;

function startTwill(name: string, extra: string[]): ReturnType<NetnsLab['spawn']> {
  const argv = [
    process.execPath,
    MAIN,
    'run',
    '--etcd-endpoints',
    etcd.endpoint,
    '--etcd-prefix',
    '/tls',
    '--subnet-file',
    join(dir, `${name}.env`),
    '--node-name',
    name,
    '--iface',
    'eth0',
    '--healthz-ip',
    '127.0.0.1',
    '--healthz-port',
    String(PORT),
    ...extra,
  ];
  const child = lab.spawn(ns, argv, join(dir, `${name}.log`));
  onTestFinished(() => stopProcess(child)); // a failed assertion must not leave it holding the port
  return child;
}

const logOf = (name: string): Promise<string> =>
  readFile(join(dir, `${name}.log`), 'utf8').catch(() => '');

/** GET on the health endpoint inside the namespace. */
async function health(path: string): Promise<{ status: number; body: string }> {
  const out = await lab
    .exec(ns, 'curl', ['-s', '-m', '3', '-w', '\n%{http_code}', `http://127.0.0.1:${PORT}${path}`])
    .catch(() => '\n0');
  const nl = out.lastIndexOf('\n');
  return { status: Number(out.slice(nl + 1)), body: out.slice(0, nl) };
}

beforeAll(async () => {
  await sweepStaleNetns();
  dir = await mkdtemp(join(tmpdir(), 'twill-tls-'));
  ns = await lab.add('tls');
  // an underlay for twill to pick (the other end's namespace is otherwise unused)
  await lab.link(
    { ns, dev: 'eth0', cidr: '10.125.0.2/24' },
    { ns: await lab.add('tls-peer'), dev: 'eth0', cidr: '10.125.0.1/24' },
  );
  etcd = await startTlsEtcd({ netns: ns });
  await etcd.etcdctl(
    'put',
    '/tls/config',
    '{"Network":"10.246.0.0/16","Backend":{"Type":"host-gw"}}',
  );
});

afterAll(async () => {
  await etcd?.destroy();
  await lab.destroy();
  await rm(dir, { recursive: true, force: true });
});

describe('twill run against etcd with --client-cert-auth', () => {
  it('leases and writes subnet.env with --etcd-cafile, --etcd-certfile and --etcd-keyfile', async () => {
    const f = etcd.files;
    const twill = startTwill('good', [
      '--etcd-cafile',
      f.ca,
      '--etcd-certfile',
      f.client.cert,
      '--etcd-keyfile',
      f.client.key,
    ]);
    await waitFor(async () => (await logOf('good')).includes('lease acquired'), {
      timeoutMs: slowBound(5_000),
      what: 'lease acquired',
    });
    const keys = (await etcd.etcdctl('get', '--prefix', '--keys-only', '/tls/subnets/'))
      .split('\n')
      .filter(Boolean);
    expect(keys).toHaveLength(1);
    expect(await readFile(join(dir, 'good.env'), 'utf8')).toMatch(
      /^FLANNEL_NETWORK=10\.246\.0\.0\/16\nFLANNEL_SUBNET=10\.246\.\d+\.1\/24\n/,
    );
    expect(await logOf('good')).not.toContain('lease store unreachable');
    await stopProcess(twill);
    expect(twill.exitCode).toBe(0);
  });

  const refused =
    "TLS handshake failed: etcd refused our client certificate (ssl/tls alert bad certificate): none was given, or it is not from a CA in etcd's --trusted-ca-file, or it has expired; check --etcd-certfile and --etcd-keyfile";
  const untrusted =
    "TLS handshake failed: etcd's server certificate is not trusted (unable to verify the first certificate); check --etcd-cafile";
  it.each([
    ['no-cert', 'no client certificate', (): string[] => ['--etcd-cafile', etcd.files.ca], refused],
    [
      'other-ca',
      'a client certificate from another CA',
      (): string[] => [
        '--etcd-cafile',
        etcd.files.ca,
        '--etcd-certfile',
        etcd.files.otherClient.cert,
        '--etcd-keyfile',
        etcd.files.otherClient.key,
      ],
      refused,
    ],
    [
      'no-ca',
      "no CA for etcd's certificate",
      (): string[] => [
        '--etcd-certfile',
        etcd.files.client.cert,
        '--etcd-keyfile',
        etcd.files.client.key,
      ],
      untrusted,
    ],
  ])(
    '%s: with %s it keeps retrying, names the certificate, and is live but not ready',
    async (name, _what, flags, message) => {
      const twill = startTwill(name, flags());
      await waitFor(async () => (await logOf(name)).split('lease store unreachable').length > 2, {
        timeoutMs: slowBound(10_000),
        what: 'two failed attempts',
      });
      await new Promise((r) => setTimeout(r, 3_000));
      expect(twill.exitCode).toBeNull();
      const log = await logOf(name);
      const warning = log
        .split('\n')
        .find((l) => l.includes('reading network config: lease store unreachable; retrying'));
      expect(warning).toBeDefined();
      expect((JSON.parse(warning ?? '{}') as { err?: string }).err).toContain(
        `etcd get /tls/config: ${message}`,
      );
      expect(log).not.toContain('lease acquired');
      expect(await health('/healthz')).toMatchObject({ status: 200 });
      const ready = await health('/readyz');
      expect(ready.status).toBe(503);
      twill.kill('SIGTERM');
      expect(await exited(twill)).toBe(0);
    },
  );
});
