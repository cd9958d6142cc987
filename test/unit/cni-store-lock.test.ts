// The IP store's lock, deterministically: the unlink of GC's release is held
// up (the store given wrapped file operations) while, through a second store object on the
// same directory (as a second process would), the attachment is released by
// its DEL and its address reserved again by another ADD. Without the lock,
// GC's unlink then deletes the new reservation; with it, DEL and ADD wait.
// Likewise a DEL's find-then-unlink against a GC release and an ADD.
import { readdir, utimes } from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FILES, type Files } from '../../cni/ipam/files.ts';
import { poolOf } from '../../cni/ipam/pool.ts';
import { IpStore } from '../../cni/ipam/store.ts';
import { parseCidr } from '../../src/net/ipv4.ts';

const hooks = {
  onUnlink: undefined as ((path: string) => Promise<void>) | undefined,
};

/** The store's file operations, with every unlink first passing through `hooks.onUnlink`. */
const HOOKED: Files = {
  ...FILES,
  unlink: async (path) => {
    const hook = hooks.onUnlink;
    if (hook) await hook(path);
    return FILES.unlink(path);
  },
};

// a /30: exactly one address (.2) to hand out, so a new ADD must get the one just released
const subnet = parseCidr('10.244.3.0/30', { strict: true });
if (!subnet) throw new Error('test setup');
const pool = poolOf(subnet);
const IP = '10.244.3.2';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'twill-lock-'));
});

afterEach(async () => {
  hooks.onUnlink = undefined;
  await rm(dir, { recursive: true, force: true });
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Holds up the first unlink of the address file by `ms`, starting `meanwhile` (not awaited: it may
 * need the lock).
 */
function holdUpFirstUnlink(
  ms: number,
  meanwhile: () => Promise<unknown>,
): { done: Promise<unknown> } {
  const out: { done: Promise<unknown> } = { done: Promise.resolve() };
  hooks.onUnlink = async (path) => {
    if (!path.endsWith(`/${IP}`)) return;
    hooks.onUnlink = undefined;
    out.done = meanwhile();
    await sleep(ms);
  };
  return out;
}

async function staleEntry(store: IpStore, containerId: string): Promise<void> {
  await store.reserve({ pool, containerId, ifname: 'eth0' });
  const past = new Date(Date.now() - 120_000);
  await utimes(join(store.dir, IP), past, past);
}

describe('IpStore lock', () => {
  it("GC's re-check and unlink cannot be split by a DEL and a new ADD of the same address", async () => {
    const gc = new IpStore(join(dir, 'twnet'), undefined, HOOKED);
    const other = new IpStore(join(dir, 'twnet'), undefined, HOOKED);
    await staleEntry(gc, 'gone');
    const [seen] = await gc.entries();
    if (!seen) throw new Error('test setup');
    const race = holdUpFirstUnlink(150, async () => {
      await other.releaseAttachment('gone', 'eth0');
      return other.reserve({ pool, containerId: 'new', ifname: 'eth0' });
    });
    const outcome = await gc.releaseIfStale(seen, Date.now());
    await race.done;
    expect(outcome).toBe('released');
    // the new pod's reservation is there: GC deleted the old one, not this one
    expect(await gc.find('new', 'eth0')).toEqual([IP]);
    expect((await readdir(gc.dir)).filter((n) => n.startsWith('.'))).toEqual([]);
  });

  it("a DEL's find and unlink cannot be split by a GC release and a new ADD of the same address", async () => {
    const del = new IpStore(join(dir, 'twnet'), undefined, HOOKED);
    const other = new IpStore(join(dir, 'twnet'), undefined, HOOKED);
    await staleEntry(del, 'gone');
    const [seen] = await del.entries();
    if (!seen) throw new Error('test setup');
    const race = holdUpFirstUnlink(150, async () => {
      await other.releaseIfStale(seen, Date.now());
      return other.reserve({ pool, containerId: 'new', ifname: 'eth0' });
    });
    expect(await del.releaseAttachment('gone', 'eth0')).toEqual([IP]);
    await race.done;
    expect(await del.find('new', 'eth0')).toEqual([IP]);
  });
});
