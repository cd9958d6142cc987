// Long-running lab processes (etcd, twill) started detached inside a
// namespace, so they outlive `npm run lab -- up`; they are found again by
// pid (recorded in the lab state) and, after a crash, by namespace.
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { run } from '../src/exec/runner.ts';
import { sleep } from '../src/util/abort.ts';

/**
 * Starts argv detached (it outlives this process), output appended to `logFile`, with `env` added;
 * the pid.
 */
export function spawnLogged(
  argv: readonly string[],
  logFile: string,
  env: Readonly<Record<string, string>> = {},
): number {
  const fd = openSync(logFile, 'a');
  const [file = '', ...args] = argv;
  const child = spawn(file, args, {
    stdio: ['ignore', fd, fd],
    detached: true,
    env: { ...process.env, ...env },
  });
  closeSync(fd);
  child.unref();
  if (child.pid === undefined) throw new Error(`could not start ${argv.join(' ')}`);
  return child.pid;
}

/** Starts argv inside `ns`, detached, output appended to `logFile`; the pid. */
export function spawnDetached(ns: string, argv: readonly string[], logFile: string): number {
  return spawnLogged(['ip', 'netns', 'exec', ns, ...argv], logFile);
}

export function alive(pid: number | undefined): boolean {
  if (pid === undefined) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** SIGTERM (then SIGKILL after `graceMs`) or SIGKILL at once; resolves when the pid is gone. */
export async function stopPid(
  pid: number | undefined,
  how: 'term' | 'kill',
  graceMs = 10_000,
): Promise<void> {
  if (!alive(pid)) return;
  process.kill(pid as number, how === 'term' ? 'SIGTERM' : 'SIGKILL');
  const until = Date.now() + graceMs;
  while (alive(pid) && Date.now() < until) await sleep(20, AbortSignal.timeout(1_000));
  if (alive(pid)) process.kill(pid as number, 'SIGKILL');
  while (alive(pid)) await sleep(20, AbortSignal.timeout(1_000));
}

/** Kills every process in a namespace (what `down` does after a crash lost the pids). */
export async function killNamespaceProcesses(ns: string): Promise<void> {
  for (const pid of await namespacePids(ns)) await stopPid(pid, 'kill');
}

/** The processes in network namespace `ns` (none when it is gone). */
export async function namespacePids(ns: string): Promise<number[]> {
  return run('ip', ['netns', 'pids', ns]).then(
    (r) => r.stdout.split('\n').filter(Boolean).map(Number),
    () => [],
  );
}
