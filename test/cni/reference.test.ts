// Side by side with the reference plugins (/usr/lib/cni, Debian's
// containernetworking-plugins): for the same subnet and inputs, twill's ADD
// leaves the pod namespace with the same shape (interface, address, routes,
// MTU) and the node with the same bridge as bridge + host-local; on a
// dual-stack node too, beside host-local with two ranges (one per family),
// and on an IPv6-only node beside host-local with its one IPv6 range (as
// flannel's plugin configures it). And the reference portmap chains after
// twill, reading twill's result as prevResult.
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import { CniNode } from '../helpers/cni.ts';
import { REFERENCE_DIR, callCni } from '../../lab/kit/call-cni.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';

const twill = new CniNode();
const ref = new CniNode();
const DUAL = { subnet: '10.244.5.0/24', network6: 'fd00::/48', subnet6: 'fd00:0:0:5::/64' };
const twill6 = new CniNode(DUAL);
const ref6 = new CniNode(DUAL);
const V6ONLY = { ipv4: false, network6: 'fd00::/48', subnet6: 'fd00:0:0:6::/64' };
const twillV6 = new CniNode(V6ONLY);
const refV6 = new CniNode(V6ONLY);

beforeAll(async () => {
  await sweepStaleNetns();
  await twill.setup('tw-node');
  await ref.setup('ref-node');
  await twill6.setup('tw6-node');
  await ref6.setup('ref6-node');
  await twillV6.setup('twv6-node');
  await refV6.setup('refv6-node');
});

afterAll(async () => {
  await twill.destroy();
  await ref.destroy();
  await twill6.destroy();
  await ref6.destroy();
  await twillV6.destroy();
  await refV6.destroy();
});

function refConf(node: CniNode = ref): Record<string, unknown> {
  const v6 = node.subnet6 !== undefined && node.network6 !== undefined;
  const v4 = node.ipv4;
  const ipam = {
    type: 'host-local',
    dataDir: join(node.dir, 'ipam'),
    ranges: [
      ...(v4 ? [[{ subnet: node.subnet }]] : []),
      ...(v6 ? [[{ subnet: node.subnet6 }]] : []),
    ],
    routes: [...(v4 ? [{ dst: node.network }] : []), ...(v6 ? [{ dst: node.network6 }] : [])],
  };
  return {
    cniVersion: '1.0.0',
    name: 'twnet',
    type: 'bridge',
    bridge: 'cni0',
    isGateway: true,
    isDefaultGateway: true,
    hairpinMode: true,
    mtu: node.mtu,
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

interface Addr6 {
  family: string;
  local: string;
  prefixlen: number;
  scope: string;
  tentative?: boolean;
}

/** The IPv6 side: the pod's global address, its IPv6 routes, the bridge's global address. */
async function ipv6Shape(node: CniNode, pod: string): Promise<unknown> {
  const global = (addrs: Addr6[] | undefined) =>
    (addrs ?? [])
      .filter((a) => a.family === 'inet6' && a.scope === 'global')
      .map(({ local, prefixlen, scope }) => ({ local, prefixlen, scope }));
  const [eth0] = (await node.ipJson(pod, ['addr', 'show', 'dev', 'eth0'])) as {
    addr_info: Addr6[];
  }[];
  const [br] = (await node.ipJson(node.nodeNs, ['addr', 'show', 'dev', 'cni0'])) as {
    addr_info: Addr6[];
  }[];
  const routes = (await node.ipJson(pod, ['-6', 'route', 'show'])) as Record<string, unknown>[];
  return {
    eth0: global(eth0?.addr_info),
    bridge: global(br?.addr_info),
    routes: routes.map(({ dst, gateway, dev, protocol, metric }) => ({
      dst,
      gateway,
      dev,
      protocol,
      metric,
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

  it('leaves the same dual-stack shape as bridge + host-local with one range per family', async () => {
    const twPod = await twill6.pod('tw6-pod');
    const refPod = await ref6.pod('ref6-pod');
    const a = await twill6.call({ verb: 'ADD', containerId: 'same6', netns: twPod });
    const b = await callCni({
      nodeNs: ref6.nodeNs,
      exe: join(REFERENCE_DIR, 'bridge'),
      verb: 'ADD',
      conf: refConf(ref6),
      containerId: 'same6',
      netns: refPod,
    });
    expect([a.code, b.code]).toEqual([0, 0]);
    expect((a.json as { ips: unknown }).ips).toEqual((b.json as { ips: unknown }).ips);
    expect((a.json as { ips: unknown[] }).ips).toHaveLength(2);
    // the same routes in the result, whatever their order (host-local lists its own routes, without
    // a gateway, before the bridge's default routes)
    const dsts = (json: unknown) =>
      (json as { routes: { dst: string }[] }).routes.map((r) => r.dst).sort();
    expect(dsts(a.json)).toEqual(dsts(b.json));
    expect(await podShape(twill6, twPod)).toEqual(await podShape(ref6, refPod));
    const shape = await ipv6Shape(twill6, twPod);
    expect(shape).toEqual(await ipv6Shape(ref6, refPod));
    expect(shape).toMatchObject({
      eth0: [{ local: 'fd00:0:0:5::2', prefixlen: 64 }],
      bridge: [{ local: 'fd00:0:0:5::1', prefixlen: 64 }],
    });
    // unlike the reference's, twill's IPv6 gateway is usable at once (nodad)
    const [br] = (await twill6.ipJson(twill6.nodeNs, ['addr', 'show', 'dev', 'cni0'])) as {
      addr_info: Addr6[];
    }[];
    expect(br?.addr_info.find((x) => x.local === 'fd00:0:0:5::1')?.tentative).toBeUndefined();
    // same store layout: host-local's file names (both families) and content
    expect(await twill6.reserved()).toEqual(await ref6.reserved());
    expect(await twill6.reserved()).toEqual(['10.244.5.2', 'fd00:0:0:5::2']);
    // and the same round-robin hints (last_reserved_ip.0 and .1), without the plugins' locks
    const files = async (n: CniNode) =>
      (await readdir(n.storeDir)).filter((f) => !f.startsWith('.') && f !== 'lock').sort();
    expect(await files(twill6)).toEqual(await files(ref6));
  });

  it('leaves the same IPv6-only shape as bridge + host-local with one IPv6 range', async () => {
    const twPod = await twillV6.pod('twv6-pod');
    const refPod = await refV6.pod('refv6-pod');
    const a = await twillV6.call({ verb: 'ADD', containerId: 'samev6', netns: twPod });
    const b = await callCni({
      nodeNs: refV6.nodeNs,
      exe: join(REFERENCE_DIR, 'bridge'),
      verb: 'ADD',
      conf: refConf(refV6),
      containerId: 'samev6',
      netns: refPod,
    });
    expect([a.code, b.code]).toEqual([0, 0]);
    expect((a.json as { ips: unknown }).ips).toEqual((b.json as { ips: unknown }).ips);
    expect((a.json as { ips: unknown[] }).ips).toEqual([
      { interface: 2, address: 'fd00:0:0:6::2/64', gateway: 'fd00:0:0:6::1' },
    ]);
    const dsts = (json: unknown) =>
      (json as { routes: { dst: string }[] }).routes.map((r) => r.dst).sort();
    expect(dsts(a.json)).toEqual(dsts(b.json));
    // no IPv4 in either pod (address or route) nor on either bridge
    const shape = await podShape(twillV6, twPod);
    expect(shape).toEqual(await podShape(refV6, refPod));
    expect(shape).toMatchObject({ eth0: { mtu: 1450, inet: [] }, routes: [] });
    expect(await nodeShape(twillV6)).toEqual(await nodeShape(refV6));
    expect(await nodeShape(twillV6)).toMatchObject({ bridge: { inet: [] } });
    const shape6 = await ipv6Shape(twillV6, twPod);
    expect(shape6).toEqual(await ipv6Shape(refV6, refPod));
    expect(shape6).toMatchObject({
      eth0: [{ local: 'fd00:0:0:6::2', prefixlen: 64 }],
      bridge: [{ local: 'fd00:0:0:6::1', prefixlen: 64 }],
    });
    // same store layout: the IPv6 address file and host-local's hint for its only range set,
    // last_reserved_ip.0
    const files = async (n: CniNode) =>
      (await readdir(n.storeDir)).filter((f) => !f.startsWith('.') && f !== 'lock').sort();
    expect(await files(twillV6)).toEqual(await files(refV6));
    expect(await files(twillV6)).toEqual(['fd00:0:0:6::2', 'last_reserved_ip.0']);
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
