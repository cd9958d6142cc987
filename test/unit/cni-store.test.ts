// Unit tests of the IP store on a temporary directory: host-local's layout,
// concurrent reservations never sharing an address, exhaustion, release.
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
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
    const got = await Promise.all(Array.from({ length: 13 }, (_, i) => store.reserve({ pool, containerId: `c${i}`, ifname: 'eth0' })));
    expect(new Set(got).size).toBe(13);
    const err = await store.reserve({ pool, containerId: 'late', ifname: 'eth0' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CniError);
    expect((err as CniError).cniCode).toBe(103);
    expect((err as CniError).message).toContain('all 13 addresses of the node\'s subnet are reserved');
    expect((await readdir(store.dir)).filter((n) => n.endsWith('.tmp'))).toEqual([]);
  });

  it('goes round-robin and releases by container id + ifname', async () => {
    await store.reserve({ pool, containerId: 'c1', ifname: 'eth0' });
    await store.reserve({ pool, containerId: 'c1', ifname: 'eth1' });
    expect(await store.releaseAttachment('c1', 'eth0')).toEqual(['10.244.3.2']);
    expect(formatIpv4(await store.reserve({ pool, containerId: 'c2', ifname: 'eth0' }))).toBe('10.244.3.4');
    expect(await store.find('c1', 'eth1')).toEqual(['10.244.3.3']);
    expect(await store.releaseAttachment('c1', 'eth0')).toEqual([]);
    expect((await store.entries()).map((e) => e.containerId).sort()).toEqual(['c1', 'c2']);
  });

  it('reads an empty list from a store that does not exist yet', async () => {
    expect(await new IpStore(join(dir, 'none')).entries()).toEqual([]);
  });
});
