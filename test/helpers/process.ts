// The one place tests start long-running processes (etcd, twill run), in a
// network namespace or not. Output goes to a log file; stopping is SIGTERM,
// then SIGKILL after a grace period; and a process still running when the
// test process exits is killed, so a crashed test leaves nothing behind.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';

/** Starts `argv` (inside `netns` when given) with stdout and stderr appended to `logFile`. */
export function startProcess(
  argv: readonly string[],
  o: { logFile: string; netns?: string | undefined },
): ChildProcess {
  const [file, ...args] = o.netns ? ['ip', 'netns', 'exec', o.netns, ...argv] : argv;
  const fd = openSync(o.logFile, 'a');
  const child = spawn(file as string, args, { stdio: ['ignore', fd, fd] });
  closeSync(fd);
  const orphanGuard = (): void => void child.kill('SIGKILL');
  process.once('exit', orphanGuard);
  child.once('exit', () => process.removeListener('exit', orphanGuard));
  return child;
}

/** Resolves with the exit code (or signal) of a child process. */
export function exited(child: ChildProcess): Promise<number | string> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  if (child.signalCode !== null) return Promise.resolve(child.signalCode);
  return new Promise((resolve) => child.once('exit', (code, sig) => resolve(code ?? sig ?? -1)));
}

/** SIGTERM, then SIGKILL if it is still running after `graceMs`. */
export async function stopProcess(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  await Promise.race([exited(child), new Promise((r) => setTimeout(r, graceMs))]);
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await exited(child);
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
