// The IP store on disk, in host-local's layout so existing tools read it:
// `<dataDir>/<network>/<ip>` holds `<containerID>\r\n<ifname>` and
// `last_reserved_ip.0` the last address handed out. A reservation is a hard
// link of a complete temp file onto the address's name: exclusive (the link
// fails when the name exists) and never seen half written, so concurrent
// ADDs never share an address. Temp files have random names and are created
// exclusively. `last_reserved_ip.0` is only a round-robin hint: failing to
// read or write it is logged, never fatal (a reserved address must not leak
// because the hint could not be saved). Every check-then-act (reserve: list
// then link; DEL's release: find then unlink; GC's scan, and its re-read of
// owner and age right before each unlink) runs under the directory's lock
// (lock.ts), so that no release can delete a file reserved again between
// its check and its unlink.
import { randomUUID } from 'node:crypto';
import { link, mkdir, readFile, readdir, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { formatIpv4, parseIpv4 } from '../../src/net/ipv4.ts';
import { CNI_CODES, fail } from '../errors.ts';
import { DirLock } from './lock.ts';
import { candidates, formatOwner, parseOwner, poolSize, type Pool } from './pool.ts';

export const LAST_RESERVED = 'last_reserved_ip.0';

export interface StoreEntry {
  readonly ip: string;
  readonly containerId: string;
  readonly ifname: string;
  /** the file's mtime: when the address was reserved */
  readonly writtenMs: number;
}

function isEexist(err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === 'EEXIST';
}

function isEnoent(err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === 'ENOENT';
}

async function readIfExists(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (err) {
    if (isEnoent(err)) return undefined;
    throw err;
  }
}

/** What a store reports that is worth a log line but fails nothing. */
export type StoreWarn = (msg: string, fields: Record<string, unknown>) => void;

/** What GC's conditional release found. */
export type ReleaseOutcome = 'released' | 'gone' | 'owner-changed' | 'too-new';

export class IpStore {
  /** `<dataDir>/<network name>` */
  readonly dir: string;
  private readonly warn: StoreWarn;
  private readonly lock: DirLock;

  constructor(dir: string, warn: StoreWarn = () => undefined) {
    this.dir = dir;
    this.warn = warn;
    this.lock = new DirLock(dir, warn);
  }

  /**
   * Runs `fn` under the directory's lock; `whenMissing` instead when the directory does not exist
   * (nothing to act on).
   */
  private async locked<T>(fn: () => Promise<T>, whenMissing: () => T): Promise<T> {
    try {
      await stat(this.dir);
    } catch (err) {
      if (isEnoent(err)) return whenMissing();
      throw err;
    }
    return this.lock.run(fn);
  }

  private tmpName(): string {
    return join(this.dir, `.twill-${randomUUID()}.tmp`);
  }

  /** Writes a new temp file exclusively ('wx': never through an existing name or symlink). */
  private async writeTmp(text: string): Promise<string> {
    const tmp = this.tmpName();
    await writeFile(tmp, text, { mode: 0o644, flag: 'wx' });
    return tmp;
  }

  private async readLast(): Promise<number | undefined> {
    try {
      return parseIpv4((await readIfExists(join(this.dir, LAST_RESERVED)))?.trim() ?? '');
    } catch (err) {
      this.warn('cannot read the round-robin hint; starting at the first address', {
        file: join(this.dir, LAST_RESERVED),
        err: String(err),
      });
      return undefined;
    }
  }

  private async usedAndLast(): Promise<{ used: Set<number>; last: number | undefined }> {
    const names = await readdir(this.dir);
    const used = new Set(names.map(parseIpv4).filter((a) => a !== undefined));
    return { used, last: await this.readLast() };
  }

  /** Reserves the next free address of the pool for an attachment; code 103 when full. */
  async reserve(o: { pool: Pool; containerId: string; ifname: string }): Promise<number> {
    await mkdir(this.dir, { recursive: true });
    return this.lock.run(() => this.reserveLocked(o));
  }

  private async reserveLocked(o: {
    pool: Pool;
    containerId: string;
    ifname: string;
  }): Promise<number> {
    const { used, last } = await this.usedAndLast();
    const tmp = await this.writeTmp(formatOwner(o.containerId, o.ifname));
    try {
      for (const addr of candidates(o.pool, last)) {
        if (used.has(addr)) continue;
        try {
          await link(tmp, join(this.dir, formatIpv4(addr)));
        } catch (err) {
          if (isEexist(err)) continue; // taken by a concurrent ADD since we listed
          throw err;
        }
        await this.writeLast(addr);
        return addr;
      }
    } finally {
      await unlink(tmp).catch(() => undefined);
    }
    const size = poolSize(o.pool);
    fail(
      CNI_CODES.exhausted,
      `no free address in ${this.dir}: all ${size} addresses of the node's subnet are reserved`,
    );
  }

  /** Saves the round-robin hint; best effort (the address is reserved either way). */
  private async writeLast(addr: number): Promise<void> {
    let tmp: string | undefined;
    try {
      tmp = await this.writeTmp(formatIpv4(addr));
      await rename(tmp, join(this.dir, LAST_RESERVED));
    } catch (err) {
      this.warn('cannot save the round-robin hint; the address stays reserved', {
        file: join(this.dir, LAST_RESERVED),
        ip: formatIpv4(addr),
        err: String(err),
      });
      if (tmp !== undefined) await unlink(tmp).catch(() => undefined);
    }
  }

  /** An address file's mtime; undefined when it is gone. */
  private async writtenMs(ip: string): Promise<number | undefined> {
    try {
      return (await stat(join(this.dir, ip))).mtimeMs;
    } catch (err) {
      if (isEnoent(err)) return undefined;
      throw err;
    }
  }

  /** Every reservation, read under the lock (GC's scan). */
  async snapshot(): Promise<StoreEntry[]> {
    return this.locked(
      () => this.entries(),
      () => [],
    );
  }

  /** Every reservation (files whose name is an address), without the lock: a reader's view. */
  async entries(): Promise<StoreEntry[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (err) {
      if (isEnoent(err)) return [];
      throw err;
    }
    const out: StoreEntry[] = [];
    for (const ip of names.filter((n) => parseIpv4(n) !== undefined)) {
      const text = await readIfExists(join(this.dir, ip));
      const writtenMs = await this.writtenMs(ip);
      if (text !== undefined && writtenMs !== undefined)
        out.push({ ip, ...parseOwner(text), writtenMs });
    }
    return out;
  }

  /** The addresses reserved for one attachment. */
  async find(containerId: string, ifname: string): Promise<string[]> {
    return (await this.entries())
      .filter((e) => e.containerId === containerId && e.ifname === ifname)
      .map((e) => e.ip);
  }

  /** Deletes one address's file under the lock; true when it was there. */
  async release(ip: string): Promise<boolean> {
    return this.locked(
      () => this.unlinkIp(ip),
      () => false,
    );
  }

  private async unlinkIp(ip: string): Promise<boolean> {
    try {
      await unlink(join(this.dir, ip));
      return true;
    } catch (err) {
      if (isEnoent(err)) return false;
      throw err;
    }
  }

  /**
   * GC's release: deletes `entry`'s file only if it still names the same
   * owner and was last written before `notAfterMs` (an ADD that reserved it
   * after GC started is not in the runtime's list yet). Checked right before
   * the unlink, so an address released and reserved again since it was
   * listed is left alone. Check and unlink run under the lock, so no
   * reservation can slip in between them.
   */
  async releaseIfStale(entry: StoreEntry, notAfterMs: number): Promise<ReleaseOutcome> {
    return this.locked(
      () => this.releaseIfStaleLocked(entry, notAfterMs),
      () => 'gone' as const,
    );
  }

  private async releaseIfStaleLocked(
    entry: StoreEntry,
    notAfterMs: number,
  ): Promise<ReleaseOutcome> {
    const text = await readIfExists(join(this.dir, entry.ip));
    if (text === undefined) return 'gone';
    const now = parseOwner(text);
    if (now.containerId !== entry.containerId || now.ifname !== entry.ifname)
      return 'owner-changed';
    const mtimeMs = await this.writtenMs(entry.ip);
    if (mtimeMs === undefined) return 'gone';
    if (mtimeMs >= notAfterMs) return 'too-new';
    return (await this.unlinkIp(entry.ip)) ? 'released' : 'gone';
  }

  /** Releases every address of one attachment, found and deleted under one lock; returns them. */
  async releaseAttachment(containerId: string, ifname: string): Promise<string[]> {
    return this.locked(
      async () => {
        const ips = await this.find(containerId, ifname);
        for (const ip of ips) await this.unlinkIp(ip);
        return ips;
      },
      () => [],
    );
  }
}
