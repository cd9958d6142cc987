// Unit tests of the CNI plugin's pure output side: address choice, store file
// text, the ip batches, results per spec version, prevResult reading and
// CHECK's comparison.
import { describe, expect, it } from 'vitest';
import {
  batchWord,
  bridgeMac,
  hostAddBatch,
  jsonOutputs,
  linkOf,
  podAddBatch,
} from '../../cni/ip-batch.ts';
import {
  candidates,
  formatOwner,
  parseOwner,
  pickAddress,
  poolOf,
  poolSize,
} from '../../cni/ipam/pool.ts';
import { checkProblems } from '../../cni/check-problems.ts';
import { prevAddresses, renderResult, type Attachment } from '../../cni/result.ts';
import { formatIpv4, parseCidr, parseIpv4, type Cidr } from '../../src/net/ipv4.ts';

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text}`);
  return c;
}

const ip = (t: string): number => parseIpv4(t) ?? NaN;

describe('address pool', () => {
  const pool = poolOf(cidr('10.244.3.0/29'));

  it('hands out every host but the gateway, network and broadcast address', () => {
    expect([...candidates(pool)].map(formatIpv4)).toEqual([
      '10.244.3.2',
      '10.244.3.3',
      '10.244.3.4',
      '10.244.3.5',
      '10.244.3.6',
    ]);
    expect(poolSize(pool)).toBe(5);
    expect(poolSize(poolOf(cidr('10.244.3.0/24')))).toBe(253);
    expect([...candidates(poolOf(cidr('10.0.0.0/31')))]).toEqual([]);
  });

  it('goes round-robin after the last reserved address, wrapping', () => {
    expect([...candidates(pool, ip('10.244.3.4'))].map(formatIpv4)).toEqual([
      '10.244.3.5',
      '10.244.3.6',
      '10.244.3.2',
      '10.244.3.3',
      '10.244.3.4',
    ]);
    expect(formatIpv4(pickAddress(pool, new Set([ip('10.244.3.5')]), ip('10.244.3.4')) ?? 0)).toBe(
      '10.244.3.6',
    );
    expect(pickAddress(pool, new Set([...candidates(pool)]))).toBeUndefined();
    // a last address outside the pool (another subnet before) starts over
    expect(formatIpv4([...candidates(pool, ip('10.1.1.1'))][0] ?? 0)).toBe('10.244.3.2');
  });

  it("writes and reads host-local's file content", () => {
    expect(formatOwner('abc', 'eth0')).toBe('abc\r\neth0');
    expect(parseOwner('abc\r\neth0')).toEqual({ containerId: 'abc', ifname: 'eth0' });
    expect(parseOwner('abc\n')).toEqual({ containerId: 'abc', ifname: '' });
  });
});

describe('ip batches', () => {
  const wiring = {
    bridge: 'cni0',
    bridgeMac: bridgeMac(ip('10.244.3.1')),
    hostVeth: 'twv0123456789ab',
    ifname: 'eth0',
    netns: '/var/run/netns/p',
    mtu: 1450,
    gateway: { addr: ip('10.244.3.1'), prefix: 24 },
    hairpin: true,
  };

  it('wires the host side in one batch, making the bridge only when asked, touching it only once the veth pair is made', () => {
    expect(hostAddBatch(wiring, true)).toEqual({
      lines: [
        'link add name cni0 address 0a:58:0a:f4:03:01 mtu 1450 type bridge',
        'link add name twv0123456789ab mtu 1450 type veth peer name eth0 mtu 1450 netns /var/run/netns/p',
        'link set dev twv0123456789ab master cni0 up',
        'link set dev twv0123456789ab type bridge_slave hairpin on',
        'link set dev cni0 up',
        'addr replace 10.244.3.1/24 broadcast + dev cni0',
        'link show dev cni0',
        'link show dev twv0123456789ab',
      ],
      vethLine: 2,
    });
    const plain = hostAddBatch({ ...wiring, gateway: undefined, hairpin: false }, false);
    expect(plain.vethLine).toBe(1);
    expect(plain.lines.join('\n')).not.toMatch(/addr replace|hairpin|type bridge\b/);
  });

  it('refuses to put a value that ip -batch would split, cut or unquote into batch text', () => {
    for (const bad of [
      '/run/netns/p\nlink set lo up',
      '/run/netns/p q',
      'p#q',
      '"p',
      "'p",
      'p\\',
      '',
    ]) {
      expect(() => batchWord(bad)).toThrow('refusing to put');
      expect(() => hostAddBatch({ ...wiring, netns: bad }, false)).toThrow('refusing to put');
    }
    expect(batchWord('/var/run/netns/cni-1234_a.b@c+d')).toBe('/var/run/netns/cni-1234_a.b@c+d');
  });

  it('wires the pod side in one batch', () => {
    const lines = podAddBatch({
      ifname: 'eth0',
      defaultRoute: true,
      v4: {
        address: ip('10.244.3.7'),
        subnet: cidr('10.244.3.0/24'),
        gateway: ip('10.244.3.1'),
        network: cidr('10.244.0.0/16'),
      },
    });
    expect(lines).toEqual([
      'link set dev lo up',
      'addr add 10.244.3.7/24 broadcast + dev eth0',
      'link set dev eth0 up',
      'route add 10.244.0.0/16 via 10.244.3.1 dev eth0',
      'route add default via 10.244.3.1 dev eth0',
      'link show dev eth0',
    ]);
  });

  it('reads what the show commands printed', () => {
    const out = jsonOutputs(
      '[{"ifname":"cni0","address":"aa:bb:cc:dd:ee:ff","mtu":1450,"flags":["UP"]}]\n[]\n',
    );
    expect(out).toHaveLength(2);
    expect(linkOf(out[0], 'cni0')).toEqual({
      ifname: 'cni0',
      address: 'aa:bb:cc:dd:ee:ff',
      mtu: 1450,
      flags: ['UP'],
    });
    expect(() => linkOf(out[1], 'cni0')).toThrow('ip printed no link named cni0');
  });
});

const ATTACHMENT: Attachment = {
  bridge: { name: 'cni0', mac: '0a:58:0a:f4:03:01', mtu: 1450 },
  host: { name: 'twv0123456789ab', mac: '02:00:00:00:00:01', mtu: 1450 },
  pod: { name: 'eth0', mac: '02:00:00:00:00:02', mtu: 1450, sandbox: '/var/run/netns/p' },
  ip4: { address: '10.244.3.2/24', gateway: '10.244.3.1' },
  routes: [
    { dst: '10.244.0.0/16', gw: '10.244.3.1' },
    { dst: '0.0.0.0/0', gw: '10.244.3.1' },
  ],
};

describe('results', () => {
  it('answers 1.0.0 as the bridge plugin does', () => {
    expect(renderResult('1.0.0', ATTACHMENT)).toEqual({
      cniVersion: '1.0.0',
      interfaces: [
        { name: 'cni0', mac: '0a:58:0a:f4:03:01' },
        { name: 'twv0123456789ab', mac: '02:00:00:00:00:01' },
        { name: 'eth0', mac: '02:00:00:00:00:02', sandbox: '/var/run/netns/p' },
      ],
      ips: [{ interface: 2, address: '10.244.3.2/24', gateway: '10.244.3.1' }],
      routes: [
        { dst: '10.244.0.0/16', gw: '10.244.3.1' },
        { dst: '0.0.0.0/0', gw: '10.244.3.1' },
      ],
      dns: {},
    });
  });

  it.each(['0.3.0', '0.3.1', '0.4.0'] as const)('puts version "4" on the IPs for %s', (v) => {
    const r = renderResult(v, ATTACHMENT) as { cniVersion: string; ips: { version?: string }[] };
    expect(r.cniVersion).toBe(v);
    expect(r.ips[0]?.version).toBe('4');
  });

  it('adds interface MTUs for 1.1.0', () => {
    const r = renderResult('1.1.0', ATTACHMENT) as {
      interfaces: { mtu?: number }[];
      ips: { version?: string }[];
    };
    expect(r.interfaces.map((i) => i.mtu)).toEqual([1450, 1450, 1450]);
    expect(r.ips[0]?.version).toBeUndefined();
  });

  it("reads a previous result's addresses for one interface, any version", () => {
    expect(prevAddresses(renderResult('0.3.1', ATTACHMENT), 'eth0')).toEqual(['10.244.3.2/24']);
    expect(prevAddresses(renderResult('1.1.0', ATTACHMENT), 'eth1')).toEqual([]);
    expect(prevAddresses({ ips: [{ address: '10.0.0.2/24' }] }, 'eth0')).toEqual(['10.0.0.2/24']);
    expect(prevAddresses('nonsense', 'eth0')).toBeUndefined();
  });
});

describe('CHECK comparison', () => {
  const expected = {
    ifname: 'eth0',
    mtu: 1450,
    defaultRoute: true,
    v4: { address: '10.244.3.2/24', gateway: '10.244.3.1', network: '10.244.0.0/16' },
  };
  const addrs = [
    {
      ifname: 'eth0',
      mtu: 1450,
      flags: ['UP', 'LOWER_UP'],
      addr_info: [{ family: 'inet', local: '10.244.3.2', prefixlen: 24 }],
    },
  ];
  const routes = [
    { dst: 'default', gateway: '10.244.3.1' },
    { dst: '10.244.0.0/16', gateway: '10.244.3.1' },
    { dst: '10.244.3.0/24' },
  ];

  it('finds nothing wrong in what ADD set up', () => {
    expect(checkProblems(expected, { addrs, routes })).toEqual([]);
  });

  it('lists every difference', () => {
    const bad = [
      {
        ifname: 'eth0',
        mtu: 1500,
        flags: [],
        addr_info: [{ family: 'inet', local: '10.244.3.9', prefixlen: 24 }],
      },
    ];
    expect(checkProblems(expected, { addrs: bad, routes: routes.slice(2) })).toEqual([
      'interface eth0 is down',
      'interface eth0 has MTU 1500, expected 1450',
      'interface eth0 has addresses [10.244.3.9/24], expected 10.244.3.2/24',
      'no route to 10.244.0.0/16 via 10.244.3.1',
      'no default route via 10.244.3.1',
    ]);
    expect(checkProblems(expected, { addrs: [], routes })).toEqual(['interface eth0 is missing']);
  });
});
