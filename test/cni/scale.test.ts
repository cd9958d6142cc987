// The IP store under pressure, through the executable: 50 concurrent ADDs in
// 50 namespaces on a node with no bridge yet (distinct addresses, one
// bridge), 50 concurrent DELs leaving an empty store; a small subnet running
// out; GC keeping only the attachments the runtime still knows, and an ADD
// in flight (on its own node, so that it runs alone too).
import { readdir, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CniNode } from '../helpers/cni.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';

const node = new CniNode();
const small = new CniNode({ subnet: '10.244.7.0/29' });
const gcNode = new CniNode({ subnet: '10.244.9.0/29' });

beforeAll(async () => {
  await sweepStaleNetns();
  await node.setup('node');
  await small.setup('small');
  await gcNode.setup('gcnode');
});

afterAll(async () => {
  await node.destroy();
  await small.destroy();
  await gcNode.destroy();
});

/**
 * Makes store entries look reserved `ageMs` ago (GC leaves entries younger than a minute alone).
 */
async function age(node: CniNode, ips: readonly string[], ageMs: number): Promise<void> {
  const t = new Date(Date.now() - ageMs);
  for (const ip of ips) await utimes(join(node.storeDir, ip), t, t);
}

describe('twill-cni under concurrency', () => {
  it('gives 50 concurrent ADDs 50 distinct addresses; 50 DELs leave an empty store', async () => {
    const pods: string[] = [];
    for (let i = 0; i < 50; i++) pods.push(await node.pod(`c${i}`));
    const adds = await Promise.all(
      pods.map((netns, i) => node.call({ verb: 'ADD', containerId: `conc-${i}`, netns })),
    );
    expect(adds.filter((a) => a.code !== 0).map((a) => a.stdout)).toEqual([]);
    const addresses = adds.map((a) => (a.json as { ips: { address: string }[] }).ips[0]?.address);
    expect(new Set(addresses).size).toBe(50);
    expect(await node.reserved()).toHaveLength(50);
    expect(await node.hostVeths()).toHaveLength(50);
    const dels = await Promise.all(
      pods.map((netns, i) => node.call({ verb: 'DEL', containerId: `conc-${i}`, netns })),
    );
    expect(dels.map((d) => d.code)).toEqual(Array.from({ length: 50 }, () => 0));
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
    expect((await readdir(node.storeDir)).filter((n) => n !== 'last_reserved_ip.0')).toEqual([]);
  });

  it('fails clearly when a small subnet is exhausted, and leaves nothing of the failed ADD', async () => {
    // /29: network .0, gateway .1, broadcast .7 → five addresses
    const pods: string[] = [];
    for (let i = 0; i < 6; i++) pods.push(await small.pod(`x${i}`));
    for (let i = 0; i < 5; i++)
      expect(
        (await small.call({ verb: 'ADD', containerId: `full-${i}`, netns: pods[i] })).code,
      ).toBe(0);
    const sixth = await small.call({ verb: 'ADD', containerId: 'full-5', netns: pods[5] });
    expect(sixth.code).toBe(1);
    expect(sixth.json).toMatchObject({
      code: 103,
      msg: expect.stringContaining("all 5 addresses of the node's subnet are reserved"),
    });
    expect(await small.reserved()).toEqual([
      '10.244.7.2',
      '10.244.7.3',
      '10.244.7.4',
      '10.244.7.5',
      '10.244.7.6',
    ]);
    expect(await small.hostVeths()).toHaveLength(5);
    expect(await small.ipJson(pods[5] as string, ['link', 'show', 'dev', 'lo'])).toHaveLength(1);
    expect(JSON.stringify(await small.ipJson(pods[5] as string, ['link', 'show']))).not.toContain(
      'eth0',
    );
  });

  it('GC releases what is not in cni.dev/valid-attachments and keeps the rest working, and an ADD in flight', async () => {
    const pods: string[] = [];
    for (let i = 0; i < 4; i++) pods.push(await gcNode.pod(`g${i}`));
    const ips: string[] = [];
    for (let i = 0; i < 4; i++) {
      const add = await gcNode.call({ verb: 'ADD', containerId: `gc-${i}`, netns: pods[i] });
      expect(add.code).toBe(0);
      ips.push((add.json as { ips: { address: string }[] }).ips[0]?.address.split('/')[0] ?? '');
    }
    // gc-3 has just reserved its address: an ADD the runtime does not list yet
    await age(gcNode, ips.slice(0, 3), 120_000);
    const valid = [
      { containerID: 'gc-0', ifname: 'eth0' },
      { containerID: 'gc-2', ifname: 'eth0' },
    ];
    const gc = await gcNode.call({
      verb: 'GC',
      conf: gcNode.conf('1.1.0', { 'cni.dev/valid-attachments': valid }),
    });
    expect(gc).toMatchObject({ code: 0, stdout: '' });
    expect(await gcNode.reserved()).toEqual([ips[0], ips[2], ips[3]].sort());
    expect(await gcNode.hostVeths()).toHaveLength(3);
    const check = await gcNode.call({
      verb: 'CHECK',
      containerId: 'gc-2',
      netns: pods[2],
      conf: gcNode.conf('1.1.0', { prevResult: { ips: [{ address: `${ips[2]}/29` }] } }),
    });
    expect(check).toMatchObject({ code: 0 });
    await age(gcNode, [ips[3] as string], 120_000);
    // the 1.1.0 spec text's key, as libcni also sends it
    expect(
      (await gcNode.call({ verb: 'GC', conf: gcNode.conf('1.1.0', { 'cni.dev/attachments': [] }) }))
        .code,
    ).toBe(0);
    expect(await gcNode.reserved()).toEqual([]);
    expect(await gcNode.hostVeths()).toEqual([]);
  });
});
