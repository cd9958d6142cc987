// The one place the tests, the lab and the bench start long-running
// processes (etcd, kube-apiservers, twill run, kubelets…), in a network
// namespace or not, output appended to a log file. Two kinds:
//   - attached (`startProcess`): a child of this process, stopped by handle
//     (SIGTERM, then SIGKILL after a grace period), and killed when this
//     process exits, so a crashed test leaves nothing behind;
//   - detached (`spawnLogged`, `spawnDetached`): the lab's, which outlive
//     `npm run lab -- up` and are found again by pid (recorded in the lab
//     state) and stopped by pid (`stopPid`).
// Long-running processes enter a namespace through `ip netns exec` (which
// also gives them the namespace's own /sys); one-shot commands use nsenter
// (netns.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { pause } from '../../src/util/abort.ts';

/** argv run inside network namespace `ns` (by its name) through `ip netns exec`. */
export function netnsExec(ns: string, argv: readonly string[]): string[] {
  return ['ip', 'netns', 'exec', ns, ...argv];
}

function spawnToLog(
  argv: readonly string[],
  logFile: string,
  o: { detached: boolean; env?: Readonly<Record<string, string>> },
): ChildProcess {
  const fd = openSync(logFile, 'a');
  const [file = '', ...args] = argv;
  try {
    return spawn(file, args, {
      stdio: ['ignore', fd, fd],
      detached: o.detached,
      env: { ...process.env, ...o.env },
    });
  } finally {
    closeSync(fd);
  }
}

/**
 * Starts `argv` (inside `netns` when given) with stdout and stderr appended to `logFile`; it is
 * killed if this process exits first.
 */
export function startProcess(
  argv: readonly string[],
  o: { logFile: string; netns?: string | undefined },
): ChildProcess {
  const child = spawnToLog(o.netns ? netnsExec(o.netns, argv) : argv, o.logFile, {
    detached: false,
  });
  const orphanGuard = (): void => void child.kill('SIGKILL');
  process.once('exit', orphanGuard);
  child.once('exit', () => process.removeListener('exit', orphanGuard));
  return child;
}

/** True once a child process has exited (with a code or by a signal). */
export function hasEnded(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** Resolves with the exit code (or signal) of a child process. */
export function exited(child: ChildProcess): Promise<number | string> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  if (child.signalCode !== null) return Promise.resolve(child.signalCode);
  return new Promise((resolve) => child.once('exit', (code, sig) => resolve(code ?? sig ?? -1)));
}

/** SIGTERM, then SIGKILL if it is still running after `graceMs`. */
export async function stopProcess(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (hasEnded(child)) return;
  child.kill('SIGTERM');
  await Promise.race([exited(child), new Promise((r) => setTimeout(r, graceMs))]);
  if (!hasEnded(child)) child.kill('SIGKILL');
  await exited(child);
}

/**
 * Starts argv detached (it outlives this process), output appended to `logFile`, with `env` added;
 * the pid.
 */
export function spawnLogged(
  argv: readonly string[],
  logFile: string,
  env: Readonly<Record<string, string>> = {},
): number {
  const child = spawnToLog(argv, logFile, { detached: true, env });
  child.unref();
  if (child.pid === undefined) throw new Error(`could not start ${argv.join(' ')}`);
  return child.pid;
}

/** Starts argv inside `ns`, detached, output appended to `logFile`; the pid. */
export function spawnDetached(ns: string, argv: readonly string[], logFile: string): number {
  return spawnLogged(netnsExec(ns, argv), logFile);
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
  while (alive(pid) && Date.now() < until) await pause(20);
  if (alive(pid)) process.kill(pid as number, 'SIGKILL');
  while (alive(pid)) await pause(20);
}

export interface Finished {
  /** exit code, or the signal that ended it */
  readonly code: number | string;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs a short-lived command to its end with `input` on stdin and exactly `env`; kills it after
 * `timeoutMs`.
 */
export function runToExit(
  argv: readonly string[],
  o: { input: string; env: Record<string, string>; timeoutMs?: number },
): Promise<Finished> {
  const [file, ...args] = argv;
  const child = spawn(file as string, args, { stdio: ['pipe', 'pipe', 'pipe'], env: o.env });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on('data', (b: Buffer) => out.push(b));
  child.stderr.on('data', (b: Buffer) => err.push(b));
  // a child that exits without reading its stdin is not an error (EPIPE)
  child.stdin.on('error', () => undefined);
  child.stdin.end(o.input);
  const timer = setTimeout(() => child.kill('SIGKILL'), o.timeoutMs ?? 30_000);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, sig) => {
      clearTimeout(timer);
      resolve({
        code: code ?? sig ?? -1,
        stdout: Buffer.concat(out).toString(),
        stderr: Buffer.concat(err).toString(),
      });
    });
  });
}
