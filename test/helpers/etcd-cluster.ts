// A real three-member (or n-member) etcd cluster on loopback for tests:
// Debian's etcd, each member on free client and peer ports with a temporary
// data directory, bootstrapped together with --initial-cluster. A member can
// be killed (SIGKILL, as a crashed machine) and started again with its data;
// the leader is found through `etcdctl endpoint status` (lab/kit/etcd.ts, as
// the lab finds its own). destroy() stops every member and removes the data.
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agreedLeader, etcdArgv, etcdHealthy } from '../../lab/kit/etcd.ts';
import { freePort } from '../../lab/kit/ports.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { exited, startProcess, stopProcess } from '../../lab/kit/process.ts';

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
  const peers = slots.map((s) => ({ name: s.name, peerUrl: s.peer }));
  const token = `twill-test-${process.pid}-${Date.now()}`;
  const logFile = (s: MemberSlot): string => join(dataDir, `${s.name}.log`);
  const slot = (name: string): MemberSlot => {
    const s = slots.find((x) => x.name === name);
    if (!s) throw new Error(`no etcd member ${name}`);
    return s;
  };
  const spawnMember = (s: MemberSlot): void => {
    const member = { name: s.name, dataDir: join(dataDir, s.name), clientUrl: s.endpoint };
    const argv = etcdArgv({ ...member, peerUrl: s.peer }, { cluster: peers, token });
    s.child = startProcess(argv, { logFile: logFile(s) });
  };
  const untilHealthy = async (members: readonly MemberSlot[]): Promise<void> => {
    await waitFor(
      async () => (await Promise.all(members.map((s) => etcdHealthy(s.endpoint)))).every(Boolean),
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
          const at = await agreedLeader(up.map((m) => m.endpoint));
          found = up.find((m) => m.endpoint === at);
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
