// Every verb across every supported spec version, as a runtime calls them:
// results shaped per version, CHECK refused before 0.4.0, STATUS and GC
// before 1.1.0 (code 1), and the rest succeeding.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CniNode } from '../helpers/cni.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';

const VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;
const node = new CniNode();

beforeAll(async () => {
  await sweepStaleNetns();
  await node.setup();
});

afterAll(async () => {
  await node.destroy();
});

describe.each(VERSIONS)('cniVersion %s', (version) => {
  const id = `v${version.replaceAll('.', '')}`;
  const atLeast = (min: string): boolean =>
    VERSIONS.indexOf(version) >= VERSIONS.indexOf(min as (typeof VERSIONS)[number]);

  it('answers ADD, CHECK, STATUS, GC, DEL and VERSION as the version allows', async () => {
    const pod = await node.pod(id);
    const conf = node.conf(version);
    const add = await node.call({ verb: 'ADD', containerId: id, netns: pod, conf });
    expect(add.code).toBe(0);
    const result = add.json as {
      cniVersion: string;
      ips: { version?: string }[];
      interfaces: { mtu?: number }[];
    };
    expect(result.cniVersion).toBe(version);
    expect(result.ips[0]?.version).toBe(atLeast('1.0.0') ? undefined : '4');
    expect(result.interfaces[2]?.mtu).toBe(atLeast('1.1.0') ? 1450 : undefined);

    const check = await node.call({
      verb: 'CHECK',
      containerId: id,
      netns: pod,
      conf: { ...conf, prevResult: result },
    });
    if (atLeast('0.4.0')) expect(check).toMatchObject({ code: 0, stdout: '' });
    else
      expect(check.json).toMatchObject({
        cniVersion: version,
        code: 1,
        msg: `CHECK needs cniVersion 0.4.0 or later; the config says ${version}`,
      });

    const status = await node.call({ verb: 'STATUS', conf });
    const gc = await node.call({
      verb: 'GC',
      conf: { ...conf, 'cni.dev/valid-attachments': [{ containerID: id, ifname: 'eth0' }] },
    });
    for (const [verb, answer] of [
      ['STATUS', status],
      ['GC', gc],
    ] as const) {
      if (atLeast('1.1.0')) expect(answer).toMatchObject({ code: 0, stdout: '' });
      else
        expect(answer.json).toMatchObject({
          code: 1,
          msg: expect.stringContaining(`${verb} needs cniVersion 1.1.0`),
        });
    }
    expect(await node.reserved()).toHaveLength(1);

    expect(
      await node.call({
        verb: 'DEL',
        containerId: id,
        netns: pod,
        conf: { ...conf, prevResult: result },
      }),
    ).toMatchObject({ code: 0, stdout: '' });
    expect(await node.call({ verb: 'VERSION', conf: { cniVersion: version } })).toMatchObject({
      code: 0,
      json: { supportedVersions: [...VERSIONS] },
    });
    expect(await node.reserved()).toEqual([]);
  });
});
