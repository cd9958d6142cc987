// Network namespaces for the tests, the lab and the bench. Every namespace a
// NetnsLab makes carries its prefix: by default the test prefix with the
// creating process's pid (twt<pid>-<name>), so a later run can sweep
// namespaces whose creator died; the lab's are <lab name>-<name>, so `down`
// finds them all, even after a crash. A NetnsLab touches only the
// namespaces it made, and `destroy` kills their processes and deletes them
// even when the test failed. One-shot commands run inside a namespace through
// `nsenter --net` (no mount namespace), long-running ones through
// process.ts.
import type { ChildProcess } from 'node:child_process';
import {
  openFed,
  run,
  watchLines,
  type Feeder,
  type LineWatcher,
  type RunOptions,
  type RunResult,
  type Runner,
} from '../../src/exec/runner.ts';
import { alive, startProcess, stopPid } from './process.ts';

const TEST_PREFIX = 'twt';

/** argv run inside network namespace `ns` (by its name) through nsenter. */
export function nsenterArgv(ns: string, argv: readonly string[]): string[] {
  return ['nsenter', `--net=/run/netns/${ns}`, ...argv];
}

/** Runs argv inside namespace `ns`; rejects when it exits non-zero. */
export function nsRun(ns: string, argv: readonly string[], opts?: RunOptions): Promise<RunResult> {
  const [file, ...args] = nsenterArgv(ns, argv);
  return run(file as string, args, opts);
}

/**
 * A runner whose commands run inside network namespace `ns` (nsenter --net, no mount namespace).
 */
export function nsRunner(ns: string): Runner {
  return (file, args, opts) => nsRun(ns, [file, ...args], opts);
}

/** A fed process (the reconciler's kept `ip -batch -`) inside network namespace `ns`. */
export function nsFeeder(ns: string): Feeder {
  return (file, args, opts) => {
    const [nsenter, ...rest] = nsenterArgv(ns, [file, ...args]);
    return openFed(nsenter as string, rest, opts);
  };
}

/** A line watcher (ip monitor, nft monitor) inside network namespace `ns`. */
export function nsWatch(ns: string): LineWatcher {
  return (file, args, opts) => {
    const [nsenter, ...rest] = nsenterArgv(ns, [file, ...args]);
    return watchLines(nsenter as string, rest, opts);
  };
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

/** The processes in network namespace `ns` (none when it is gone). */
export async function namespacePids(ns: string): Promise<number[]> {
  return run('ip', ['netns', 'pids', ns]).then(
    (r) => r.stdout.split('\n').filter(Boolean).map(Number),
    () => [],
  );
}

/** Kills every process in a namespace (SIGKILL), and waits until they are gone. */
export async function killNamespaceProcesses(ns: string): Promise<void> {
  for (const pid of await namespacePids(ns)) await stopPid(pid, 'kill');
}

/** Kills the namespace's processes, then deletes it; one already gone is no error. */
export async function deleteNetns(name: string): Promise<void> {
  await killNamespaceProcesses(name);
  await run('ip', ['netns', 'del', name], { timeoutMs: 20_000 }).catch(() => undefined);
}

/** The names of the namespaces that start with `prefix`. */
export async function listNetns(prefix: string): Promise<string[]> {
  const { stdout } = await run('ip', ['netns', 'list'], { timeoutMs: 20_000 });
  return stdout
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n.startsWith(prefix));
}

/** Removes namespaces left by test runs whose process no longer exists. */
export async function sweepStaleNetns(): Promise<void> {
  for (const name of await listNetns(TEST_PREFIX)) {
    const m = new RegExp(`^${TEST_PREFIX}(\\d+)-`).exec(name);
    if (m && !alive(Number(m[1]))) await deleteNetns(name);
  }
}

/** One end of a veth pair: its namespace, its name there, and the address it gets. */
export interface VethEnd {
  readonly ns: string;
  readonly dev: string;
  readonly cidr: string;
}

const ip = (args: readonly string[]): Promise<unknown> => run('ip', args, { timeoutMs: 20_000 });

/**
 * A veth pair: `dev` in `ns` (with `mtu` when given), its peer `peerDev` in `peerNs`; both down and
 * unaddressed.
 */
export async function addVeth(o: {
  ns: string;
  dev: string;
  peerNs: string;
  peerDev: string;
  mtu?: number;
}): Promise<void> {
  const mtu = o.mtu === undefined ? [] : ['mtu', String(o.mtu)];
  const peer = ['peer', 'name', o.peerDev, 'netns', o.peerNs];
  await ip(['-n', o.ns, 'link', 'add', o.dev, ...mtu, 'type', 'veth', ...peer]);
}

/** A veth pair between two namespaces, each end addressed and up. */
export async function vethPair(a: VethEnd, b: VethEnd): Promise<void> {
  await addVeth({ ns: a.ns, dev: a.dev, peerNs: b.ns, peerDev: b.dev });
  for (const end of [a, b]) {
    await ip(['-n', end.ns, 'addr', 'add', end.cidr, 'dev', end.dev]);
    await ip(['-n', end.ns, 'link', 'set', end.dev, 'up']);
  }
}

export class NetnsLab {
  readonly prefix: string;
  private readonly names: string[] = [];
  private readonly children: ChildProcess[] = [];

  /** `prefix`: the tests' own (twt<pid>-) unless told */
  constructor(prefix = `${TEST_PREFIX}${process.pid}-`) {
    this.prefix = prefix;
  }

  /** The full name of one of this lab's namespaces. */
  ns(short: string): string {
    return `${this.prefix}${short}`;
  }

  /** Makes namespace `short` (its loopback up); its full name. */
  async add(short: string): Promise<string> {
    const name = this.ns(short);
    await run('ip', ['netns', 'add', name], { timeoutMs: 20_000 });
    this.names.push(name);
    await run('ip', ['-n', name, 'link', 'set', 'lo', 'up'], { timeoutMs: 20_000 });
    return name;
  }

  /** A veth pair between two of our namespaces, each end addressed and up. */
  async link(a: VethEnd, b: VethEnd): Promise<void> {
    await vethPair(a, b);
  }

  async exec(ns: string, file: string, args: readonly string[]): Promise<string> {
    return (await nsRun(ns, [file, ...args])).stdout;
  }

  /** Starts a long-running process inside `ns`, its stdout+stderr appended to `logFile`. */
  spawn(ns: string, argv: readonly string[], logFile: string): ChildProcess {
    const child = startProcess(argv, { logFile, netns: ns });
    this.children.push(child);
    return child;
  }

  /** Kills the processes this lab started, then every namespace it made, with what runs in it. */
  async destroy(): Promise<void> {
    for (const c of this.children)
      if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    for (const name of this.names.reverse()) await deleteNetns(name);
  }
}
