// One lock per IP store directory, across processes (Node has no flock):
// `<dir>/.twill.lock` is a hard link of a complete temp file naming its
// holder (pid, the process's start time from /proc/<pid>/stat, its pid
// namespace, a random token), so the lock appears whole or not at all and
// exactly one link succeeds. Waiters poll with jittered back-off up to a
// bound and then fail with code 11 ("try again later"). A lock whose holder
// is gone (no such pid, or the pid now belongs to a process started at
// another time) is removed; one whose holder cannot be judged (another pid
// namespace, unreadable content) only once it is older than FOREIGN_STALE_MS,
// far longer than any holder keeps it (a few file operations). Removing a
// stale lock is itself serialized by a second lock, `.twill.lock.break`,
// under which the lock is re-read and removed only if it is still the one
// judged stale; that second lock, held for microseconds, is removed when
// stale by renaming it aside and putting it back if it turned out live.
import { randomUUID } from 'node:crypto';
import { FILES, readFile, readlink, type Files } from './files.ts';
import { join } from 'node:path';
import { pause } from '../../src/util/abort.ts';
import { CNI_CODES, CniError, fail } from '../errors.ts';

export const LOCK_NAME = '.twill.lock';
export const BREAK_NAME = '.twill.lock.break';
/** How long a call waits for the store lock before answering 11. */
export const LOCK_WAIT_MS = 5000;
const BREAK_WAIT_MS = 1000;
/** Age after which a lock whose holder cannot be checked is taken to be stale. */
export const FOREIGN_STALE_MS = 30_000;
const MAX_DELAY_MS = 20;

/** What a lock file holds. */
export interface LockHolder {
  readonly pid: number;
  /** field 22 of /proc/<pid>/stat: tells a reused pid apart */
  readonly start: string;
  /** readlink /proc/self/ns/pid: pids of another namespace cannot be checked here */
  readonly pidns: string;
  readonly token: string;
}

export type LockWarn = (msg: string, fields: Record<string, unknown>) => void;

interface Seen {
  readonly text: string;
  readonly mtimeMs: number;
}

function code(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException).code;
}

/**
 * A random UUID drawn from fresh entropy. Were twill-cni built with a V8 startup snapshot (it was,
 * until its code cache proved quicker to start), randomUUID's cache of random bytes, filled by the
 * build's warm-up (it reserves an address), would be frozen into it, and every process would draw
 * the same temp names and lock tokens. Without the cache the store is right however it is built.
 */
export function freshUuid(): string {
  return randomUUID({ disableEntropyCache: true });
}

/** A process's start time (clock ticks since boot); undefined when there is no such process. */
export async function processStart(pid: number | 'self'): Promise<string | undefined> {
  let text: string;
  try {
    text = await readFile(`/proc/${pid}/stat`, 'utf8');
  } catch (err) {
    if (code(err) === 'ENOENT' || code(err) === 'ESRCH') return undefined;
    throw err;
  }
  // fields after the command name (which may hold spaces and parens) start at field 3
  return text.slice(text.lastIndexOf(')') + 2).split(' ')[19];
}

async function pidNamespace(): Promise<string> {
  return readlink('/proc/self/ns/pid').catch(() => '');
}

export function parseHolder(text: string): LockHolder | undefined {
  try {
    const h = JSON.parse(text) as Partial<LockHolder> | null;
    if (
      typeof h?.pid !== 'number' ||
      typeof h.start !== 'string' ||
      typeof h.pidns !== 'string' ||
      typeof h.token !== 'string'
    )
      return undefined;
    return { pid: h.pid, start: h.start, pidns: h.pidns, token: h.token };
  } catch {
    return undefined;
  }
}

export class DirLock {
  private readonly dir: string;
  private readonly warn: LockWarn;

  /** the file operations (files.ts; a test may wrap them) */
  private readonly files: Files;

  constructor(dir: string, warn: LockWarn = () => undefined, files: Files = FILES) {
    this.dir = dir;
    this.warn = warn;
    this.files = files;
  }

  /** Runs `fn` holding the lock; code 11 when the lock cannot be had within LOCK_WAIT_MS. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    const token = await this.acquire(LOCK_NAME, LOCK_WAIT_MS, (seen) => this.breakUnderLock(seen));
    try {
      return await fn();
    } finally {
      await this.release(LOCK_NAME, token);
    }
  }

  private async inspect(name: string): Promise<Seen | undefined> {
    try {
      const path = join(this.dir, name);
      const [text, st] = await Promise.all([
        this.files.readFile(path, 'utf8'),
        this.files.stat(path),
      ]);
      return { text, mtimeMs: st.mtimeMs };
    } catch (err) {
      if (code(err) === 'ENOENT') return undefined;
      throw err;
    }
  }

  private async isStale(seen: Seen, pidns: string): Promise<boolean> {
    const h = parseHolder(seen.text);
    if (h === undefined || h.pidns !== pidns) return Date.now() - seen.mtimeMs > FOREIGN_STALE_MS;
    return (await processStart(h.pid)) !== h.start;
  }

  private async acquire(
    name: string,
    waitMs: number,
    breakStale: (seen: Seen) => Promise<void>,
  ): Promise<string> {
    const pidns = await pidNamespace();
    const holder: LockHolder = {
      pid: process.pid,
      start: (await processStart('self')) ?? '',
      pidns,
      token: freshUuid(),
    };
    const tmp = join(this.dir, `.twill-${freshUuid()}.tmp`);
    await this.files.writeFile(tmp, JSON.stringify(holder), { mode: 0o644, flag: 'wx' });
    const path = join(this.dir, name);
    const deadline = Date.now() + waitMs;
    try {
      for (let delay = 1; ; delay = Math.min(delay * 2, MAX_DELAY_MS)) {
        try {
          await this.files.link(tmp, path);
          return holder.token;
        } catch (err) {
          if (code(err) !== 'EEXIST') throw err;
        }
        const seen = await this.inspect(name);
        if (seen === undefined) continue; // released meanwhile
        if (await this.isStale(seen, pidns)) {
          await breakStale(seen);
          if (Date.now() < deadline) continue;
        }
        if (Date.now() >= deadline) {
          const h = parseHolder(seen.text);
          const by = h ? `pid ${h.pid}` : 'an unknown holder';
          fail(
            CNI_CODES.tryAgain,
            `cannot lock the IP store ${this.dir}: ${path} is held by ${by} (for ${Math.round(Date.now() - seen.mtimeMs)} ms; waited ${waitMs} ms); try again later`,
          );
        }
        await pause(delay * (0.5 + Math.random()));
      }
    } finally {
      await this.files.unlink(tmp).catch(() => undefined);
    }
  }

  /** Deletes the lock file if it still carries `token`. */
  private async release(name: string, token: string): Promise<void> {
    const seen = await this.inspect(name).catch(() => undefined);
    if (parseHolder(seen?.text ?? '')?.token !== token) {
      this.warn('the store lock was no longer ours when released', { file: join(this.dir, name) });
      return;
    }
    await this.files
      .unlink(join(this.dir, name))
      .catch((err: unknown) =>
        this.warn('cannot remove the store lock', { file: join(this.dir, name), err: String(err) }),
      );
  }

  /** Removes the stale main lock `seen`: under the break lock, and only if it is still that one. */
  private async breakUnderLock(seen: Seen): Promise<void> {
    let token: string;
    try {
      token = await this.acquire(BREAK_NAME, BREAK_WAIT_MS, (s) => this.breakAside(BREAK_NAME, s));
    } catch (err) {
      // the caller goes on waiting for the main lock, within its own bound
      if (err instanceof CniError) return;
      throw err;
    }
    try {
      const now = await this.inspect(LOCK_NAME);
      if (now?.text === seen.text) {
        await this.files.unlink(join(this.dir, LOCK_NAME));
        this.warn('removed a stale store lock', {
          file: join(this.dir, LOCK_NAME),
          holder: seen.text,
        });
      }
    } finally {
      await this.release(BREAK_NAME, token);
    }
  }

  /**
   * Removes a stale break lock: moved aside, deleted if it is the stale one, put back otherwise.
   */
  private async breakAside(name: string, seen: Seen): Promise<void> {
    const path = join(this.dir, name);
    const aside = join(this.dir, `.twill-${freshUuid()}.stale`);
    try {
      await this.files.rename(path, aside);
    } catch (err) {
      if (code(err) === 'ENOENT') return;
      throw err;
    }
    const moved = await this.files.readFile(aside, 'utf8').catch(() => undefined);
    if (moved !== seen.text) await this.files.link(aside, path).catch(() => undefined);
    else this.warn('removed a stale store lock', { file: path, holder: seen.text });
    await this.files.unlink(aside).catch(() => undefined);
  }
}
