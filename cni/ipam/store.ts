// The IP store on disk, in host-local's layout so existing tools read it:
// `<dataDir>/<network>/<ip>` holds `<containerID>\r\n<ifname>` and
// `last_reserved_ip.0` the last address handed out. On a dual-stack node the
// IPv6 addresses live in the same directory (named in canonical text, as Go
// writes them) with their own hint, `last_reserved_ip.1` (host-local's name
// for its second range set), under the same lock: one ADD reserves both in
// one hold of it, and gives the IPv4 one back when the IPv6 one cannot be
// had. On an IPv6-only node IPv6 is the only range set, so as host-local
// (configured by flannel's plugin with that one range) its hint is
// `last_reserved_ip.0`, and no IPv4 address is reserved. A reservation is a hard
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
import { FILES, readFile, type Files } from './files.ts';
import { join } from 'node:path';
import { formatIpv4, parseIpv4 } from '../../src/net/ipv4.ts';
import { formatIpv6, parseIpv6 } from '../../src/net/ipv6.ts';
import { CNI_CODES, fail } from '../errors.ts';
import { DirLock, freshUuid } from './lock.ts';
import {
  candidates,
  candidates6,
  formatOwner,
  parseOwner,
  poolSize,
  poolSize6,
  type Pool,
  type Pool6,
} from './pool.ts';

/** host-local's hint for its first range set: IPv4's, or IPv6's on an IPv6-only node. */
export const LAST_RESERVED = 'last_reserved_ip.0';
/** The IPv6 round-robin hint of a dual-stack node: host-local's file for its second range set. */
export const LAST_RESERVED6 = 'last_reserved_ip.1';

/** True for a store file name that is an address (IPv4 or IPv6), not a hint, lock or temp file. */
export function isAddressName(name: string): boolean {
  return parseIpv4(name) !== undefined || parseIpv6(name) !== undefined;
}

/**
 * What one ADD reserved: an IPv4 address unless the node is IPv6-only, an IPv6 one on a dual-stack
 * or IPv6-only node.
 */
export interface Reserved {
  readonly addr: number | undefined;
  readonly addr6: bigint | undefined;
}

interface ReserveRequest {
  /** the IPv4 pool; undefined on an IPv6-only node (then `pool6` is required) */
  readonly pool: Pool | undefined;
  /** the IPv6 pool of a dual-stack or IPv6-only node */
  readonly pool6?: Pool6 | undefined;
  readonly containerId: string;
  readonly ifname: string;
}

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

  /** the file operations (files.ts; a test may wrap them) */
  private readonly files: Files;

  constructor(dir: string, warn: StoreWarn = () => undefined, files: Files = FILES) {
    this.dir = dir;
    this.warn = warn;
    this.files = files;
    this.lock = new DirLock(dir, warn, files);
  }

  /**
   * Runs `fn` under the directory's lock; `whenMissing` instead when the directory does not exist
   * (nothing to act on).
   */
  private async locked<T>(fn: () => Promise<T>, whenMissing: () => T): Promise<T> {
    try {
      await this.files.stat(this.dir);
    } catch (err) {
      if (isEnoent(err)) return whenMissing();
      throw err;
    }
    return this.lock.run(fn);
  }

  private tmpName(): string {
    return join(this.dir, `.twill-${freshUuid()}.tmp`);
  }

  /** Writes a new temp file exclusively ('wx': never through an existing name or symlink). */
  private async writeTmp(text: string): Promise<string> {
    const tmp = this.tmpName();
    await this.files.writeFile(tmp, text, { mode: 0o644, flag: 'wx' });
    return tmp;
  }

  private async readLast<A>(
    file: string,
    parse: (t: string) => A | undefined,
  ): Promise<A | undefined> {
    try {
      return parse((await readIfExists(join(this.dir, file)))?.trim() ?? '');
    } catch (err) {
      this.warn('cannot read the round-robin hint; starting at the first address', {
        file: join(this.dir, file),
        err: String(err),
      });
      return undefined;
    }
  }

  /** Reserves the next free address of the pool for an attachment; code 103 when full. */
  async reserve(o: { pool: Pool; containerId: string; ifname: string }): Promise<number> {
    const { addr } = await this.reserveAll(o);
    if (addr === undefined) throw new Error('IpStore.reserve: no IPv4 address was reserved');
    return addr;
  }

  /**
   * Reserves the next free IPv4 address (with `pool`) and the next free IPv6 address (with
   * `pool6`) for an attachment, both under one hold of the lock; code 103 when either pool is full
   * (nothing is left reserved then).
   */
  async reserveAll(o: ReserveRequest): Promise<Reserved> {
    if (!o.pool && !o.pool6) throw new Error('IpStore.reserveAll: no pool of either family');
    await this.files.mkdir(this.dir, { recursive: true });
    return this.lock.run(() => this.reserveLocked(o));
  }

  /** Links `tmp` onto the first free candidate's name; undefined when every one is taken. */
  private async claim<A>(
    tmp: string,
    all: Iterable<A>,
    used: ReadonlySet<A>,
    name: (a: A) => string,
  ): Promise<A | undefined> {
    for (const addr of all) {
      if (used.has(addr)) continue;
      try {
        await this.files.link(tmp, join(this.dir, name(addr)));
      } catch (err) {
        if (isEexist(err)) continue; // taken by a concurrent ADD since we listed
        throw err;
      }
      return addr;
    }
    return undefined;
  }

  private async reserveLocked(o: ReserveRequest): Promise<Reserved> {
    const names = await this.files.readdir(this.dir);
    if (!o.pool) return { addr: undefined, addr6: await this.reserveOnly6Locked(o, names) };
    const used = new Set(names.map(parseIpv4).filter((a) => a !== undefined));
    const last = await this.readLast(LAST_RESERVED, parseIpv4);
    const tmp = await this.writeTmp(formatOwner(o.containerId, o.ifname));
    try {
      const addr = await this.claim(tmp, candidates(o.pool, last), used, formatIpv4);
      if (addr === undefined)
        fail(
          CNI_CODES.exhausted,
          `no free address in ${this.dir}: all ${poolSize(o.pool)} addresses of the node's subnet are reserved`,
        );
      await this.writeLast(LAST_RESERVED, formatIpv4(addr));
      if (!o.pool6) return { addr, addr6: undefined };
      let addr6: bigint | undefined;
      try {
        addr6 = await this.reserve6Locked(tmp, names, o.pool6, LAST_RESERVED6);
      } catch (err) {
        await this.unlinkIp(formatIpv4(addr));
        throw err;
      }
      return { addr, addr6 };
    } finally {
      await this.files.unlink(tmp).catch(() => undefined);
    }
  }

  /** An IPv6-only node's reservation: its one range set's hint is `last_reserved_ip.0`. */
  private async reserveOnly6Locked(o: ReserveRequest, names: string[]): Promise<bigint> {
    if (!o.pool6) throw new Error('IpStore.reserveAll: no pool of either family');
    const tmp = await this.writeTmp(formatOwner(o.containerId, o.ifname));
    try {
      return await this.reserve6Locked(tmp, names, o.pool6, LAST_RESERVED);
    } finally {
      await this.files.unlink(tmp).catch(() => undefined);
    }
  }

  private async reserve6Locked(
    tmp: string,
    names: string[],
    pool6: Pool6,
    hint: string,
  ): Promise<bigint> {
    const used = new Set(names.map(parseIpv6).filter((a) => a !== undefined));
    const last = await this.readLast(hint, parseIpv6);
    const addr6 = await this.claim(tmp, candidates6(pool6, last), used, formatIpv6);
    if (addr6 === undefined)
      fail(
        CNI_CODES.exhausted,
        `no free IPv6 address in ${this.dir}: all ${poolSize6(pool6)} addresses of the node's IPv6 subnet are reserved`,
      );
    await this.writeLast(hint, formatIpv6(addr6));
    return addr6;
  }

  /** Saves a round-robin hint; best effort (the address is reserved either way). */
  private async writeLast(file: string, ip: string): Promise<void> {
    let tmp: string | undefined;
    try {
      tmp = await this.writeTmp(ip);
      await this.files.rename(tmp, join(this.dir, file));
    } catch (err) {
      this.warn('cannot save the round-robin hint; the address stays reserved', {
        file: join(this.dir, file),
        ip,
        err: String(err),
      });
      if (tmp !== undefined) await this.files.unlink(tmp).catch(() => undefined);
    }
  }

  /** An address file's mtime; undefined when it is gone. */
  private async writtenMs(ip: string): Promise<number | undefined> {
    try {
      return (await this.files.stat(join(this.dir, ip))).mtimeMs;
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
      names = await this.files.readdir(this.dir);
    } catch (err) {
      if (isEnoent(err)) return [];
      throw err;
    }
    const out: StoreEntry[] = [];
    for (const ip of names.filter(isAddressName)) {
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

  /** Deletes several addresses' files under one hold of the lock; returns those that were there. */
  async releaseAll(ips: readonly string[]): Promise<string[]> {
    return this.locked(
      async () => {
        const gone: string[] = [];
        for (const ip of ips) if (await this.unlinkIp(ip)) gone.push(ip);
        return gone;
      },
      () => [],
    );
  }

  private async unlinkIp(ip: string): Promise<boolean> {
    try {
      await this.files.unlink(join(this.dir, ip));
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
