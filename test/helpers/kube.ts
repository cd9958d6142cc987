// A real kube-apiserver for tests (the binary from scripts/kube-apiserver.sh)
// against a real etcd (helpers/etcd.ts), on a free port, with a temporary
// cert dir, static tokens (an admin in system:masters, and a user `twill`
// with no rights until a test binds it), service-account keys and RBAC.
// Nothing about Kubernetes is mocked. `stop()` stops both processes and
// removes every temporary file, also after a failed start.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { run } from '../../src/exec/runner.ts';
import { startEtcd, type EtcdServer } from './etcd.ts';
import { freePort, waitFor } from './ports.ts';
import { startProcess, stopProcess } from './process.ts';

export const KUBE_APISERVER_SCRIPT = resolve(import.meta.dirname, '../../scripts/kube-apiserver.sh');

export interface KubeApiServer {
  /** https://<host>:<port> */
  readonly url: string;
  /** a static token of user `admin`, group system:masters */
  readonly adminToken: string;
  /** a static token of user `twill` (no groups: only what a test binds) */
  readonly twillToken: string;
  /** the apiserver's self-signed serving certificate (with its CA) */
  readonly caFile: string;
  readonly etcd: EtcdServer;
  /** writes a kubeconfig for `token` and returns its path */
  kubeconfig(token: string): Promise<string>;
  /** stops the apiserver only (etcd keeps the data); `start()` brings it back on the same port */
  stopApiServer(): Promise<void>;
  start(): Promise<void>;
  /** stops the apiserver and etcd and removes every temporary file */
  stop(): Promise<void>;
}

export interface KubeApiServerSpec {
  /** address to bind and advertise; default 127.0.0.1 */
  readonly host?: string;
  readonly port?: number;
}

/** The binary: $TWILL_KUBE_APISERVER or the cached build (never builds: `npm test` builds it first). */
export async function kubeApiServerBinary(): Promise<string> {
  const { stdout } = await run(KUBE_APISERVER_SCRIPT, ['--cached-only'], { timeoutMs: 10_000 });
  return stdout.trim();
}

/** GET `path` with a bearer token; resolves with the status code (0 when unreachable). */
export function kubeGet(o: { url: string; path: string; token: string; ca: Buffer }): Promise<{ status: number; body: string }> {
  return new Promise((res) => {
    const req = request(`${o.url}${o.path}`, { headers: { authorization: `Bearer ${o.token}` }, ca: o.ca, timeout: 2000 }, (r) => {
      const chunks: Buffer[] = [];
      r.on('data', (b: Buffer) => chunks.push(b));
      r.on('end', () => res({ status: r.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      r.on('error', () => res({ status: 0, body: '' }));
    });
    req.on('error', () => res({ status: 0, body: '' }));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

function apiServerArgs(o: { dir: string; host: string; port: number; etcd: string }): string[] {
  return [
    `--etcd-servers=${o.etcd}`,
    `--bind-address=${o.host}`,
    `--advertise-address=${o.host}`,
    `--secure-port=${o.port}`,
    '--insecure-port=0',
    `--cert-dir=${join(o.dir, 'certs')}`,
    `--token-auth-file=${join(o.dir, 'tokens.csv')}`,
    `--service-account-key-file=${join(o.dir, 'sa.key')}`,
    `--service-account-signing-key-file=${join(o.dir, 'sa.key')}`,
    '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
    '--api-audiences=https://kubernetes.default.svc.cluster.local',
    '--authorization-mode=Node,RBAC',
    '--service-cluster-ip-range=10.96.0.0/12',
    '--allow-privileged=true',
    // the `kubernetes` Service's endpoint would be a loopback address
    '--endpoint-reconciler-type=none',
    '--profiling=false',
    '--v=1',
  ];
}

async function writeCredentials(dir: string): Promise<{ adminToken: string; twillToken: string }> {
  const adminToken = randomBytes(24).toString('hex');
  const twillToken = randomBytes(24).toString('hex');
  await writeFile(join(dir, 'tokens.csv'), `${adminToken},admin,admin,system:masters\n${twillToken},twill,twill\n`, { mode: 0o600 });
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  await writeFile(join(dir, 'sa.key'), privateKey.export({ type: 'pkcs1', format: 'pem' }), { mode: 0o600 });
  return { adminToken, twillToken };
}

function kubeconfigText(o: { url: string; caFile: string; token: string }): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'test', cluster: { server: o.url, 'certificate-authority': o.caFile } }],
    users: [{ name: 'test', user: { token: o.token } }],
    contexts: [{ name: 'test', context: { cluster: 'test', user: 'test' } }],
    'current-context': 'test',
  });
}

export async function startKubeApiServer(spec: KubeApiServerSpec = {}): Promise<KubeApiServer> {
  const binary = await kubeApiServerBinary();
  const dir = await mkdtemp(join(tmpdir(), 'twill-kube-'));
  let etcd: EtcdServer | undefined;
  try {
    etcd = await startEtcd();
    const host = spec.host ?? '127.0.0.1';
    const port = spec.port ?? (await freePort());
    const creds = await writeCredentials(dir);
    const server = makeServer({ binary, dir, etcd, host, port, ...creds });
    await server.start();
    return server;
  } catch (err) {
    await etcd?.destroy();
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

function makeServer(o: { binary: string; dir: string; etcd: EtcdServer; host: string; port: number; adminToken: string; twillToken: string }): KubeApiServer {
  const url = `https://${o.host}:${o.port}`;
  const caFile = join(o.dir, 'certs', 'apiserver.crt');
  const logFile = join(o.dir, 'kube-apiserver.log');
  const args = apiServerArgs({ dir: o.dir, host: o.host, port: o.port, etcd: o.etcd.endpoint });
  let child: ChildProcess | undefined;
  let configs = 0;
  const ready = async (): Promise<boolean> => {
    if (!existsSync(caFile)) return false;
    const ca = await readFile(caFile);
    return (await kubeGet({ url, path: '/readyz', token: o.adminToken, ca })).status === 200;
  };
  const server: KubeApiServer = {
    url,
    adminToken: o.adminToken,
    twillToken: o.twillToken,
    caFile,
    etcd: o.etcd,
    async kubeconfig(token) {
      const path = join(o.dir, `kubeconfig-${++configs}`);
      await writeFile(path, kubeconfigText({ url, caFile, token }), { mode: 0o600 });
      return path;
    },
    async start() {
      child = startProcess([o.binary, ...args], { logFile });
      const exited = new Promise<never>((_, reject) => child?.once('exit', (code) => reject(new Error(`kube-apiserver exited (${code})`))));
      exited.catch(() => undefined);
      await Promise.race([waitFor(ready, { timeoutMs: 30_000, what: `kube-apiserver at ${url}/readyz` }), exited]).catch(async (err: Error) => {
        await server.stopApiServer();
        throw new Error(`${err.message}; kube-apiserver log: ${(await readFile(logFile, 'utf8').catch(() => '')).slice(-3000)}`);
      });
    },
    async stopApiServer() {
      if (child) await stopProcess(child);
      child = undefined;
    },
    async stop() {
      await server.stopApiServer();
      await o.etcd.destroy();
      await rm(o.dir, { recursive: true, force: true });
    },
  };
  return server;
}
