// Unit tests of the IP store on a temporary directory: host-local's layout,
// concurrent reservations never sharing an address, exhaustion, release.
import {
  mkdir,
  mkdtemp,
  readFile,
  readdir,
  rm,
  symlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CniError } from '../../cni/errors.ts';
import { poolOf } from '../../cni/ipam/pool.ts';
import { IpStore } from '../../cni/ipam/store.ts';
import { formatIpv4, parseCidr } from '../../src/net/ipv4.ts';

let dir: string;
let store: IpStore;
const subnet = parseCidr('10.244.3.0/28', { strict: true });
if (!subnet) throw new Error('test setup');
const pool = poolOf(subnet);

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'twill-store-'));
  store = new IpStore(join(dir, 'twnet'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('IpStore', () => {
  it("writes host-local's files", async () => {
    const a = await store.reserve({ pool, containerId: 'c1', ifname: 'eth0' });
    expect(formatIpv4(a)).toBe('10.244.3.2');
    expect(await readFile(join(store.dir, '10.244.3.2'), 'utf8')).toBe('c1\r\neth0');
    expect(await readFile(join(store.dir, 'last_reserved_ip.0'), 'utf8')).toBe('10.244.3.2');
    expect((await readdir(store.dir)).sort()).toEqual(['10.244.3.2', 'last_reserved_ip.0']);
  });

  it('gives concurrent reservations distinct addresses, then fails clearly when full', async () => {
    const got = await Promise.all(
      Array.from({ length: 13 }, (_, i) =>
        store.reserve({ pool, containerId: `c${i}`, ifname: 'eth0' }),
      ),
    );
    expect(new Set(got).size).toBe(13);
    const err = await store
      .reserve({ pool, containerId: 'late', ifname: 'eth0' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CniError);
    expect((err as CniError).cniCode).toBe(103);
    expect((err as CniError).message).toContain(
      "all 13 addresses of the node's subnet are reserved",
    );
    expect((await readdir(store.dir)).filter((n) => n.endsWith('.tmp'))).toEqual([]);
  });

  it('goes round-robin and releases by container id + ifname', async () => {
    await store.reserve({ pool, containerId: 'c1', ifname: 'eth0' });
    await store.reserve({ pool, containerId: 'c1', ifname: 'eth1' });
    expect(await store.releaseAttachment('c1', 'eth0')).toEqual(['10.244.3.2']);
    expect(formatIpv4(await store.reserve({ pool, containerId: 'c2', ifname: 'eth0' }))).toBe(
      '10.244.3.4',
    );
    expect(await store.find('c1', 'eth1')).toEqual(['10.244.3.3']);
    expect(await store.releaseAttachment('c1', 'eth0')).toEqual([]);
    expect((await store.entries()).map((e) => e.containerId).sort()).toEqual(['c1', 'c2']);
    expect((await store.entries()).every((e) => Math.abs(e.writtenMs - Date.now()) < 60_000)).toBe(
      true,
    );
  });

  it('reads an empty list from a store that does not exist yet', async () => {
    expect(await new IpStore(join(dir, 'none')).entries()).toEqual([]);
  });
});

describe('IpStore temp files and the round-robin hint', () => {
  it('never writes through a name another process planted (random names, exclusive create)', async () => {
    await mkdir(store.dir, { recursive: true });
    const victim = join(dir, 'victim');
    await writeFile(victim, 'precious');
    // the names the store used to pick: pid + a counter
    for (let i = 1; i <= 500; i++)
      await symlink(victim, join(store.dir, `.twill-${process.pid}-${i}.tmp`));
    await store.reserve({ pool, containerId: 'c1', ifname: 'eth0' });
    await store.reserve({ pool, containerId: 'c2', ifname: 'eth0' });
    expect(await readFile(victim, 'utf8')).toBe('precious');
    expect(
      (await readdir(store.dir)).filter(
        (n) => n.endsWith('.tmp') && !n.startsWith(`.twill-${process.pid}-`),
      ),
    ).toEqual([]);
  });

  it('keeps the reservation when the hint cannot be read or saved, and says so', async () => {
    const warnings: string[] = [];
    const warned = new IpStore(store.dir, (msg) => warnings.push(msg));
    // neither readable nor replaceable as a file
    await mkdir(join(store.dir, 'last_reserved_ip.0'), { recursive: true });
    const a = await warned.reserve({ pool, containerId: 'c1', ifname: 'eth0' });
    expect(formatIpv4(a)).toBe('10.244.3.2');
    expect(await warned.find('c1', 'eth0')).toEqual(['10.244.3.2']);
    expect(warnings).toEqual([
      'cannot read the round-robin hint; starting at the first address',
      'cannot save the round-robin hint; the address stays reserved',
    ]);
    expect((await readdir(store.dir)).filter((n) => n.endsWith('.tmp'))).toEqual([]);
  });
});

describe('IpStore.releaseIfStale (GC)', () => {
  it('releases an entry only if it still has the owner GC saw and predates GC', async () => {
    await store.reserve({ pool, containerId: 'old', ifname: 'eth0' });
    const [seen] = await store.entries();
    if (!seen) throw new Error('test setup');
    const past = new Date(Date.now() - 120_000);
    await utimes(join(store.dir, seen.ip), past, past);
    // released by a DEL and reserved again by another ADD since GC listed it
    await store.release(seen.ip);
    await writeFile(join(store.dir, seen.ip), 'new\r\neth0');
    await utimes(join(store.dir, seen.ip), past, past);
    expect(await store.releaseIfStale(seen, Date.now())).toBe('owner-changed');
    expect(await readFile(join(store.dir, seen.ip), 'utf8')).toBe('new\r\neth0');
    // written after GC started
    await writeFile(join(store.dir, seen.ip), 'old\r\neth0');
    expect(await store.releaseIfStale(seen, Date.now() - 60_000)).toBe('too-new');
    expect(await store.releaseIfStale(seen, Date.now() + 1000)).toBe('released');
    expect(await store.releaseIfStale(seen, Date.now() + 1000)).toBe('gone');
  });
});
