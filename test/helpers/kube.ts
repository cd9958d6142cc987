// A real kube-apiserver for tests (the binary from scripts/kubernetes.sh)
// against a real etcd (lab/kit/etcd.ts), on a free port, with a temporary
// cert dir, static tokens (an admin in system:masters, and a user `twill`
// with no rights until a test binds it), service-account keys and RBAC.
// Nothing about Kubernetes is mocked. `stop()` stops both processes and
// removes every temporary file, also after a failed start. The arguments,
// credential files, kubeconfig text and readiness probe are the lab's
// (lab/kube-apiserver.ts): the lab in Kubernetes mode runs the same server.
import type { ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  apiServerArgs,
  apiServerFiles,
  kubeApiServerBinary,
  kubeconfigText,
  untilApiServerReady,
  writeCredentials,
} from '../../lab/kube-apiserver.ts';
import { run } from '../../src/exec/runner.ts';
import { startEtcd, type EtcdServer } from '../../lab/kit/etcd.ts';
import { freePort } from '../../lab/kit/ports.ts';
import { startProcess, stopProcess } from '../../lab/kit/process.ts';

export { KUBERNETES_SCRIPT } from '../../lab/kube-apiserver.ts';

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

export async function startKubeApiServer(spec: KubeApiServerSpec = {}): Promise<KubeApiServer> {
  const binary = await kubeApiServerBinary({ cachedOnly: true });
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

function makeServer(o: {
  binary: string;
  dir: string;
  etcd: EtcdServer;
  host: string;
  port: number;
  adminToken: string;
  twillToken: string;
}): KubeApiServer {
  const url = `https://${o.host}:${o.port}`;
  const { caFile } = apiServerFiles(o.dir);
  const logFile = join(o.dir, 'kube-apiserver.log');
  const args = apiServerArgs({ dir: o.dir, host: o.host, port: o.port, etcd: o.etcd.endpoint });
  let child: ChildProcess | undefined;
  let configs = 0;
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
      const started = startProcess([o.binary, ...args], { logFile });
      child = started;
      const kubectl = {
        kubeconfig: await server.kubeconfig(o.adminToken),
        cacheDir: join(o.dir, 'kubectl-cache'),
      };
      await mkdir(kubectl.cacheDir, { recursive: true });
      const exec = (argv: readonly string[]): Promise<unknown> =>
        run(argv[0] ?? '', argv.slice(1), { timeoutMs: 5_000 });
      const exited = (): boolean => started.exitCode !== null || started.signalCode !== null;
      await untilApiServerReady({ dir: o.dir, kubectl, exec, exited, timeoutMs: 30_000 }).catch(
        async (err: Error) => {
          await server.stopApiServer();
          throw new Error(
            `${err.message} (${url}); kube-apiserver log: ${(await readFile(logFile, 'utf8').catch(() => '')).slice(-3000)}`,
          );
        },
      );
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
