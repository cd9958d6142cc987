// A long-running process inside a namespace whose stdout lines are
// timestamped as they arrive (wall clock, sub-millisecond): `ip monitor route`
// to see the moment a route appears, or a small etcd client script that
// answers each command on its stdin. Waiters match lines by predicate; the
// process is killed by `close`.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { nsenterArgv } from '../lab/kit/netns.ts';

export interface TappedLine {
  readonly at: number;
  readonly text: string;
}

interface Waiter {
  readonly match: (line: string) => boolean;
  readonly resolve: (l: TappedLine) => void;
}

/** Wall-clock milliseconds with sub-millisecond resolution, comparable across processes. */
export const wallMs = (): number => performance.timeOrigin + performance.now();

export class LineTap {
  private readonly child: ChildProcess;
  private readonly waiters = new Set<Waiter>();
  private readonly seen: TappedLine[] = [];
  private stderr = '';

  constructor(ns: string, argv: readonly string[]) {
    const [file, ...args] = nsenterArgv(ns, argv);
    this.child = spawn(file as string, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stderr?.on('data', (d: Buffer) => {
      if (this.stderr.length < 4096) this.stderr += d.toString();
    });
    const lines = createInterface({ input: this.child.stdout as NodeJS.ReadableStream });
    lines.on('line', (text) => this.onLine({ at: wallMs(), text }));
  }

  private onLine(l: TappedLine): void {
    for (const w of this.waiters) {
      if (w.match(l.text)) {
        this.waiters.delete(w);
        w.resolve(l);
        return;
      }
    }
    this.seen.push(l);
    if (this.seen.length > 10_000) this.seen.shift();
  }

  /**
   * The first line (already seen and unclaimed, or to come) that matches; rejects after
   * `timeoutMs`.
   */
  next(match: (line: string) => boolean, timeoutMs: number): Promise<TappedLine> {
    const at = this.seen.findIndex((l) => match(l.text));
    if (at >= 0) return Promise.resolve(this.seen.splice(at, 1)[0] as TappedLine);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(w);
        reject(
          new Error(
            `bench: no matching line within ${timeoutMs} ms${this.stderr ? ` (stderr: ${this.stderr.trim()})` : ''}`,
          ),
        );
      }, timeoutMs);
      const w: Waiter = { match, resolve: (l) => (clearTimeout(timer), resolve(l)) };
      this.waiters.add(w);
    });
  }

  /** Drops every line seen so far and not claimed. */
  forget(): void {
    this.seen.length = 0;
  }

  write(line: string): void {
    this.child.stdin?.write(`${line}\n`);
  }

  close(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}
