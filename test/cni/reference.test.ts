// Side by side with the reference plugins (/usr/lib/cni, Debian's
// containernetworking-plugins): for the same subnet and inputs, twill's ADD
// leaves the pod namespace with the same shape (interface, address, routes,
// MTU) and the node with the same bridge as bridge + host-local. And the
// reference portmap chains after twill, reading twill's result as prevResult.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import { CniNode } from '../helpers/cni.ts';
import { REFERENCE_DIR, callCni } from '../../lab/kit/call-cni.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';

const twill = new CniNode();
const ref = new CniNode();

beforeAll(async () => {
  await sweepStaleNetns();
  await twill.setup('tw-node');
  await ref.setup('ref-node');
});

afterAll(async () => {
  await twill.destroy();
  await ref.destroy();
});

function refConf(): Record<string, unknown> {
  const ipam = {
    type: 'host-local',
    dataDir: join(ref.dir, 'ipam'),
    ranges: [[{ subnet: ref.subnet }]],
    routes: [{ dst: ref.network }],
  };
  return {
    cniVersion: '1.0.0',
    name: 'twnet',
    type: 'bridge',
    bridge: 'cni0',
    isGateway: true,
    isDefaultGateway: true,
    hairpinMode: true,
    mtu: ref.mtu,
    ipam,
  };
}

interface Link {
  ifname: string;
  mtu: number;
  flags: string[];
  operstate: string;
  link_type: string;
  addr_info: {
    family: string;
    local: string;
    prefixlen: number;
    broadcast?: string;
    scope: string;
  }[];
  linkinfo?: { info_kind?: string; info_slave_data?: { hairpin?: boolean } };
}

/** The pod's eth0 and routes, without what differs by nature (MACs, indexes, IPv6 link-local). */
async function podShape(node: CniNode, pod: string): Promise<unknown> {
  const [eth0] = (await node.ipJson(pod, ['-d', 'addr', 'show', 'dev', 'eth0'])) as Link[];
  const routes = (await node.ipJson(pod, ['route', 'show'])) as Record<string, unknown>[];
  return {
    eth0: {
      mtu: eth0?.mtu,
      flags: eth0?.flags,
      operstate: eth0?.operstate,
      kind: eth0?.linkinfo?.info_kind,
      inet: eth0?.addr_info.filter((a) => a.family === 'inet'),
    },
    routes: routes.map(({ dst, gateway, dev, protocol, scope, prefsrc }) => ({
      dst,
      gateway,
      dev,
      protocol,
      scope,
      prefsrc,
    })),
  };
}

/** The bridge (address, MTU, state) and its ports' hairpin mode. */
async function nodeShape(node: CniNode): Promise<unknown> {
  const [br] = (await node.ipJson(node.nodeNs, ['addr', 'show', 'dev', 'cni0'])) as Link[];
  const ports = (await node.ipJson(node.nodeNs, [
    '-d',
    'link',
    'show',
    'master',
    'cni0',
  ])) as Link[];
  return {
    bridge: {
      mtu: br?.mtu,
      operstate: br?.operstate,
      inet: br?.addr_info.filter((a) => a.family === 'inet'),
    },
    ports: ports.map((p) => ({
      mtu: p.mtu,
      kind: p.linkinfo?.info_kind,
      hairpin: p.linkinfo?.info_slave_data?.hairpin,
    })),
  };
}

describe('twill-cni beside bridge + host-local', () => {
  it('leaves the same pod and node shape for the same subnet and inputs', async () => {
    const twPod = await twill.pod('tw-pod');
    const refPod = await ref.pod('ref-pod');
    const a = await twill.call({ verb: 'ADD', containerId: 'same', netns: twPod });
    const b = await callCni({
      nodeNs: ref.nodeNs,
      exe: join(REFERENCE_DIR, 'bridge'),
      verb: 'ADD',
      conf: refConf(),
      containerId: 'same',
      netns: refPod,
    });
    expect([a.code, b.code]).toEqual([0, 0]);
    expect((a.json as { ips: unknown }).ips).toEqual((b.json as { ips: unknown }).ips);
    const shape = await podShape(twill, twPod);
    expect(shape).toEqual(await podShape(ref, refPod));
    expect(shape).toMatchObject({
      eth0: {
        mtu: 1450,
        inet: [{ local: '10.244.3.2', prefixlen: 24, broadcast: '10.244.3.255' }],
      },
    });
    expect(await nodeShape(twill)).toEqual(await nodeShape(ref));
    // same store layout: host-local's file name and content
    expect(await twill.reserved()).toEqual(await ref.reserved());
  });

  it('chains the reference portmap after twill: it reads twill’s result as prevResult', async () => {
    const pod = await twill.pod('pm-pod');
    const add = await twill.call({ verb: 'ADD', containerId: 'pm', netns: pod });
    expect(add.code).toBe(0);
    const podIp = (add.json as { ips: { address: string }[] }).ips[0]?.address.split('/')[0];
    const portmap = {
      cniVersion: '1.0.0',
      name: 'twnet',
      type: 'portmap',
      capabilities: { portMappings: true },
      runtimeConfig: { portMappings: [{ hostPort: 18080, containerPort: 80, protocol: 'tcp' }] },
      prevResult: add.json,
    };
    const pm = await callCni({
      nodeNs: twill.nodeNs,
      exe: join(REFERENCE_DIR, 'portmap'),
      verb: 'ADD',
      conf: portmap,
      containerId: 'pm',
      netns: pod,
    });
    expect(pm.code).toBe(0);
    expect(pm.json).toEqual(add.json); // a chained plugin passes prevResult on
    const nat = (await run('ip', ['netns', 'exec', twill.nodeNs, 'iptables-save', '-t', 'nat']))
      .stdout;
    expect(nat).toContain(`--to-destination ${podIp}:80`);
    const pmDel = await callCni({
      nodeNs: twill.nodeNs,
      exe: join(REFERENCE_DIR, 'portmap'),
      verb: 'DEL',
      conf: portmap,
      containerId: 'pm',
      netns: pod,
    });
    expect(pmDel.code).toBe(0);
    expect(
      (
        await twill.call({
          verb: 'DEL',
          containerId: 'pm',
          netns: pod,
          conf: twill.conf('1.0.0', { prevResult: add.json }),
        })
      ).code,
    ).toBe(0);
    expect(
      (await run('ip', ['netns', 'exec', twill.nodeNs, 'iptables-save', '-t', 'nat'])).stdout,
    ).not.toContain(`${podIp}:80`);
  });
});
