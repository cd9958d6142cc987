// The IP store on disk, in host-local's layout so existing tools read it:
// `<dataDir>/<network>/<ip>` holds `<containerID>\r\n<ifname>` and
// `last_reserved_ip.0` the last address handed out. A reservation is a hard
// link of a complete temp file onto the address's name: exclusive (the link
// fails when the name exists) and never seen half written, so concurrent
// ADDs never share an address.
import { link, mkdir, readFile, readdir, rename, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { formatIpv4, parseIpv4 } from '../../src/net/ipv4.ts';
import { CNI_CODES, fail } from '../errors.ts';
import { candidates, formatOwner, parseOwner, poolSize, type Pool } from './pool.ts';

export const LAST_RESERVED = 'last_reserved_ip.0';

export interface StoreEntry {
  readonly ip: string;
  readonly containerId: string;
  readonly ifname: string;
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

let tmpSeq = 0;

export class IpStore {
  /** `<dataDir>/<network name>` */
  readonly dir: string;

  constructor(dir: string) {
    this.dir = dir;
  }

  private tmpName(): string {
    tmpSeq += 1;
    return join(this.dir, `.twill-${process.pid}-${tmpSeq}.tmp`);
  }

  private async usedAndLast(): Promise<{ used: Set<number>; last: number | undefined }> {
    const names = await readdir(this.dir);
    const used = new Set(names.map(parseIpv4).filter((a) => a !== undefined));
    const lastText = await readIfExists(join(this.dir, LAST_RESERVED));
    return { used, last: parseIpv4(lastText?.trim() ?? '') };
  }

  /** Reserves the next free address of the pool for an attachment; code 103 when full. */
  async reserve(o: { pool: Pool; containerId: string; ifname: string }): Promise<number> {
    await mkdir(this.dir, { recursive: true });
    const { used, last } = await this.usedAndLast();
    const tmp = this.tmpName();
    await writeFile(tmp, formatOwner(o.containerId, o.ifname), { mode: 0o644 });
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
    fail(CNI_CODES.exhausted, `no free address in ${this.dir}: all ${size} addresses of the node's subnet are reserved`);
  }

  private async writeLast(addr: number): Promise<void> {
    const tmp = this.tmpName();
    await writeFile(tmp, formatIpv4(addr));
    await rename(tmp, join(this.dir, LAST_RESERVED));
  }

  /** Every reservation (files whose name is an address). */
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
      if (text !== undefined) out.push({ ip, ...parseOwner(text) });
    }
    return out;
  }

  /** The addresses reserved for one attachment. */
  async find(containerId: string, ifname: string): Promise<string[]> {
    return (await this.entries()).filter((e) => e.containerId === containerId && e.ifname === ifname).map((e) => e.ip);
  }

  /** Deletes one address's file; true when it was there. */
  async release(ip: string): Promise<boolean> {
    try {
      await unlink(join(this.dir, ip));
      return true;
    } catch (err) {
      if (isEnoent(err)) return false;
      throw err;
    }
  }

  /** Releases every address of one attachment; returns them. */
  async releaseAttachment(containerId: string, ifname: string): Promise<string[]> {
    const ips = await this.find(containerId, ifname);
    for (const ip of ips) await this.release(ip);
    return ips;
  }
}
