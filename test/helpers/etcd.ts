// A real etcd (Debian's etcd-server) for tests: loopback or inside a test
// network namespace, on free ports, with a temporary data directory that is
// removed on stop. It can be stopped and started again on the same ports,
// with its data (restart) or without (wipe).
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../../src/exec/runner.ts';
import { freePort, waitFor } from './ports.ts';
import { startProcess, stopProcess } from './process.ts';

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
    return run(
      'ip',
      ['netns', 'exec', netns, 'etcdctl', '--endpoints', endpoint, 'endpoint', 'health'],
      { timeoutMs: 3000 },
    ).then(
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
    '--name',
    'test',
    '--data-dir',
    join(dataDir, 'data'),
    '--listen-client-urls',
    endpoint,
    '--advertise-client-urls',
    endpoint,
    '--listen-peer-urls',
    `http://127.0.0.1:${peerPort}`,
    '--initial-advertise-peer-urls',
    `http://127.0.0.1:${peerPort}`,
    '--initial-cluster',
    `test=http://127.0.0.1:${peerPort}`,
    '--log-level',
    'error',
  ];
  const server: EtcdServer = {
    endpoint,
    dataDir,
    async start() {
      const logFile = join(dataDir, 'etcd.log');
      child = startProcess(['etcd', ...args], { logFile, netns: spec.netns });
      await waitFor(() => healthy(endpoint, spec.netns), {
        timeoutMs: 20_000,
        what: `etcd at ${endpoint}`,
      }).catch(async (err: Error) => {
        throw new Error(
          `${err.message}; etcd log: ${(await readFile(logFile, 'utf8').catch(() => '')).slice(-2000)}`,
        );
      });
    },
    async stop(opts = {}) {
      if (child) await stopProcess(child);
      child = undefined;
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
