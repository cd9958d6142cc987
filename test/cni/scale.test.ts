// The IP store under pressure, through the executable: 50 concurrent ADDs in
// 50 namespaces on a node with no bridge yet (distinct addresses, one
// bridge), 50 concurrent DELs leaving an empty store; a small subnet running
// out; GC keeping only the attachments the runtime still knows.
import { readdir } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CniNode } from '../helpers/cni.ts';
import { sweepStaleNetns } from '../helpers/netns.ts';

const node = new CniNode();
const small = new CniNode({ subnet: '10.244.7.0/29' });

beforeAll(async () => {
  await sweepStaleNetns();
  await node.setup('node');
  await small.setup('small');
});

afterAll(async () => {
  await node.destroy();
  await small.destroy();
});

describe('twill-cni under concurrency', () => {
  it('gives 50 concurrent ADDs 50 distinct addresses; 50 DELs leave an empty store', async () => {
    const pods: string[] = [];
    for (let i = 0; i < 50; i++) pods.push(await node.pod(`c${i}`));
    const adds = await Promise.all(pods.map((netns, i) => node.call({ verb: 'ADD', containerId: `conc-${i}`, netns })));
    expect(adds.filter((a) => a.code !== 0).map((a) => a.stdout)).toEqual([]);
    const addresses = adds.map((a) => (a.json as { ips: { address: string }[] }).ips[0]?.address);
    expect(new Set(addresses).size).toBe(50);
    expect(await node.reserved()).toHaveLength(50);
    expect(await node.hostVeths()).toHaveLength(50);
    const dels = await Promise.all(pods.map((netns, i) => node.call({ verb: 'DEL', containerId: `conc-${i}`, netns })));
    expect(dels.map((d) => d.code)).toEqual(Array.from({ length: 50 }, () => 0));
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
    expect((await readdir(node.storeDir)).filter((n) => n !== 'last_reserved_ip.0')).toEqual([]);
  });

  it('fails clearly when a small subnet is exhausted, and leaves nothing of the failed ADD', async () => {
    // /29: network .0, gateway .1, broadcast .7 → five addresses
    const pods: string[] = [];
    for (let i = 0; i < 6; i++) pods.push(await small.pod(`x${i}`));
    for (let i = 0; i < 5; i++) expect((await small.call({ verb: 'ADD', containerId: `full-${i}`, netns: pods[i] })).code).toBe(0);
    const sixth = await small.call({ verb: 'ADD', containerId: 'full-5', netns: pods[5] });
    expect(sixth.code).toBe(1);
    expect(sixth.json).toMatchObject({ code: 103, msg: expect.stringContaining("all 5 addresses of the node's subnet are reserved") });
    expect(await small.reserved()).toEqual(['10.244.7.2', '10.244.7.3', '10.244.7.4', '10.244.7.5', '10.244.7.6']);
    expect(await small.hostVeths()).toHaveLength(5);
    expect(await small.ipJson(pods[5] as string, ['link', 'show', 'dev', 'lo'])).toHaveLength(1);
    expect(JSON.stringify(await small.ipJson(pods[5] as string, ['link', 'show']))).not.toContain('eth0');
  });

  it('GC releases what is not in cni.dev/valid-attachments and keeps the rest working', async () => {
    // the five pods of the previous test: keep two
    const valid = [{ containerID: 'full-0', ifname: 'eth0' }, { containerID: 'full-3', ifname: 'eth0' }];
    const gc = await small.call({ verb: 'GC', conf: small.conf('1.1.0', { 'cni.dev/valid-attachments': valid }) });
    expect(gc).toMatchObject({ code: 0, stdout: '' });
    expect(await small.reserved()).toEqual(['10.244.7.2', '10.244.7.5']);
    expect(await small.hostVeths()).toHaveLength(2);
    const check = await small.call({
      verb: 'CHECK', containerId: 'full-3', netns: small.lab.ns('x3'),
      conf: small.conf('1.1.0', { prevResult: { ips: [{ address: '10.244.7.5/29' }] } }),
    });
    expect(check).toMatchObject({ code: 0 });
    expect((await small.call({ verb: 'GC', conf: small.conf('1.1.0', { 'cni.dev/valid-attachments': [] }) })).code).toBe(0);
    expect(await small.reserved()).toEqual([]);
    expect(await small.hostVeths()).toEqual([]);
  });
});
