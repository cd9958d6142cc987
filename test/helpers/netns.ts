// Network namespaces for tests: every name carries the creating process's
// pid (twt<pid>-<name>), so a later run can sweep namespaces whose creator
// died. Tests touch only the namespaces made here, and `destroy` kills their
// processes and deletes them even when the test failed.
import type { ChildProcess } from 'node:child_process';
import { run, watchLines, type LineWatcher, type Runner } from '../../src/exec/runner.ts';
import { startProcess } from './process.ts';

const PREFIX = 'twt';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function deleteNetns(name: string): Promise<void> {
  const pids = await run('ip', ['netns', 'pids', name]).then(
    (r) => r.stdout.split('\n').filter(Boolean),
    () => [],
  );
  for (const pid of pids) {
    try {
      process.kill(Number(pid), 'SIGKILL');
    } catch {
      // already gone
    }
  }
  await run('ip', ['netns', 'del', name]).catch(() => undefined);
}

/** Removes namespaces left by test runs whose process no longer exists. */
export async function sweepStaleNetns(): Promise<void> {
  const { stdout } = await run('ip', ['netns', 'list']);
  for (const line of stdout.split('\n')) {
    const name = line.split(' ')[0] ?? '';
    const m = new RegExp(`^${PREFIX}(\\d+)-`).exec(name);
    if (m && !alive(Number(m[1]))) await deleteNetns(name);
  }
}

/**
 * A runner whose commands run inside network namespace `ns` (nsenter --net, no mount namespace).
 */
export function nsRunner(ns: string): Runner {
  return (file, args, opts) => run('nsenter', [`--net=/run/netns/${ns}`, file, ...args], opts);
}

/** A line watcher (ip monitor, nft monitor) inside network namespace `ns`. */
export function nsWatch(ns: string): LineWatcher {
  return (file, args, opts) =>
    watchLines('nsenter', [`--net=/run/netns/${ns}`, file, ...args], opts);
}

/** ip_forward kept at 1 inside `ns` (what the daemon does through /proc in its own namespace). */
export function nsForwarding(ns: string): () => Promise<boolean> {
  const runner = nsRunner(ns);
  return async () => {
    if ((await runner('sysctl', ['-n', 'net.ipv4.ip_forward'])).stdout.trim() === '1') return false;
    await runner('sysctl', ['-qw', 'net.ipv4.ip_forward=1']);
    return true;
  };
}

export class NetnsLab {
  private readonly names: string[] = [];
  private readonly children: ChildProcess[] = [];

  /** The full name of one of this lab's namespaces. */
  ns(short: string): string {
    return `${PREFIX}${process.pid}-${short}`;
  }

  async add(short: string): Promise<string> {
    const name = this.ns(short);
    await run('ip', ['netns', 'add', name]);
    this.names.push(name);
    await run('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
    return name;
  }

  /** A veth pair between two of our namespaces, each end addressed and up. */
  async link(
    a: { ns: string; dev: string; cidr: string },
    b: { ns: string; dev: string; cidr: string },
  ): Promise<void> {
    await run('ip', [
      '-n',
      a.ns,
      'link',
      'add',
      a.dev,
      'type',
      'veth',
      'peer',
      'name',
      b.dev,
      'netns',
      b.ns,
    ]);
    for (const end of [a, b]) {
      await run('ip', ['-n', end.ns, 'addr', 'add', end.cidr, 'dev', end.dev]);
      await run('ip', ['-n', end.ns, 'link', 'set', end.dev, 'up']);
    }
  }

  async exec(ns: string, file: string, args: readonly string[]): Promise<string> {
    return (await run('ip', ['netns', 'exec', ns, file, ...args])).stdout;
  }

  /** Starts a long-running process inside `ns`, its stdout+stderr appended to `logFile`. */
  spawn(ns: string, argv: readonly string[], logFile: string): ChildProcess {
    const child = startProcess(argv, { logFile, netns: ns });
    this.children.push(child);
    return child;
  }

  async destroy(): Promise<void> {
    for (const c of this.children)
      if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    for (const name of this.names.reverse()) await deleteNetns(name);
  }
}
