// The one place that spawns processes (docs/design.md, rule 3): arguments are
// arrays, every call has a timeout and an AbortSignal, and a failure is a
// COMMAND_FAILED error carrying the command, exit code and stderr. Plain
// node:child_process: a spawn through execa cost the daemon 2.5 times the
// CPU (3.9 ms against 1.6 ms a spawn, measured), and its module 80 ms of
// start-up.
//
// Four shapes: `run` (input all known at the start, output at the end),
// `runJson` on top of it, `watchLines` (a monitor that runs until aborted),
// and `openFed` (a process started before its input is known and fed as the
// call goes, its output seen as it arrives: the CNI plugin's live
// `ip -batch -`). `run` and `openFed` fail for the same reasons (exit code,
// signal, spawn error, "timed out", "cancelled"), and every child is stopped
// with SIGTERM, then SIGKILL.
import { spawn, type ChildProcess } from 'node:child_process';
import { TwillError } from '../errors.ts';

export interface RunOptions {
  readonly signal?: AbortSignal;
  /** milliseconds; default 10 s */
  readonly timeoutMs?: number;
  /** text written to stdin (for `ip -batch -`, `iptables-restore`) */
  readonly input?: string;
}

export interface RunResult {
  readonly stdout: string;
  readonly stderr: string;
}

export class CommandError extends TwillError {
  readonly command: readonly string[];
  readonly exitCode: number | undefined;
  readonly stderr: string;
  /** why it failed, as the message says it ("exit code 1", "timed out", …) */
  readonly reason: string;

  constructor(o: {
    command: readonly string[];
    exitCode: number | undefined;
    stderr: string;
    reason: string;
  }) {
    super(
      'COMMAND_FAILED',
      `${o.command.join(' ')}: ${o.reason}${o.stderr ? `: ${o.stderr.trim()}` : ''}`,
    );
    this.command = o.command;
    this.exitCode = o.exitCode;
    this.stderr = o.stderr;
    this.reason = o.reason;
  }
}

/** A command that failed because the device it names does not exist (or no longer does). */
export function isNoDevice(err: unknown): boolean {
  return err instanceof CommandError && /Cannot find device|does not exist/.test(err.stderr);
}

/**
 * A command that failed because its program is not installed (spawned directly: ENOENT; through
 * nsenter or a shell: exit 127).
 */
export function isMissingTool(err: unknown): boolean {
  if (!(err instanceof CommandError)) return false;
  return err.exitCode === 127 || (err.exitCode === undefined && /ENOENT/.test(err.reason));
}

export type Runner = (
  file: string,
  args: readonly string[],
  opts?: RunOptions,
) => Promise<RunResult>;

/** After SIGTERM (timeout, cancel), how long a child gets before SIGKILL. */
const KILL_GRACE_MS = 2_000;

/** Sends SIGTERM now, and SIGKILL if the child is still there after KILL_GRACE_MS. */
function terminate(child: ChildProcess): void {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  setTimeout(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }, KILL_GRACE_MS).unref();
}

/** Why a finished child counts as failed, or undefined when it succeeded. */
function failure(o: {
  timedOut: boolean;
  cancelled: boolean;
  code: number | null;
  signal: NodeJS.Signals | null;
  spawnError: Error | undefined;
}): string | undefined {
  if (o.timedOut) return 'timed out';
  if (o.cancelled) return 'cancelled';
  if (o.spawnError) return o.spawnError.message;
  if (o.code !== null) return o.code === 0 ? undefined : `exit code ${o.code}`;
  return `killed by ${o.signal ?? 'a signal'}`;
}

/** A finished child's outcome, as `run` and `openFed` settle with it: its output, or why not. */
function settle(
  command: readonly string[],
  end: Parameters<typeof failure>[0],
  out: RunResult,
  resolve: (r: RunResult) => void,
  reject: (e: CommandError) => void,
): void {
  const reason = failure(end);
  if (reason === undefined) resolve(out);
  else
    reject(
      new CommandError({
        command,
        exitCode: end.spawnError ? undefined : (end.code ?? undefined),
        stderr: out.stderr,
        reason,
      }),
    );
}

/** Runs a program and resolves with its output; rejects with CommandError. */
export const run: Runner = (file, args, opts = {}) =>
  new Promise((resolve, reject) => {
    const command = [file, ...args];
    if (opts.signal?.aborted) {
      reject(new CommandError({ command, exitCode: undefined, stderr: '', reason: 'cancelled' }));
      return;
    }
    const child = spawn(file, args, {
      stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on('data', (d: Buffer) => out.push(d));
    child.stderr?.on('data', (d: Buffer) => err.push(d));
    const state = { timedOut: false, cancelled: false, spawnError: undefined as Error | undefined };
    const timer = setTimeout(() => {
      state.timedOut = true;
      terminate(child);
    }, opts.timeoutMs ?? 10_000);
    const onAbort = (): void => {
      state.cancelled = true;
      terminate(child);
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    child.on('error', (e) => (state.spawnError = e));
    if (opts.input !== undefined && child.stdin) {
      // a child that exits without reading all its input: its exit code tells
      child.stdin.on('error', () => undefined);
      child.stdin.end(opts.input);
    }
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      const stdout = Buffer.concat(out).toString('utf8');
      const stderr = Buffer.concat(err).toString('utf8');
      settle(command, { ...state, code, signal }, { stdout, stderr }, resolve, reject);
    });
  });

/** Runs a command whose stdout is JSON (`ip -json …`) and parses it. */
export async function runJson(
  runner: Runner,
  file: string,
  args: readonly string[],
  opts?: RunOptions,
): Promise<unknown> {
  const { stdout } = await runner(file, args, opts);
  const text = stdout.trim();
  return text === '' ? [] : (JSON.parse(text) as unknown);
}

export interface WatchOptions {
  readonly signal: AbortSignal;
  /** called for every line the program prints on stdout (with `needles`: only lines holding one) */
  readonly onLine: (line: string) => void;
  /**
   * Substrings a line must hold to matter. Output is then scanned as raw
   * bytes and only chunks holding one are split into lines: `nft monitor`
   * prints every rule of a kube-proxy rewrite (tens of thousands of lines),
   * and turning each into a string cost a tenth of a core.
   */
  readonly needles?: readonly string[];
  /** called with the size of every stdout chunk (to notice a flood) */
  readonly onBytes?: (n: number) => void;
  /**
   * called with what the program writes to stderr while it runs (`ip monitor` reports lost events
   * there)
   */
  readonly onStderr?: (text: string) => void;
  /**
   * Written to the program's stdin at its start and again every `everyMs` until it ends: an
   * interactive program (`nft -i`) polled with no process per round. Without it, stdin is closed.
   */
  readonly feed?: { readonly text: string; readonly everyMs: number };
}

/**
 * Feeds stdout chunks in, calls `onLine` for each complete line (holding a needle, when there are
 * any).
 */
export function lineSplitter(
  needles: readonly string[] | undefined,
  onLine: (line: string) => void,
): (chunk: Buffer) => void {
  const keys = (needles ?? []).map((n) => Buffer.from(n));
  const texts = needles ?? [];
  let pending = Buffer.alloc(0);
  return (chunk) => {
    const data = pending.length > 0 ? Buffer.concat([pending, chunk]) : chunk;
    const end = data.lastIndexOf(0x0a);
    if (end < 0) {
      pending = data.length > 65_536 ? Buffer.alloc(0) : Buffer.from(data);
      return;
    }
    const complete = data.subarray(0, end);
    pending = Buffer.from(data.subarray(end + 1));
    if (keys.length > 0 && !keys.some((k) => complete.includes(k))) return;
    for (const line of complete.toString('utf8').split('\n')) {
      if (texts.length === 0 || texts.some((t) => line.includes(t))) onLine(line);
    }
  };
}

/**
 * Spawns a long-running program (`ip monitor`, `nft monitor`) and streams its stdout lines until it
 * exits or `signal` aborts.
 */
export type LineWatcher = (
  file: string,
  args: readonly string[],
  opts: WatchOptions,
) => Promise<void>;

/** Resolves when the signal aborts; rejects with CommandError when the program exits on its own. */
export const watchLines: LineWatcher = (file, args, opts) =>
  new Promise((resolve, reject) => {
    if (opts.signal.aborted) {
      resolve();
      return;
    }
    const feed = opts.feed;
    const child = spawn(file, args, { stdio: [feed ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
    let feeding: NodeJS.Timeout | undefined;
    if (feed) {
      // a program that ends early: its exit tells, not the broken pipe
      child.stdin?.on('error', () => undefined);
      const send = (): void => {
        if (child.stdin?.writable === true) child.stdin.write(feed.text);
      };
      send();
      feeding = setInterval(send, feed.everyMs);
    }
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => {
      if (stderr.length < 4096) stderr += d.toString();
      opts.onStderr?.(d.toString());
    });
    const split = lineSplitter(opts.needles, opts.onLine);
    child.stdout?.on('data', (chunk: Buffer) => {
      opts.onBytes?.(chunk.length);
      split(chunk);
    });
    const onAbort = (): void => terminate(child);
    opts.signal.addEventListener('abort', onAbort, { once: true });
    let spawnError: Error | undefined;
    child.on('error', (e) => (spawnError = e));
    child.on('close', (code, signal) => {
      clearInterval(feeding);
      opts.signal.removeEventListener('abort', onAbort);
      if (opts.signal.aborted) return resolve();
      reject(
        new CommandError({
          command: [file, ...args],
          exitCode: spawnError ? undefined : (code ?? undefined),
          stderr,
          reason: spawnError ? spawnError.message : `exited (${code ?? signal ?? 'unknown'})`,
        }),
      );
    });
  });

export interface FedOptions {
  readonly signal?: AbortSignal;
  /**
   * milliseconds from `end` to the process's exit; default 10 s. Before `end`, `idleMs` bounds
   * it instead: a process fed as the call goes waits on the caller's own work (a lock, a
   * reservation), which must not count against the time its own work gets.
   */
  readonly timeoutMs?: number;
  /**
   * milliseconds from the start until `end` is called; default 60 s; Infinity for a process kept
   * for many calls (kept-batch.ts), whose every call has its own limit
   */
  readonly idleMs?: number;
  /** called with stdout as it arrives, decoded as UTF-8 (a character is never split) */
  readonly onStdout?: (text: string) => void;
  /** called with stderr as it arrives, decoded as UTF-8 */
  readonly onStderr?: (text: string) => void;
  /**
   * false: output goes only to the callbacks, and the outcome's stdout and stderr are empty (a
   * process kept for hours must not keep all it ever printed); default true
   */
  readonly collect?: boolean;
}

/** A process fed as it goes: what `openFed` returns. */
export interface FedProcess {
  /** Sends `text` to stdin (nothing once the process has exited); an Error after `end`. */
  write(text: string): void;
  /**
   * Sends `text` (when given) and closes stdin; the outcome, as `run`'s. A second call sends
   * nothing and gives the same outcome.
   */
  end(text?: string): Promise<RunResult>;
  /** The outcome, without ending stdin: settles when the process exits (on its own, or stopped). */
  readonly done: Promise<RunResult>;
}

/** Starts a process to be fed as it goes (`openFed`; tests may start another). */
export type Feeder = (file: string, args: readonly string[], opts?: FedOptions) => FedProcess;

/**
 * Spawns a program whose stdin stays open for `write`s until `end`: `ip -batch -` started before
 * its lines are known runs each as it arrives. Fails as `run` does, with a CommandError.
 */
export const openFed: Feeder = (file, args, opts = {}) => {
  const command = [file, ...args];
  if (opts.signal?.aborted) {
    const done = Promise.reject(
      new CommandError({ command, exitCode: undefined, stderr: '', reason: 'cancelled' }),
    );
    done.catch(() => undefined);
    let ended = false;
    return {
      done,
      write: () => {
        if (ended) throw new Error(`${command.join(' ')}: write after end`);
      },
      end: () => {
        ended = true;
        return done;
      },
    };
  }
  const child = spawn(file, args, { stdio: 'pipe' });
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8');
  child.stderr?.setEncoding('utf8');
  const collect = opts.collect !== false;
  child.stdout?.on('data', (d: string) => {
    if (collect) stdout += d;
    opts.onStdout?.(d);
  });
  child.stderr?.on('data', (d: string) => {
    if (collect) stderr += d;
    opts.onStderr?.(d);
  });
  // a child that exits without reading all its input: its exit code tells
  child.stdin?.on('error', () => undefined);
  const state = { timedOut: false, cancelled: false, spawnError: undefined as Error | undefined };
  let timer: NodeJS.Timeout | undefined;
  const limit = (ms: number): void => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      state.timedOut = true;
      terminate(child);
    }, ms);
  };
  const idleMs = opts.idleMs ?? 60_000;
  if (Number.isFinite(idleMs)) limit(idleMs);
  const onAbort = (): void => {
    state.cancelled = true;
    terminate(child);
  };
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  child.on('error', (e) => (state.spawnError = e));
  let exited = false;
  const done = new Promise<RunResult>((resolve, reject) => {
    child.on('close', (code, signal) => {
      exited = true;
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      settle(command, { ...state, code, signal }, { stdout, stderr }, resolve, reject);
    });
  });
  // the caller sees a failure through `done` or `end`, when it looks
  done.catch(() => undefined);
  let ended = false;
  return {
    done,
    write: (text) => {
      if (ended) throw new Error(`${command.join(' ')}: write after end`);
      if (exited) return;
      child.stdin?.write(text);
    },
    end: (text) => {
      if (!ended && !exited) {
        limit(opts.timeoutMs ?? 10_000);
        child.stdin?.end(text);
      }
      ended = true;
      return done;
    },
  };
};
