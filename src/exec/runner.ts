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
}

/** Feeds stdout chunks in, calls `onLine` for each complete line (holding a needle, when there are any). */
export function lineSplitter(needles: readonly string[] | undefined, onLine: (line: string) => void): (chunk: Buffer) => void {
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

/** Spawns a long-running program (`ip monitor`, `nft monitor`) and streams its stdout lines until it exits or `signal` aborts. */
export type LineWatcher = (file: string, args: readonly string[], opts: WatchOptions) => Promise<void>;

/** Resolves when the signal aborts; rejects with CommandError when the program exits on its own. */
export const watchLines: LineWatcher = async (file, args, opts) => {
  const child = execa(file, args, { cancelSignal: opts.signal, reject: false, encoding: 'buffer', buffer: false, stdin: 'ignore', stderr: 'pipe' });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    if (stderr.length < 4096) stderr += d.toString();
  });
  const split = lineSplitter(opts.needles, opts.onLine);
  child.stdout?.on('data', (chunk: Buffer) => {
    opts.onBytes?.(chunk.length);
    split(chunk);
  });
  const result = await child;
  if (opts.signal.aborted) return;
  throw new CommandError({ command: [file, ...args], exitCode: result.exitCode, stderr, reason: `exited (${result.exitCode ?? result.signal ?? 'unknown'})` });
};
