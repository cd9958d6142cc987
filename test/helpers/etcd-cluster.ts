// A real three-member (or n-member) etcd cluster on loopback for tests:
// Debian's etcd, each member on free client and peer ports with a temporary
// data directory, bootstrapped together with --initial-cluster. A member can
// be killed (SIGKILL, as a crashed machine) and started again with its data;
// the leader is found through `etcdctl endpoint status`. destroy() stops
// every member and removes the data.
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../../src/exec/runner.ts';
import { freePort, waitFor } from './ports.ts';
import { exited, startProcess, stopProcess } from './process.ts';

export interface EtcdMember {
  readonly name: string;
  readonly endpoint: string;
  /** the running process's pid, or undefined when the member is down */
  readonly pid: number | undefined;
}

export interface EtcdCluster {
  /** every member's client endpoint, in member order */
  readonly endpoints: readonly string[];
  readonly members: readonly EtcdMember[];
  /** the members that run now */
  running(): EtcdMember[];
  /** the member the running members agree leads the cluster */
  leader(): Promise<EtcdMember>;
  /** SIGKILL to the member's process; resolves once it is gone */
  kill(name: string): Promise<void>;
  /** starts a killed member again, with its data; resolves once it is healthy */
  start(name: string): Promise<void>;
  /** stops every member and removes the data */
  destroy(): Promise<void>;
}

interface MemberSlot {
  readonly name: string;
  readonly endpoint: string;
  readonly peer: string;
  child: ChildProcess | undefined;
}

async function healthy(endpoint: string): Promise<boolean> {
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
 * `etcdctl endpoint status -w json` on the given endpoints: each answer's own member id and its
 * leader id.
 */
export async function endpointStatus(
  endpoints: readonly string[],
): Promise<{ endpoint: string; memberId: string; leaderId: string }[]> {
  // etcdctl prints ids as JSON numbers larger than 2^53: read them as text
  const out = (
    await run(
      'etcdctl',
      [
        '--endpoints',
        endpoints.join(','),
        '--command-timeout',
        '2s',
        'endpoint',
        'status',
        '-w',
        'json',
      ],
      { timeoutMs: 5_000 },
    )
  ).stdout;
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

export async function startEtcdCluster(o: { size?: number } = {}): Promise<EtcdCluster> {
  const size = o.size ?? 3;
  const dataDir = await mkdtemp(join(tmpdir(), 'twill-etcd-cluster-'));
  const slots: MemberSlot[] = [];
  for (let i = 1; i <= size; i++)
    slots.push({
      name: `m${i}`,
      endpoint: `http://127.0.0.1:${await freePort()}`,
      peer: `http://127.0.0.1:${await freePort()}`,
      child: undefined,
    });
  const initialCluster = slots.map((s) => `${s.name}=${s.peer}`).join(',');
  const token = `twill-test-${process.pid}-${Date.now()}`;
  const logFile = (s: MemberSlot): string => join(dataDir, `${s.name}.log`);
  const slot = (name: string): MemberSlot => {
    const s = slots.find((x) => x.name === name);
    if (!s) throw new Error(`no etcd member ${name}`);
    return s;
  };
  const spawnMember = (s: MemberSlot): void => {
    const argv = [
      'etcd',
      '--name',
      s.name,
      '--data-dir',
      join(dataDir, s.name),
      '--listen-client-urls',
      s.endpoint,
      '--advertise-client-urls',
      s.endpoint,
      '--listen-peer-urls',
      s.peer,
      '--initial-advertise-peer-urls',
      s.peer,
      '--initial-cluster',
      initialCluster,
      '--initial-cluster-token',
      token,
      '--initial-cluster-state',
      'new',
      '--log-level',
      'error',
    ];
    s.child = startProcess(argv, { logFile: logFile(s) });
  };
  const untilHealthy = async (members: readonly MemberSlot[]): Promise<void> => {
    await waitFor(
      async () => (await Promise.all(members.map((s) => healthy(s.endpoint)))).every(Boolean),
      { timeoutMs: 30_000, what: `etcd members ${members.map((s) => s.name).join(', ')}` },
    ).catch(async (err: Error) => {
      const logs = await Promise.all(
        members.map(
          async (s) =>
            `${s.name}: ${(await readFile(logFile(s), 'utf8').catch(() => '')).slice(-1000)}`,
        ),
      );
      throw new Error(`${err.message}; logs: ${logs.join('\n')}`);
    });
  };
  const view = (s: MemberSlot): EtcdMember => ({
    name: s.name,
    endpoint: s.endpoint,
    pid:
      s.child && s.child.exitCode === null && s.child.signalCode === null ? s.child.pid : undefined,
  });
  const cluster: EtcdCluster = {
    endpoints: slots.map((s) => s.endpoint),
    get members() {
      return slots.map(view);
    },
    running: () => slots.map(view).filter((m) => m.pid !== undefined),
    async leader() {
      const up = cluster.running();
      let found: EtcdMember | undefined;
      await waitFor(
        async () => {
          const status = await endpointStatus(up.map((m) => m.endpoint)).catch(() => []);
          const leaders = new Set(status.map((s) => s.leaderId));
          const leaderId =
            leaders.size === 1 && status.length === up.length ? [...leaders][0] : undefined;
          const at = status.find((s) => s.memberId === leaderId);
          found = at ? up.find((m) => m.endpoint === at.endpoint) : undefined;
          return found !== undefined;
        },
        { timeoutMs: 15_000, what: 'an etcd leader every running member agrees on' },
      );
      if (!found) throw new Error('no etcd leader');
      return found;
    },
    async kill(name) {
      const s = slot(name);
      const child = s.child;
      if (!child) return;
      child.kill('SIGKILL');
      await exited(child);
      s.child = undefined;
    },
    async start(name) {
      const s = slot(name);
      if (s.child) throw new Error(`etcd member ${name} already runs`);
      spawnMember(s);
      await untilHealthy([s]);
    },
    async destroy() {
      await Promise.all(
        slots.map(async (s) => {
          if (s.child) await stopProcess(s.child);
          s.child = undefined;
        }),
      );
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  // the members wait for each other before they serve: start them all, then wait
  for (const s of slots) spawnMember(s);
  await untilHealthy(slots).catch(async (err: unknown) => {
    await cluster.destroy();
    throw err;
  });
  return cluster;
}
