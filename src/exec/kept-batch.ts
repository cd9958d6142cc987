// Kept batches: one long-lived `ip -force -batch -` (and `bridge -force
// -batch -`) fed one batch at a time, for the passes that change a few
// entries without reading the kernel (a lease's delta, a repair). Starting
// `bridge` and then `ip` for every new peer costs two process starts in a row
// (about 15 to 40 ms on two cores); a line written to a process already
// running is applied in under a millisecond. The reconciler starts them
// (`warm`) when an observed pass finds the kernel as it wants it, so even the
// first lease change after a start waits for no process.
//
// The tool runs each line as it arrives and, with -force, goes on after a
// failure, reporting it on stderr as "Command failed -:<n>" with n counted
// over everything it has read. After a batch's lines comes one line the tool
// cannot parse (MARK: no kernel call): its report, with the number of that
// line, says every line before it has run and their reports have been read
// (stderr is unbuffered, in order). The batch's own reports are renumbered
// from 1, so batch-errors.ts reads them as it reads a one-shot batch's.
//
// The tool keeps each device's index by name from the first line that named
// it. A device deleted and made again (twill.<VNI> recreated) has a new index,
// and lines naming the old one fail. So a kept process is ended after any
// batch with a failed line (the caller's fallback, an observed pass, uses
// processes of its own), and the reconciler `recycle`s both after any failure
// and whenever an observed pass finds the kernel changed. A batch that times
// out or is cancelled ends its process too.
import { FORCE_BATCH_ARGS, renumberReports, reportLine } from './batch-errors.ts';
import { CommandError, type Feeder, type FedProcess, type RunResult } from './runner.ts';

/** The line after each batch: no command of `ip` or `bridge`, so it fails with no kernel call. */
export const MARK = 'twill-mark';

export interface KeptBatchOptions {
  readonly feed: Feeder;
  /** `ip` or `bridge` */
  readonly file: string;
  /** a process was started (the reconciler counts it among a pass's spawns) */
  readonly onSpawn?: () => void;
}

/** A kept process, with what its batches need to know of it. */
interface Kept {
  readonly proc: FedProcess;
  /** aborting it stops the process (a batch timed out or was cancelled) */
  readonly stop: AbortController;
  /** lines written to it */
  sent: number;
  /** the batch it runs now */
  batch: Batch | undefined;
}

interface Batch {
  /** the number of the MARK line */
  readonly mark: number;
  /** the number of the batch's first line, less one */
  readonly base: number;
  /** its stderr so far */
  err: string;
  /** where to look for the MARK's report next */
  from: number;
  readonly settle: (err: CommandError | undefined) => void;
}

/** One kept `<file> -force -batch -`, started by `warm` or a batch, and again after it ends. */
export class KeptBatch {
  private readonly o: KeptBatchOptions;
  private kept: Kept | undefined;
  /** one batch at a time */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(o: KeptBatchOptions) {
    this.o = o;
  }

  /**
   * Runs `lines` (each a command, without the program's name) in the kept process. Resolves when
   * all have run; rejects with a CommandError whose stderr is the batch's reports, numbered from 1,
   * when any failed, or when the process ended, timed out or was cancelled.
   */
  run(
    lines: readonly string[],
    o: { readonly signal: AbortSignal; readonly timeoutMs: number },
  ): Promise<RunResult> {
    const next = this.queue.then(() => this.runNow(lines, o));
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Starts the process now when none runs, so the next batch need not wait for its start. */
  warm(): void {
    this.kept ??= this.start();
  }

  /**
   * Ends the kept process (it exits when its input ends; a batch it runs still gets its answer);
   * the next batch starts another.
   */
  recycle(): void {
    const k = this.kept;
    this.kept = undefined;
    k?.proc.end().catch(() => undefined);
  }

  private async runNow(
    lines: readonly string[],
    o: { readonly signal: AbortSignal; readonly timeoutMs: number },
  ): Promise<RunResult> {
    if (o.signal.aborted) throw this.error('cancelled', '');
    const k = (this.kept ??= this.start());
    const base = k.sent;
    k.sent += lines.length + 1;
    const failed = await new Promise<CommandError | undefined>((resolve) => {
      const end = (e: CommandError | undefined): void => {
        clearTimeout(timer);
        o.signal.removeEventListener('abort', onAbort);
        k.batch = undefined;
        resolve(e);
      };
      const batch: Batch = { mark: k.sent, base, err: '', from: 0, settle: end };
      const kill = (reason: string): void => {
        if (this.kept === k) this.kept = undefined;
        k.stop.abort();
        end(this.error(reason, renumberReports(batch.err, base, true)));
      };
      const timer = setTimeout(() => kill('timed out'), o.timeoutMs);
      const onAbort = (): void => kill('cancelled');
      o.signal.addEventListener('abort', onAbort, { once: true });
      k.batch = batch;
      k.proc.write(`${lines.join('\n')}\n${MARK}\n`);
    });
    if (failed === undefined) return { stdout: '', stderr: '' };
    // a failed line may be a stale device index: the next batch starts afresh
    if (this.kept === k) this.recycle();
    throw failed;
  }

  private start(): Kept {
    const stop = new AbortController();
    const proc = this.o.feed(this.o.file, FORCE_BATCH_ARGS, {
      signal: stop.signal,
      idleMs: Infinity,
      collect: false,
      onStderr: (text) => this.heard(k, text),
    });
    const k: Kept = { proc, stop, sent: 0, batch: undefined };
    this.o.onSpawn?.();
    const ended = (reason: string): void => {
      if (this.kept === k) this.kept = undefined;
      const b = k.batch;
      b?.settle(this.error(reason, renumberReports(b.err, b.base, true)));
    };
    proc.done.then(
      () => ended('exited before its input ended'),
      (err: unknown) => ended(err instanceof CommandError ? err.reason : String(err)),
    );
    return k;
  }

  /** stderr of kept process `k`: settles its batch once the MARK's report is in. */
  private heard(k: Kept, text: string): void {
    const b = k.batch;
    if (b === undefined) return;
    b.err += text;
    const needle = reportLine(b.mark);
    const at = b.err.indexOf(needle, b.from);
    if (at < 0) {
      b.from = Math.max(0, b.err.length - needle.length);
      return;
    }
    const own = renumberReports(b.err.slice(0, at), b.base);
    b.settle(own === '' ? undefined : this.error('a line failed', own));
  }

  private error(reason: string, stderr: string): CommandError {
    return new CommandError({
      command: [this.o.file, ...FORCE_BATCH_ARGS],
      exitCode: undefined,
      stderr,
      reason,
    });
  }
}

/** A reconciler's kept `ip` and `bridge`, each started on first use. */
export class KeptBatches {
  private readonly tools: ReadonlyMap<string, KeptBatch>;

  constructor(o: { readonly feed: Feeder; readonly onSpawn?: () => void }) {
    this.tools = new Map(
      ['ip', 'bridge'].map((file) => [file, new KeptBatch({ ...o, file })] as const),
    );
  }

  /** The kept process for `file` (`ip`, `bridge`); undefined for any other program. */
  for(file: string): KeptBatch | undefined {
    return this.tools.get(file);
  }

  /** Starts those of `files` that are not running (`ip`; `bridge` too for a vxlan device). */
  warm(files: readonly string[]): void {
    for (const f of files) this.tools.get(f)?.warm();
  }

  /** Ends both (a device was made or deleted; the daemon stops). */
  recycle(): void {
    for (const t of this.tools.values()) t.recycle();
  }
}
