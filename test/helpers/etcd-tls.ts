// A real etcd that speaks only TLS and demands a client certificate
// (--client-cert-auth), with a CA, a server certificate (SAN 127.0.0.1) and a
// client certificate made here with openssl in a temporary directory, plus a
// second CA and a client certificate from it that etcd must refuse. Loopback
// of the host or of a test network namespace; everything is removed on destroy.
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../../src/exec/runner.ts';
import { freePort } from '../../lab/kit/ports.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { netnsExec, startProcess, stopProcess } from '../../lab/kit/process.ts';
import { etcdArgv } from '../../lab/kit/etcd.ts';

export interface CertPair {
  readonly cert: string;
  readonly key: string;
}

export interface TlsFiles {
  readonly dir: string;
  /** the CA etcd trusts, and that signed its server certificate */
  readonly ca: string;
  readonly server: CertPair;
  /** a client certificate from `ca` */
  readonly client: CertPair;
  /** a second CA etcd does not trust, and a client certificate from it */
  readonly otherCa: string;
  readonly otherClient: CertPair;
}

async function openssl(args: readonly string[]): Promise<void> {
  await run('openssl', args, { timeoutMs: 30_000 });
}

async function makeCa(dir: string, name: string): Promise<CertPair> {
  const pair = { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) };
  await openssl([
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    pair.key,
    '-out',
    pair.cert,
    '-days',
    '2',
    '-subj',
    `/CN=${name}`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  return pair;
}

async function makeLeaf(dir: string, name: string, ca: CertPair, ext: string): Promise<CertPair> {
  const pair = { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) };
  const csr = join(dir, `${name}.csr`);
  const extFile = join(dir, `${name}.ext`);
  await writeFile(extFile, ext);
  await openssl([
    'req',
    '-new',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    pair.key,
    '-out',
    csr,
    '-subj',
    `/CN=${name}`,
  ]);
  await openssl([
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-CAcreateserial',
    '-out',
    pair.cert,
    '-days',
    '2',
    '-extfile',
    extFile,
  ]);
  return pair;
}

/**
 * A CA, etcd's server certificate (IP 127.0.0.1), a client certificate, and a foreign CA with its
 * own client certificate.
 */
export async function makeTlsFiles(): Promise<TlsFiles> {
  const dir = await mkdtemp(join(tmpdir(), 'twill-etcd-tls-'));
  const ca = await makeCa(dir, 'ca');
  const other = await makeCa(dir, 'other-ca');
  const server = await makeLeaf(
    dir,
    'server',
    ca,
    'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n',
  );
  const client = await makeLeaf(dir, 'client', ca, 'extendedKeyUsage=clientAuth\n');
  const otherClient = await makeLeaf(dir, 'other-client', other, 'extendedKeyUsage=clientAuth\n');
  return { dir, ca: ca.cert, server, client, otherCa: other.cert, otherClient };
}

export interface TlsEtcdServer {
  /** https://127.0.0.1:<port> */
  readonly endpoint: string;
  readonly files: TlsFiles;
  /** etcdctl with the good client certificate (inside the namespace when one was given) */
  etcdctl(...args: string[]): Promise<string>;
  destroy(): Promise<void>;
}

/** Starts etcd on https loopback ports with --client-cert-auth, in `netns` when given. */
export async function startTlsEtcd(spec: { netns?: string } = {}): Promise<TlsEtcdServer> {
  const files = await makeTlsFiles();
  const clientPort = await freePort();
  const peerPort = await freePort();
  const endpoint = `https://127.0.0.1:${clientPort}`;
  const peer = `https://127.0.0.1:${peerPort}`;
  const logFile = join(files.dir, 'etcd.log');
  const child: ChildProcess = startProcess(
    [
      ...etcdArgv({
        name: 'tls',
        dataDir: join(files.dir, 'data'),
        clientUrl: endpoint,
        peerUrl: peer,
      }),
      '--client-cert-auth',
      '--trusted-ca-file',
      files.ca,
      '--cert-file',
      files.server.cert,
      '--key-file',
      files.server.key,
      '--peer-client-cert-auth',
      '--peer-trusted-ca-file',
      files.ca,
      '--peer-cert-file',
      files.server.cert,
      '--peer-key-file',
      files.server.key,
    ],
    { logFile, netns: spec.netns },
  );
  const etcdctl = async (...args: string[]): Promise<string> => {
    const argv = [
      'etcdctl',
      '--endpoints',
      endpoint,
      '--cacert',
      files.ca,
      '--cert',
      files.client.cert,
      '--key',
      files.client.key,
      ...args,
    ];
    const [file, ...rest] = spec.netns ? netnsExec(spec.netns, argv) : argv;
    return (await run(file as string, rest, { timeoutMs: 10_000 })).stdout;
  };
  const destroy = async (): Promise<void> => {
    await stopProcess(child);
    await rm(files.dir, { recursive: true, force: true });
  };
  const healthy = (): Promise<boolean> =>
    etcdctl('endpoint', 'health').then(
      () => true,
      () => false,
    );
  await waitFor(healthy, { timeoutMs: 20_000, what: `etcd at ${endpoint}` }).catch(
    async (err: Error) => {
      const log = (await readFile(logFile, 'utf8').catch(() => '')).slice(-2000);
      await destroy();
      throw new Error(`${err.message}; etcd log: ${log}`);
    },
  );
  return { endpoint, files, etcdctl, destroy };
}
