// The one place that spawns processes (DESIGN.md rule 3): arguments are
// arrays, every call has a timeout and an AbortSignal, and a failure is a
// COMMAND_FAILED error carrying the command, exit code and stderr.
import { execa } from 'execa';
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

  constructor(o: { command: readonly string[]; exitCode: number | undefined; stderr: string; reason: string }) {
    super('COMMAND_FAILED', `${o.command.join(' ')}: ${o.reason}${o.stderr ? `: ${o.stderr.trim()}` : ''}`);
    this.command = o.command;
    this.exitCode = o.exitCode;
    this.stderr = o.stderr;
  }
}

export type Runner = (file: string, args: readonly string[], opts?: RunOptions) => Promise<RunResult>;

/** Runs a program and resolves with its output; rejects with CommandError. */
export const run: Runner = async (file, args, opts = {}) => {
  const result = await execa(file, args, {
    input: opts.input,
    timeout: opts.timeoutMs ?? 10_000,
    cancelSignal: opts.signal,
    reject: false,
    stripFinalNewline: false,
    encoding: 'utf8',
  });
  if (result.failed) {
    const reason = result.timedOut
      ? 'timed out'
      : result.isCanceled
        ? 'cancelled'
        : result.exitCode !== undefined
          ? `exit code ${result.exitCode}`
          : (result.shortMessage ?? 'failed');
    throw new CommandError({ command: [file, ...args], exitCode: result.exitCode, stderr: String(result.stderr), reason });
  }
  return { stdout: String(result.stdout), stderr: String(result.stderr) };
};

/** Runs a command whose stdout is JSON (`ip -json …`) and parses it. */
export async function runJson(runner: Runner, file: string, args: readonly string[], opts?: RunOptions): Promise<unknown> {
  const { stdout } = await runner(file, args, opts);
  const text = stdout.trim();
  return text === '' ? [] : (JSON.parse(text) as unknown);
}

export interface WatchOptions {
  readonly signal: AbortSignal;
  /** called for every line the program prints on stdout */
  readonly onLine: (line: string) => void;
}

/** Spawns a long-running program (`ip monitor`, `nft monitor`) and streams its stdout lines until it exits or `signal` aborts. */
export type LineWatcher = (file: string, args: readonly string[], opts: WatchOptions) => Promise<void>;

/** Resolves when the signal aborts; rejects with CommandError when the program exits on its own. */
export const watchLines: LineWatcher = async (file, args, opts) => {
  const child = execa(file, args, { cancelSignal: opts.signal, reject: false, encoding: 'utf8', lines: false, buffer: false, stdin: 'ignore', stderr: 'pipe' });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    if (stderr.length < 4096) stderr += d.toString();
  });
  for await (const line of child.iterable({ from: 'stdout' })) opts.onLine(String(line));
  const result = await child;
  if (opts.signal.aborted) return;
  throw new CommandError({ command: [file, ...args], exitCode: result.exitCode, stderr, reason: `exited (${result.exitCode ?? result.signal ?? 'unknown'})` });
};
