// A table of bad inputs, each given to the executable as a runtime would:
// the right CNI error code, a message naming the variable or field and its
// value, the error JSON on stdout (nothing on stdout but that), and no state
// left behind (no address reserved, no veth, nothing in the pod), also when
// the pod side fails after the host side was wired. And inputs meant to do
// harm: a CNI_NETNS that would inject an `ip` command, a `bridge` that is
// not a bridge: refused with nothing changed in the node namespace.
import { mkdir, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import { CniNode } from '../helpers/cni.ts';
import { netnsPath, subnetEnvText } from '../../lab/kit/call-cni.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';

const node = new CniNode();
let pod = '';

beforeAll(async () => {
  await sweepStaleNetns();
  await node.setup();
  pod = await node.pod('bad');
});

afterAll(async () => {
  await node.destroy();
});

interface Row {
  readonly name: string;
  readonly env?: Record<string, string | undefined>;
  readonly conf?: () => unknown;
  readonly verb?: string;
  readonly subnetEnv?: string;
  readonly code: number;
  readonly msg: string;
}

const ROWS: readonly Row[] = [
  {
    name: 'CNI_COMMAND missing',
    env: { CNI_COMMAND: undefined },
    code: 4,
    msg: 'CNI_COMMAND is not set',
  },
  {
    name: 'CNI_COMMAND unknown',
    verb: 'FROB',
    code: 4,
    msg: 'CNI_COMMAND "FROB" is not one of ADD, DEL, CHECK, VERSION, STATUS, GC',
  },
  {
    name: 'CNI_CONTAINERID missing',
    env: { CNI_CONTAINERID: undefined },
    code: 4,
    msg: 'CNI_CONTAINERID is not set; ADD needs it',
  },
  {
    name: 'CNI_NETNS missing',
    env: { CNI_NETNS: undefined },
    code: 4,
    msg: 'CNI_NETNS is not set; ADD needs it',
  },
  {
    name: 'CNI_IFNAME missing',
    env: { CNI_IFNAME: undefined },
    code: 4,
    msg: 'CNI_IFNAME is not set; ADD needs it',
  },
  {
    name: 'CNI_IFNAME too long',
    env: { CNI_IFNAME: 'eth0-much-too-long' },
    code: 4,
    msg: 'CNI_IFNAME "eth0-much-too-long" is 18 bytes long; at most 15 are allowed',
  },
  {
    name: 'CNI_IFNAME too long in bytes',
    env: { CNI_IFNAME: 'ethéééééééé' },
    code: 4,
    msg: 'CNI_IFNAME "ethéééééééé" is 19 bytes long',
  },
  {
    name: 'CNI_IFNAME with #',
    env: { CNI_IFNAME: 'eth#0' },
    code: 4,
    msg: 'CNI_IFNAME "eth#0" may hold only letters, digits',
  },
  {
    name: 'CNI_IFNAME with a leading quote',
    env: { CNI_IFNAME: '"eth0' },
    code: 4,
    msg: 'CNI_IFNAME "\\"eth0" may hold only',
  },
  {
    name: 'CNI_NETNS with a space',
    env: { CNI_NETNS: '/var/run/netns/a b' },
    code: 4,
    msg: 'CNI_NETNS "/var/run/netns/a b" must not contain control characters, white space, "#", quotes or backslashes',
  },
  {
    name: 'bridge with #',
    conf: () => node.conf('1.0.0', { bridge: 'br#0' }),
    code: 7,
    msg: '"bridge" "br#0" may hold only letters, digits',
  },
  {
    name: 'ADD with a prevResult',
    conf: () =>
      node.conf('1.0.0', {
        prevResult: {
          cniVersion: '1.0.0',
          interfaces: [{ name: 'eth0' }],
          ips: [{ address: '10.9.0.2/24', interface: 0 }],
        },
      }),
    code: 7,
    msg: 'network config: "prevResult" is set, but twill creates the pod\'s interface',
  },
  {
    name: 'netns path does not exist',
    env: { CNI_NETNS: '/var/run/netns/twill-no-such-netns' },
    code: 4,
    msg: 'CNI_NETNS "/var/run/netns/twill-no-such-netns" does not exist',
  },
  {
    name: 'bad JSON',
    conf: () => '{"cniVersion": "1.0.0", "name": ',
    code: 6,
    msg: 'network config: not valid JSON',
  },
  {
    name: 'unknown cniVersion',
    conf: () => node.conf('0.2.0'),
    code: 1,
    msg: '"cniVersion" "0.2.0" is not supported',
  },
  {
    name: 'bad config value',
    conf: () => node.conf('1.0.0', { mtu: 'big' }),
    code: 7,
    msg: '"mtu" must be an integer from 68 to 65535, got "big"',
  },
  {
    name: 'subnet.env missing',
    conf: () => node.conf('1.0.0', { subnetFile: join(node.dir, 'nope.env') }),
    code: 11,
    msg: 'nope.env does not exist yet',
  },
  {
    name: 'bad subnet.env',
    subnetEnv:
      'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=banana\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n',
    code: 102,
    msg: 'FLANNEL_SUBNET "banana" is not a CIDR',
  },
  { name: 'CHECK without prevResult', verb: 'CHECK', code: 7, msg: 'CHECK needs "prevResult"' },
  {
    name: 'malformed FLANNEL_IPV6_NETWORK',
    subnetEnv: dualEnv('FLANNEL_IPV6_NETWORK=fd00::zz/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:3::1/64'),
    code: 102,
    msg: 'FLANNEL_IPV6_NETWORK "fd00::zz/48" is not an IPv6 network CIDR',
  },
  {
    name: 'FLANNEL_IPV6_NETWORK with host bits',
    subnetEnv: dualEnv('FLANNEL_IPV6_NETWORK=fd00::1/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:3::1/64'),
    code: 102,
    msg: 'FLANNEL_IPV6_NETWORK "fd00::1/48" is not an IPv6 network CIDR',
  },
  {
    name: 'IPv4 CIDR as FLANNEL_IPV6_SUBNET',
    subnetEnv: dualEnv('FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=10.244.3.1/24'),
    code: 102,
    msg: 'FLANNEL_IPV6_SUBNET "10.244.3.1/24" is not an IPv6 CIDR',
  },
  {
    name: 'FLANNEL_IPV6_SUBNET without FLANNEL_IPV6_NETWORK',
    subnetEnv: dualEnv('FLANNEL_IPV6_SUBNET=fd00:0:0:3::1/64'),
    code: 102,
    msg: 'FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET must be given together',
  },
];

/** A subnet.env with the given FLANNEL_IPV6_* lines after the IPv4 pair. */
function dualEnv(ipv6Lines: string): string {
  return `FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\n${ipv6Lines}\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n`;
}

/**
 * The node's links with their addresses, MTU and flags as set (not the
 * carrier or operstate, which the kernel changes on its own as a bridge's
 * last port of an earlier test goes away).
 */
async function linksAndAddresses(): Promise<unknown> {
  const links = (await node.ipJson(node.nodeNs, ['addr', 'show'])) as {
    ifname?: string;
    mtu?: number;
    address?: string;
    flags?: string[];
    addr_info?: unknown[];
  }[];
  return links.map((l) => ({
    ifname: l.ifname,
    mtu: l.mtu,
    address: l.address,
    flags: (l.flags ?? []).filter((f) => f !== 'NO-CARRIER' && f !== 'LOWER_UP'),
    // an IPv6 address leaves "tentative" when the kernel's duplicate address detection ends, about
    // a second after it was added, whatever the plugin does: not a change the plugin made
    addr_info: (l.addr_info ?? []).map((a) => {
      const { tentative: _t, ...rest } = a as Record<string, unknown>;
      return rest;
    }),
  }));
}
describe('twill-cni with bad input', () => {
  it.each(ROWS)('$name → code $code', async (row) => {
    if (row.subnetEnv) await node.writeSubnetEnv(row.subnetEnv);
    try {
      const answer = await node.call({
        verb: row.verb ?? 'ADD',
        containerId: 'bad',
        netns: pod,
        conf: row.conf?.() ?? node.conf(),
        ...(row.env ? { env: row.env } : {}),
      });
      expect(answer.code).toBe(1);
      expect(answer.stdout.trim().split('\n')).toHaveLength(1);
      expect(answer.json).toMatchObject({ code: row.code, msg: expect.stringContaining(row.msg) });
      expect(typeof answer.json?.cniVersion).toBe('string');
    } finally {
      if (row.subnetEnv) await node.writeSubnetEnv();
    }
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
    expect(JSON.stringify(await node.ipJson(pod, ['link', 'show']))).not.toContain('eth0');
  });

  it('rolls back the veth and the address when the pod side fails half way', async () => {
    const busy = await node.pod('busy');
    // a route the pod batch will find in its way
    await run('ip', ['-n', busy, 'link', 'add', 'in0', 'type', 'veth', 'peer', 'name', 'in1']);
    for (const dev of ['in0', 'in1']) await run('ip', ['-n', busy, 'link', 'set', dev, 'up']);
    await run('ip', ['-n', busy, 'route', 'add', node.network, 'dev', 'in0']);
    const answer = await node.call({ verb: 'ADD', containerId: 'busy', netns: busy });
    expect(answer.json).toMatchObject({ code: 101, msg: expect.stringContaining('File exists') });
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
    expect(JSON.stringify(await node.ipJson(busy, ['link', 'show']))).not.toContain('eth0');
  });

  it('rolls back both addresses and the veth when the IPv6 side of a dual-stack pod fails', async () => {
    const busy = await node.pod('busy6');
    await run('ip', ['-n', busy, 'link', 'add', 'in0', 'type', 'veth', 'peer', 'name', 'in1']);
    for (const dev of ['in0', 'in1']) await run('ip', ['-n', busy, 'link', 'set', dev, 'up']);
    // the IPv6 network route the pod batch will find in its way
    await run('ip', ['-n', busy, 'route', 'add', 'fd00::/48', 'dev', 'in0']);
    await node.writeSubnetEnv(
      subnetEnvText({
        network: node.network,
        subnet: node.subnet,
        mtu: node.mtu,
        network6: 'fd00::/48',
        subnet6: 'fd00:0:0:3::/64',
      }),
    );
    try {
      const answer = await node.call({ verb: 'ADD', containerId: 'busy6', netns: busy });
      expect(answer.json).toMatchObject({ code: 101, msg: expect.stringContaining('File exists') });
    } finally {
      await node.writeSubnetEnv();
    }
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
    expect(JSON.stringify(await node.ipJson(busy, ['link', 'show']))).not.toContain('eth0');
  });

  it('refuses a CNI_NETNS that would inject a command into the ip batch, and changes nothing in the node', async () => {
    const hostilePod = await node.pod('hostile');
    const target = netnsPath(hostilePod);
    const dir = join(node.dir, 'hostile');
    await mkdir(dir);
    // the batch line would end at ".../p" (a real netns too), and the rest would run as its own
    // command
    await symlink(target, join(dir, 'p'));
    const hostile = join(dir, 'p\nlink set lo up');
    await symlink(target, hostile);
    await run('ip', ['-n', node.nodeNs, 'link', 'set', 'lo', 'down']);
    try {
      const before = await linksAndAddresses();
      const answer = await node.call({ verb: 'ADD', containerId: 'hostile', netns: hostile });
      expect(answer.json).toMatchObject({
        code: 4,
        msg: `CNI_NETNS ${JSON.stringify(hostile)} must not contain control characters, white space, "#", quotes or backslashes`,
      });
      expect(await linksAndAddresses()).toEqual(before);
      expect(await node.reserved()).toEqual([]);
      expect(JSON.stringify(await node.ipJson(hostilePod, ['link', 'show']))).not.toContain('eth0');
    } finally {
      await run('ip', ['-n', node.nodeNs, 'link', 'set', 'lo', 'up']);
    }
  });

  it.each([
    ['lo', 'it is a loopback device', async () => undefined],
    [
      'notbr0',
      'it is a veth device',
      async () =>
        void (await run('ip', [
          '-n',
          node.nodeNs,
          'link',
          'add',
          'notbr0',
          'type',
          'veth',
          'peer',
          'name',
          'notbr1',
        ])),
    ],
  ])('refuses bridge %s, which is not a bridge, before touching it', async (dev, kind, make) => {
    await make();
    const pod = await node.pod(`nb-${dev}`);
    const before = await linksAndAddresses();
    const answer = await node.call({
      verb: 'ADD',
      containerId: `nb-${dev}`,
      netns: pod,
      conf: node.conf('1.0.0', { bridge: dev }),
    });
    expect(answer.json).toMatchObject({
      code: 7,
      msg: `network config: "bridge" "${dev}": ${dev} already exists but is not a bridge (${kind}); twill leaves it alone`,
    });
    expect(await linksAndAddresses()).toEqual(before);
    const after = (await node.ipJson(node.nodeNs, ['addr', 'show', 'dev', dev])) as {
      addr_info: { local: string }[];
    }[];
    expect(after[0]?.addr_info.map((a) => a.local)).not.toContain('10.244.3.1');
    expect(await node.reserved()).toEqual([]);
    expect(await node.hostVeths()).toEqual([]);
    expect(JSON.stringify(await node.ipJson(pod, ['link', 'show']))).not.toContain('eth0');
  });
});
