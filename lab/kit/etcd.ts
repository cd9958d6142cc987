// etcd (Debian's etcd-server) for the tests, the lab and the bench: one
// member's command line, whether a member is healthy, which member the
// others agree leads, and (`startEtcd`) a single etcd on free ports with a
// temporary data directory, attached to this process, that can be stopped
// and started again on the same ports with its data (restart) or without
// (wipe). The lab runs its members detached, by pid (netns-cluster.ts).
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../../src/exec/runner.ts';
import { nsenterArgv, nsRun } from './netns.ts';
import { freePort } from './ports.ts';
import { startProcess, stopProcess } from './process.ts';
import { waitFor } from './wait.ts';

export interface EtcdMemberSpec {
  readonly name: string;
  readonly dataDir: string;
  /** where it serves clients, and advertises that it does */
  readonly clientUrl: string;
  /** where it talks to its peers, and advertises that it does */
  readonly peerUrl: string;
}

/**
 * argv of etcd member `m` of `cluster` (every member, itself included; default: itself alone),
 * logging errors only. A cluster of more than one bootstraps anew with `token`.
 */
export function etcdArgv(
  m: EtcdMemberSpec,
  o: {
    cluster?: readonly { readonly name: string; readonly peerUrl: string }[];
    token?: string;
  } = {},
): string[] {
  const cluster = o.cluster ?? [m];
  return [
    'etcd',
    '--name',
    m.name,
    '--data-dir',
    m.dataDir,
    '--listen-client-urls',
    m.clientUrl,
    '--advertise-client-urls',
    m.clientUrl,
    '--listen-peer-urls',
    m.peerUrl,
    '--initial-advertise-peer-urls',
    m.peerUrl,
    '--initial-cluster',
    cluster.map((c) => `${c.name}=${c.peerUrl}`).join(','),
    ...(o.token === undefined
      ? []
      : ['--initial-cluster-token', o.token, '--initial-cluster-state', 'new']),
    '--log-level',
    'error',
  ];
}

/**
 * Whether the member at `endpoint` is healthy: `etcdctl endpoint health` inside `netns`, or its
 * /health over HTTP from here.
 */
export async function etcdHealthy(endpoint: string, netns?: string): Promise<boolean> {
  if (netns !== undefined)
    return nsRun(netns, ['etcdctl', '--endpoints', endpoint, 'endpoint', 'health'], {
      timeoutMs: 3_000,
    }).then(
      () => true,
      () => false,
    );
  return fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1000) }).then(
    async (r) => r.ok && ((await r.json()) as { health?: string }).health === 'true',
    () => false,
  );
}

interface EndpointStatus {
  Endpoint: string;
  Status: { header: { member_id: number | string }; leader: number | string };
}

/**
 * `etcdctl endpoint status -w json` on the given endpoints (inside `netns` when given): each
 * answer's own member id and its leader id.
 */
async function endpointStatus(
  endpoints: readonly string[],
  netns?: string,
): Promise<{ endpoint: string; memberId: string; leaderId: string }[]> {
  const argv = [
    'etcdctl',
    '--endpoints',
    endpoints.join(','),
    '--command-timeout',
    '2s',
    'endpoint',
    'status',
    '-w',
    'json',
  ];
  const [file, ...args] = netns === undefined ? argv : nsenterArgv(netns, argv);
  const out = (await run(file as string, args, { timeoutMs: 5_000 })).stdout;
  // etcdctl prints ids as JSON numbers larger than 2^53: read them as text
  const exact = out.replace(
    /"(member_id|leader|cluster_id|raft_term|revision|raft_index|raft_applied_index)":(\d+)/g,
    '"$1":"$2"',
  );
  return (JSON.parse(exact) as EndpointStatus[]).map((s) => ({
    endpoint: s.Endpoint,
    memberId: String(s.Status.header.member_id),
    leaderId: String(s.Status.leader),
  }));
}

/**
 * The endpoint (one of `endpoints`) of the member they all name as their leader; undefined when
 * one does not answer or they do not agree (an election under way).
 */
export async function agreedLeader(
  endpoints: readonly string[],
  netns?: string,
): Promise<string | undefined> {
  if (endpoints.length === 0) return undefined;
  const status = await endpointStatus(endpoints, netns).catch(() => []);
  const leaders = new Set(status.map((s) => s.leaderId));
  if (leaders.size !== 1 || status.length !== endpoints.length) return undefined;
  return status.find((s) => s.memberId === [...leaders][0])?.endpoint;
}

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
  /** where its data directory is made (default the OS's temp directory) */
  readonly dataParent?: string;
}

/** One etcd, started and healthy; it is killed if this process exits first. */
export async function startEtcd(spec: EtcdSpec = {}): Promise<EtcdServer> {
  const host = spec.host ?? '127.0.0.1';
  const clientPort = spec.clientPort ?? (await freePort());
  const peerPort = await freePort();
  const dataDir = await mkdtemp(join(spec.dataParent ?? tmpdir(), 'twill-etcd-'));
  const endpoint = `http://${host}:${clientPort}`;
  let child: ChildProcess | undefined;
  const argv = etcdArgv({
    name: 'test',
    dataDir: join(dataDir, 'data'),
    clientUrl: endpoint,
    peerUrl: `http://127.0.0.1:${peerPort}`,
  });
  const server: EtcdServer = {
    endpoint,
    dataDir,
    async start() {
      const logFile = join(dataDir, 'etcd.log');
      child = startProcess(argv, { logFile, netns: spec.netns });
      await waitFor(() => etcdHealthy(endpoint, spec.netns), {
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
