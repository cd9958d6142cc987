// The IP store's lock and DEL's order, through the executable as a runtime
// runs it: ADDs and GCs at once as separate processes (distinct addresses,
// GC releases only what predates it), a lock held by a live process (code 11
// after the wait, nothing reserved) and one left by a dead or unknown
// holder (removed, the call goes on); DEL deleting the host veth before it
// releases the address (seen from an `ip` wrapper that records the store at
// the moment of the deletion, and can make it fail).
import { spawn } from 'node:child_process';
import { chmod, mkdir, readFile, readdir, readlink, rm, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOCK_NAME, processStart } from '../../cni/ipam/lock.ts';
import { run } from '../../src/exec/runner.ts';
import { CniNode } from '../helpers/cni.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';
import { exited } from '../../lab/kit/process.ts';

const race = new CniNode({ subnet: '10.244.11.0/26' });
const locks = new CniNode({ subnet: '10.244.12.0/28' });
const order = new CniNode({ subnet: '10.244.13.0/28' });

beforeAll(async () => {
  await sweepStaleNetns();
  await race.setup('race');
  await locks.setup('locks');
  await order.setup('order');
});

afterAll(async () => {
  await race.destroy();
  await locks.destroy();
  await order.destroy();
});

const addressOf = (json: unknown): string =>
  (json as { ips: { address: string }[] }).ips[0]?.address.split('/')[0] ?? '';

describe('twill-cni IP store lock', () => {
  it('ADDs and GCs at once: distinct addresses, every new reservation kept, every stale one released', async () => {
    await mkdir(race.storeDir, { recursive: true });
    // 20 reservations of containers the runtime no longer knows, reserved long ago, with no veth
    // left
    const stale = Array.from({ length: 20 }, (_, i) => `10.244.11.${40 + i}`);
    const past = new Date(Date.now() - 600_000);
    for (const [i, ip] of stale.entries()) {
      await writeFile(join(race.storeDir, ip), `old-${i}\r\neth0`);
      await utimes(join(race.storeDir, ip), past, past);
    }
    const pods: string[] = [];
    for (let i = 0; i < 20; i++) pods.push(await race.pod(`r${i}`));
    const gcConf = race.conf('1.1.0', { 'cni.dev/valid-attachments': [] });
    const calls = [
      ...pods.map((netns, i) => race.call({ verb: 'ADD', containerId: `new-${i}`, netns })),
      ...Array.from({ length: 6 }, () => race.call({ verb: 'GC', conf: gcConf })),
    ];
    const answers = await Promise.all(calls);
    expect(answers.filter((a) => a.code !== 0).map((a) => a.stdout)).toEqual([]);
    const addresses = answers.slice(0, 20).map((a) => addressOf(a.json));
    expect(new Set(addresses).size).toBe(20);
    // each ADD's address is still reserved, for that ADD (a GC scan that started before it did not
    // take it)
    for (const [i, ip] of addresses.entries())
      expect(await readFile(join(race.storeDir, ip), 'utf8')).toBe(`new-${i}\r\neth0`);
    expect((await race.reserved()).sort()).toEqual([...addresses].sort());
    expect((await readdir(race.storeDir)).filter((n) => n.startsWith('.'))).toEqual([]);
  });

  it('answers 11 while a live process holds the lock, and goes on once the holder is dead or unknown and old', async () => {
    const pod = await locks.pod('l1');
    await mkdir(locks.storeDir, { recursive: true });
    const holder = spawn('sleep', ['60'], { stdio: 'ignore' });
    const pid = holder.pid ?? 0;
    const lock = join(locks.storeDir, LOCK_NAME);
    await writeFile(
      lock,
      JSON.stringify({
        pid,
        start: await processStart(pid),
        pidns: await readlink('/proc/self/ns/pid'),
        token: 'held',
      }),
    );
    try {
      const started = Date.now();
      const held = await locks.call({ verb: 'ADD', containerId: 'l1', netns: pod });
      expect(Date.now() - started).toBeGreaterThanOrEqual(4500);
      expect(held.code).toBe(1);
      expect(held.json).toEqual({
        cniVersion: '1.0.0',
        code: 11,
        msg: expect.stringMatching(
          new RegExp(
            `^cannot lock the IP store .*: ${lock} is held by pid ${pid} .*try again later$`,
          ),
        ),
      });
      expect(await locks.reserved()).toEqual([]);
      expect(await locks.hostVeths()).toEqual([]);
    } finally {
      holder.kill('SIGKILL');
      await exited(holder);
    }
    // the holder died without unlocking
    const add = await locks.call({ verb: 'ADD', containerId: 'l1', netns: pod });
    expect(add.code).toBe(0);
    expect(await locks.reserved()).toEqual([addressOf(add.json)]);
    // content twill cannot judge: waited for while recent, removed once old
    await writeFile(lock, 'not a twill lock');
    const past = new Date(Date.now() - 120_000);
    await utimes(lock, past, past);
    expect((await locks.call({ verb: 'DEL', containerId: 'l1', netns: pod })).code).toBe(0);
    expect(await locks.reserved()).toEqual([]);
    expect((await readdir(locks.storeDir)).filter((n) => n.startsWith('.'))).toEqual([]);
    const log = await readFile(join(locks.dir, 'cni.log'), 'utf8');
    expect(log.match(/removed a stale store lock/g)).toHaveLength(2);
  });
});

describe('twill-cni DEL order', () => {
  it('deletes the host veth before it releases the address, and keeps the address when the veth cannot be deleted', async () => {
    const pod = await order.pod('o1');
    const add = await order.call({ verb: 'ADD', containerId: 'o1', netns: pod });
    expect(add.code).toBe(0);
    const ip = addressOf(add.json);
    // an `ip` that records the store when asked to delete a link, and fails that deletion while
    // `fail` exists
    const bin = join(order.dir, 'bin');
    await mkdir(bin);
    const realIp = (await run('sh', ['-c', 'command -v ip'])).stdout.trim();
    const seen = join(order.dir, 'store-at-link-del');
    const failFlag = join(order.dir, 'fail');
    await writeFile(
      join(bin, 'ip'),
      [
        '#!/bin/sh',
        `if [ "$1" = link ] && [ "$2" = del ]; then`,
        `  ls ${order.storeDir} > ${seen}`,
        `  if [ -e ${failFlag} ]; then echo 'RTNETLINK answers: Operation not permitted' >&2; exit 2; fi`,
        'fi',
        `exec ${realIp} "$@"`,
        '',
      ].join('\n'),
    );
    await chmod(join(bin, 'ip'), 0o755);
    const path = `${bin}:${process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'}`;

    await writeFile(failFlag, '');
    const failed = await order.call({ verb: 'DEL', containerId: 'o1', netns: pod, path });
    expect(failed.code).toBe(1);
    expect(failed.json).toMatchObject({
      cniVersion: '1.0.0',
      code: 101,
      msg: expect.stringContaining('Operation not permitted'),
    });
    expect(await order.reserved()).toEqual([ip]);
    expect(await order.hostVeths()).toHaveLength(1);

    await rm(failFlag);
    expect(await order.call({ verb: 'DEL', containerId: 'o1', netns: pod, path })).toMatchObject({
      code: 0,
      stdout: '',
    });
    expect((await readFile(seen, 'utf8')).split('\n')).toContain(ip);
    expect(await order.reserved()).toEqual([]);
    expect(await order.hostVeths()).toEqual([]);
  });
});
