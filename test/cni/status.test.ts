// STATUS (1.1.0) through the executable in a node namespace: ready only with
// a subnet.env that exists, parses, is consistent and current (the bridge
// carries no other address of the cluster network than its gateway), and a
// bridge that is one or can be created; code 50 with the reason otherwise.
import { chmod, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import { callCni, subnetEnvText } from '../../lab/kit/call-cni.ts';
import { CniNode } from '../helpers/cni.ts';
import { TWILL_CNI } from '../../lab/kit/twill-command.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';

const node = new CniNode({ subnet: '10.244.14.0/24' });

beforeAll(async () => {
  await sweepStaleNetns();
  await node.setup('status');
});

afterAll(async () => {
  await node.destroy();
});

const status = (extra: Record<string, unknown> = {}) =>
  node.call({ verb: 'STATUS', conf: node.conf('1.1.0', extra) });
const notReady = (msg: unknown) => ({ code: 1, json: { cniVersion: '1.1.0', code: 50, msg } });

async function linkNames(): Promise<string[]> {
  return ((await node.ipJson(node.nodeNs, ['link', 'show'])) as { ifname: string }[]).map(
    (l) => l.ifname,
  );
}

describe('twill-cni STATUS', () => {
  it('is ready with a current subnet.env and no bridge yet (one can be created), and leaves no link behind', async () => {
    expect(await status()).toMatchObject({ code: 0, stdout: '' });
    expect(await linkNames()).toEqual(['lo']);
  });

  it('is not ready without subnet.env, with a malformed one, or with a subnet outside the network', async () => {
    expect(await status({ subnetFile: join(node.dir, 'missing.env') })).toMatchObject(
      notReady(expect.stringContaining('missing.env does not exist yet')),
    );
    const bad = join(node.dir, 'bad.env');
    await writeFile(bad, 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.14.1/24\n');
    expect(await status({ subnetFile: bad })).toMatchObject(
      notReady(`twill is not ready: ${bad}: FLANNEL_MTU is missing`),
    );
    const outside = join(node.dir, 'outside.env');
    await writeFile(
      outside,
      subnetEnvText({ network: '10.244.0.0/16', subnet: '10.99.1.0/24', mtu: 1450 }),
    );
    expect(await status({ subnetFile: outside })).toMatchObject(
      notReady(
        `twill is not ready: ${outside}: FLANNEL_SUBNET 10.99.1.0/24 is not inside FLANNEL_NETWORK 10.244.0.0/16`,
      ),
    );
  });

  it('is not ready when the bridge cannot be created (no CAP_NET_ADMIN)', async () => {
    const exe = join(node.dir, 'no-net-admin');
    await writeFile(
      exe,
      `#!/bin/sh\nexec setpriv --inh-caps=-net_admin --bounding-set=-net_admin -- ${TWILL_CNI}\n`,
    );
    await chmod(exe, 0o755);
    const answer = await callCni({
      nodeNs: node.nodeNs,
      exe,
      verb: 'STATUS',
      conf: node.conf('1.1.0'),
    });
    expect(answer).toMatchObject(
      notReady(
        expect.stringMatching(
          /^twill is not ready: bridge cni0 does not exist and cannot be created \(trying with twp[0-9a-f]{8}\): .*Operation not permitted/,
        ),
      ),
    );
    expect(await linkNames()).toEqual(['lo']);
  });

  it('is not ready when "bridge" names a device that is not a bridge', async () => {
    expect(await status({ bridge: 'lo' })).toMatchObject(
      notReady(
        'twill is not ready: "bridge" "lo" already exists but is not a bridge (it is a loopback device)',
      ),
    );
  });

  it("is not ready while the bridge carries another address of the cluster network than subnet.env's gateway", async () => {
    const ip = (...args: string[]) => run('ip', ['-n', node.nodeNs, ...args]);
    await ip('link', 'add', 'cni0', 'type', 'bridge');
    await ip('addr', 'add', '10.244.9.1/24', 'dev', 'cni0');
    await ip('addr', 'add', '192.168.50.1/24', 'dev', 'cni0'); // outside the cluster network: not twill's business
    expect(await status()).toMatchObject(
      notReady(
        expect.stringContaining(
          `${node.subnetFile} is not current: it gives the node the subnet 10.244.14.0/24 (gateway 10.244.14.1/24), but cni0 carries 10.244.9.1/24 from the cluster network 10.244.0.0/16`,
        ),
      ),
    );
    await ip('addr', 'add', '10.244.14.1/24', 'dev', 'cni0');
    expect((await status()).json).toMatchObject({ code: 50 });
    await ip('addr', 'del', '10.244.9.1/24', 'dev', 'cni0');
    expect(await status()).toMatchObject({ code: 0, stdout: '' });
    // a subnet.env rewritten for another lease while the bridge still serves the old one
    await node.writeSubnetEnv(
      subnetEnvText({ network: node.network, subnet: '10.244.15.0/24', mtu: 1450 }),
    );
    expect((await status()).json).toMatchObject({
      code: 50,
      msg: expect.stringContaining('cni0 carries 10.244.14.1/24'),
    });
    await node.writeSubnetEnv();
    expect((await status()).code).toBe(0);
  });
});
