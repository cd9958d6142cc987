// A real etcd (Debian's etcd-server) for tests: loopback or inside a test
// network namespace, on free ports, with a temporary data directory that is
// removed on stop. It can be stopped and started again on the same ports,
// with its data (restart) or without (wipe).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, waitFor } from './ports.ts';

export interface EtcdServer {
  readonly endpoint: string;
  readonly dataDir: string;
  /** stops the process, keeping or removing the data */
  stop(opts?: { wipe?: boolean }): Promise<void>;
  start(): Promise<void>;
  /** stops for good and removes the data directory */
  destroy(): Promise<void>;
}

export interface EtcdSpec {
  /** run inside this network namespace (via `ip netns exec`) */
  readonly netns?: string;
  /** client address to listen on; default 127.0.0.1 */
  readonly host?: string;
  readonly clientPort?: number;
}

async function healthy(endpoint: string, netns: string | undefined): Promise<boolean> {
  if (netns) {
    const { run } = await import('../../src/exec/runner.ts');
    return run('ip', ['netns', 'exec', netns, 'etcdctl', '--endpoints', endpoint, 'endpoint', 'health'], { timeoutMs: 3000 }).then(
      () => true,
      () => false,
    );
  }
  return fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1000) }).then(
    async (r) => r.ok && ((await r.json()) as { health?: string }).health === 'true',
    () => false,
  );
}

export async function startEtcd(spec: EtcdSpec = {}): Promise<EtcdServer> {
  const host = spec.host ?? '127.0.0.1';
  const clientPort = spec.clientPort ?? (await freePort());
  const peerPort = await freePort();
  const dataDir = await mkdtemp(join(tmpdir(), 'twill-etcd-'));
  const endpoint = `http://${host}:${clientPort}`;
  let child: ChildProcess | undefined;
  const args = [
    '--name', 'test',
    '--data-dir', join(dataDir, 'data'),
    '--listen-client-urls', endpoint,
    '--advertise-client-urls', endpoint,
    '--listen-peer-urls', `http://127.0.0.1:${peerPort}`,
    '--initial-advertise-peer-urls', `http://127.0.0.1:${peerPort}`,
    '--initial-cluster', `test=http://127.0.0.1:${peerPort}`,
    '--log-level', 'error',
  ];
  const server: EtcdServer = {
    endpoint,
    dataDir,
    async start() {
      const [file, argv] = spec.netns ? ['ip', ['netns', 'exec', spec.netns, 'etcd', ...args]] : ['etcd', args];
      child = spawn(file, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
      const orphanGuard = (): void => void child?.kill('SIGKILL');
      process.once('exit', orphanGuard);
      child.once('exit', () => process.removeListener('exit', orphanGuard));
      let stderr = '';
      child.stderr?.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
      await waitFor(() => healthy(endpoint, spec.netns), { timeoutMs: 20_000, what: `etcd at ${endpoint} (${stderr})` });
    },
    async stop(opts = {}) {
      const c = child;
      child = undefined;
      if (c && c.exitCode === null) {
        const exited = new Promise((r) => c.once('exit', r));
        c.kill('SIGTERM');
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
        if (c.exitCode === null) c.kill('SIGKILL');
      }
      if (opts.wipe) await rm(join(dataDir, 'data'), { recursive: true, force: true });
    },
    async destroy() {
      await server.stop({ wipe: true });
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  await server.start();
  return server;
}
