// Unit tests of peer admission (docs/design.md, rule 6): one lease at a time
// (`checkPeer`: a bad peer gets a reason code and a detail that names the bad
// value, a good one gets undefined), and the set as a whole (`admitPeers`:
// conflicting subnets and VtepMACs, whatever the order leases come in).
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { parseLeaseKey, parseSubnetKey } from '../../src/lease/codec.ts';
import type { Lease, LeaseAttrs } from '../../src/lease/types.ts';
import {
  admitPeers,
  checkPeer,
  forOurFamilies,
  REFUSAL_REASONS,
  truncated,
  type PeerContext,
} from '../../src/lease/admit.ts';
import { formatCidr, parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';

const VXLAN_CFG = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":1}}');
const HOST_GW_CFG = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}');
const SELF = cidr('10.244.3.0/24');

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text} is not a network CIDR`);
  return c;
}

function cidr6(text: string): Cidr6 {
  const c = parseCidr6(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text} is not an IPv6 network CIDR`);
  return c;
}

const VXLAN_ATTRS: LeaseAttrs = {
  publicIp: '192.168.56.12',
  publicIpv6: null,
  backendType: 'vxlan',
  backendData: { vni: 1, vtepMac: '7e:1b:4f:9a:2c:02' },
};

function lease(key: string, attrs: Partial<LeaseAttrs> = {}): Lease {
  return {
    key,
    subnet: parseSubnetKey(key),
    attrs: { ...VXLAN_ATTRS, ...attrs },
    expiresAt: 1_700_000_000_000,
    version: '7',
  };
}

/** The detail of `checkPeer`'s refusal (what the older tests read), or undefined. */
function problem(l: Lease, ctx: PeerContext): string | undefined {
  return checkPeer(l, ctx)?.detail;
}

describe('checkPeer', () => {
  it('accepts a valid vxlan peer', () => {
    expect(problem(lease('10.244.4.0-24'), { config: VXLAN_CFG, self: SELF })).toBeUndefined();
  });

  it('accepts a valid host-gw peer', () => {
    const peer = lease('10.244.4.0-24', { backendType: 'host-gw', backendData: null });
    expect(problem(peer, { config: HOST_GW_CFG, self: SELF })).toBeUndefined();
  });

  it('accepts a peer while we hold no subnet yet', () => {
    expect(problem(lease('10.244.3.0-24'), { config: VXLAN_CFG, self: undefined })).toBeUndefined();
  });

  it('accepts peers at SubnetMin and SubnetMax (by default the second and the last /24), refuses one below SubnetMin', () => {
    expect(problem(lease('10.244.1.0-24'), { config: VXLAN_CFG, self: SELF })).toBeUndefined();
    expect(problem(lease('10.244.255.0-24'), { config: VXLAN_CFG, self: SELF })).toBeUndefined();
    expect(checkPeer(lease('10.244.0.0-24'), { config: VXLAN_CFG, self: SELF })).toEqual({
      reason: 'outside-range',
      detail: 'subnet 10.244.0.0/24 is outside SubnetMin..SubnetMax',
    });
    // Kubernetes podCIDRs come from the controller-manager's --cluster-cidr: the whole Network
    expect(
      checkPeer(lease('10.244.0.0-24'), { config: VXLAN_CFG, self: SELF, anySubnetSize: true }),
    ).toBeUndefined();
  });

  it.each([
    ['a subnet of the wrong length', lease('10.244.4.0-25'), ['10.244.4.0/25', '/24']],
    ['a wider subnet', lease('10.244.0.0-16'), ['10.244.0.0/16', '/24']],
    ['a subnet outside Network', lease('10.245.4.0-24'), ['10.245.4.0/24', '10.244.0.0/16']],
    ['a subnet just below Network', lease('10.243.255.0-24'), ['10.243.255.0/24', 'outside']],
    ['the whole address space', lease('0.0.0.0-0'), ['0.0.0.0/0']],
    ['our own subnet', lease('10.244.3.0-24'), ['10.244.3.0/24', 'overlaps', 'our own']],
    [
      'PublicIP loopback',
      lease('10.244.4.0-24', { publicIp: '127.0.0.1' }),
      ['PublicIP', '127.0.0.1'],
    ],
    [
      'PublicIP unspecified',
      lease('10.244.4.0-24', { publicIp: '0.0.0.0' }),
      ['PublicIP', '0.0.0.0'],
    ],
    [
      'PublicIP multicast',
      lease('10.244.4.0-24', { publicIp: '224.0.0.1' }),
      ['PublicIP', '224.0.0.1'],
    ],
    [
      'PublicIP broadcast',
      lease('10.244.4.0-24', { publicIp: '255.255.255.255' }),
      ['PublicIP', '255.255.255.255'],
    ],
    [
      'PublicIP not an address',
      lease('10.244.4.0-24', { publicIp: '10.0.0' }),
      ['PublicIP', '10.0.0'],
    ],
    [
      'a host-gw peer in a vxlan network',
      lease('10.244.4.0-24', { backendType: 'host-gw', backendData: null }),
      ['BackendType', 'host-gw', 'vxlan'],
    ],
    [
      'a VNI differing from ours',
      lease('10.244.4.0-24', { backendData: { vni: 2, vtepMac: '7e:1b:4f:9a:2c:02' } }),
      ['BackendData.VNI', '2', '(1)'],
    ],
    [
      'a vxlan peer without BackendData',
      lease('10.244.4.0-24', { backendData: null }),
      ['BackendData.VNI', 'undefined'],
    ],
  ])('refuses %s', (_name, peer, parts) => {
    const reason = problem(peer, { config: VXLAN_CFG, self: SELF });
    expect(reason).toBeTypeOf('string');
    for (const part of parts) expect(reason).toContain(part);
  });

  it('refuses a vxlan peer without a VtepMAC, unless DirectRouting reaches it on-link', () => {
    const noMac = lease('10.244.4.0-24', { backendData: { vni: 1 } as LeaseAttrs['backendData'] });
    const underlay = { name: 'eth0', networks: ['192.168.56.2/24'] };
    const direct = parseNetConfig(
      '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":1,"DirectRouting":true}}',
    );
    expect(checkPeer(noMac, { config: VXLAN_CFG, self: SELF, underlay })?.reason).toBe('vtep-mac');
    expect(checkPeer(noMac, { config: direct, self: SELF, underlay })).toBeUndefined();
    const far = lease('10.244.5.0-24', {
      publicIp: '198.51.100.5',
      backendData: { vni: 1 } as LeaseAttrs['backendData'],
    });
    expect(checkPeer(far, { config: direct, self: SELF, underlay })?.reason).toBe('vtep-mac');
  });

  it('refuses a host-gw peer whose PublicIP is not on-link on the underlay', () => {
    const underlay = { name: 'eth0', networks: ['192.168.56.2/24'] };
    const hg = { backendType: 'host-gw', backendData: null } as const;
    expect(
      checkPeer(lease('10.244.4.0-24', hg), { config: HOST_GW_CFG, self: SELF, underlay }),
    ).toBeUndefined();
    const far = lease('10.244.5.0-24', { ...hg, publicIp: '198.51.100.5' });
    expect(checkPeer(far, { config: HOST_GW_CFG, self: SELF, underlay })).toEqual({
      reason: 'not-on-link',
      detail: expect.stringContaining(
        'PublicIP 198.51.100.5 is not on-link on eth0 (192.168.56.2/24)',
      ),
    });
  });

  it('refuses a vxlan peer in a host-gw network', () => {
    const reason = problem(lease('10.244.4.0-24'), { config: HOST_GW_CFG, self: SELF });
    expect(reason).toBe('BackendType vxlan differs from ours (host-gw)');
  });

  it('checks the VNI against a non-default VNI', () => {
    const cfg = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096}}');
    expect(problem(lease('10.244.4.0-24'), { config: cfg, self: SELF })).toBe(
      'BackendData.VNI 1 differs from ours (4096)',
    );
    const same = lease('10.244.4.0-24', {
      backendData: { vni: 4096, vtepMac: '7e:1b:4f:9a:2c:02' },
    });
    expect(problem(same, { config: cfg, self: SELF })).toBeUndefined();
  });

  it('reports the wrong length with the exact reason', () => {
    expect(problem(lease('10.244.4.0-25'), { config: VXLAN_CFG, self: SELF })).toBe(
      'subnet 10.244.4.0/25 is not a /24 (SubnetLen)',
    );
  });
});

describe('checkPeer: one reason per refusal, for the metric', () => {
  const CTX: PeerContext = {
    config: VXLAN_CFG,
    self: SELF,
    selfPublicIp: '192.168.56.11',
    selfVtepMac: '7e:1b:4f:9a:2c:01',
  };
  it.each([
    ['subnet-size', lease('10.244.4.0-25')],
    ['outside-network', lease('10.245.4.0-24')],
    ['outside-range', lease('10.244.0.0-24')],
    ['overlaps-own', lease('10.244.3.0-24')],
    ['public-ip', lease('10.244.4.0-24', { publicIp: '127.0.0.1' })],
    ['public-ip', lease('10.244.4.0-24', { publicIp: '192.168.56.11' })],
    ['public-ip', lease('10.244.4.0-24', { publicIp: '10.244.9.9' })],
    ['backend-type', lease('10.244.4.0-24', { backendType: 'host-gw', backendData: null })],
    ['vni', lease('10.244.4.0-24', { backendData: { vni: 2, vtepMac: '7e:1b:4f:9a:2c:02' } })],
    ['vtep-mac', lease('10.244.4.0-24', { backendData: { vni: 1, vtepMac: '7E:1B:4F:9A:2C:01' } })],
  ] as const)('%s: %j', (reason, peer) => {
    expect(checkPeer(peer, CTX)?.reason).toBe(reason);
  });

  it('names what is wrong with our own address and the pod Network', () => {
    expect(checkPeer(lease('10.244.4.0-24', { publicIp: '192.168.56.11' }), CTX)?.detail).toBe(
      "PublicIP 192.168.56.11 is this node's own address",
    );
    expect(checkPeer(lease('10.244.4.0-24', { publicIp: '10.244.9.9' }), CTX)?.detail).toBe(
      'PublicIP 10.244.9.9 is inside the pod Network 10.244.0.0/16',
    );
  });

  it('truncates hostile values in the detail', () => {
    const long = 'x'.repeat(5000);
    const detail = checkPeer(lease('10.244.4.0-24', { publicIp: long }), CTX)?.detail ?? '';
    expect(detail.length).toBeLessThan(140);
    expect(detail).toContain('(5000 chars)');
    expect(truncated('short')).toBe('short');
  });

  it('every reason is a metric label the daemon pre-creates', () => {
    expect(REFUSAL_REASONS).toContain('subnet-conflict');
    expect(REFUSAL_REASONS).toContain('malformed');
  });
});

describe('admitPeers', () => {
  const KUBE: PeerContext = { config: VXLAN_CFG, self: SELF, anySubnetSize: true };
  const node = (key: string, subnet: string, mac: string, ip = '192.168.56.20'): Lease => ({
    ...lease('10.244.4.0-24', { publicIp: ip, backendData: { vni: 1, vtepMac: mac } }),
    key,
    subnet: cidr(subnet),
  });

  it("a Node whose /23 covers two nodes' /24s is refused; both /24s keep their place, whatever the order", () => {
    const peers = [
      node('n1', '10.244.4.0/24', '7e:00:00:00:00:01'),
      node('n2', '10.244.5.0/24', '7e:00:00:00:00:02'),
      node('evil', '10.244.4.0/23', '7e:00:00:00:00:03'),
    ];
    for (const order of [peers, [...peers].reverse(), [peers[2], peers[0], peers[1]] as Lease[]]) {
      const a = admitPeers(order, KUBE);
      expect(a.admitted.map((l) => l.key).sort()).toEqual(['n1', 'n2']);
      expect(a.refused.map((r) => [r.lease.key, r.refusal.reason])).toEqual([
        ['evil', 'subnet-conflict'],
      ]);
    }
  });

  it('of peers claiming one subnet or one VtepMAC, the first claim keeps it and the later one is refused, whatever the order', () => {
    const at = (l: Lease, claimedAt: number): Lease => ({ ...l, claimedAt });
    const owner = at(node('n1', '10.244.4.0/24', '7e:00:00:00:00:01'), 100);
    const subnetThief = at(node('thief', '10.244.4.0/24', '7e:00:00:00:00:09'), 250);
    const macThief = at(node('mimic', '10.244.6.0/24', '7e:00:00:00:00:01'), 300);
    const n2 = at(node('n2', '10.244.5.0/24', '7e:00:00:00:00:02'), 120);
    for (const order of [
      [owner, subnetThief, macThief, n2],
      [macThief, n2, subnetThief, owner],
    ]) {
      const a = admitPeers(order, KUBE);
      expect(a.admitted.map((l) => l.key).sort()).toEqual(['n1', 'n2']);
      expect(a.refused.map((r) => [r.lease.key, r.refusal.reason, r.refusal.detail])).toEqual([
        ['mimic', 'vtep-mac', 'VtepMAC 7e:00:00:00:00:01 was claimed first by peer n1'],
        ['thief', 'subnet-conflict', 'subnet 10.244.4.0/24 was claimed first by peer n1'],
      ]);
    }
  });

  it("two peers with one subnet and no clear first claim refuse each other (neither may take the other's traffic)", () => {
    const a = admitPeers(
      [
        node('n1', '10.244.4.0/24', '7e:00:00:00:00:01'),
        node('copy', '10.244.4.0/24', '7e:00:00:00:00:02'),
        node('n2', '10.244.5.0/24', '7e:00:00:00:00:03'),
      ],
      KUBE,
    );
    expect(a.admitted.map((l) => l.key)).toEqual(['n2']);
    expect(a.refused.map((r) => r.lease.key)).toEqual(['copy', 'n1']);
  });

  it('two peers with one VtepMAC and no clear first claim refuse each other', () => {
    const peers = [
      node('n1', '10.244.4.0/24', '7e:00:00:00:00:01'),
      node('n2', '10.244.5.0/24', '7E:00:00:00:00:01'),
      node('n3', '10.244.6.0/24', '7e:00:00:00:00:03'),
    ];
    const a = admitPeers(peers, KUBE);
    expect(a.admitted.map((l) => l.key)).toEqual(['n3']);
    expect(a.refused.map((r) => [r.lease.key, r.refusal.reason])).toEqual([
      ['n1', 'vtep-mac'],
      ['n2', 'vtep-mac'],
    ]);
  });

  it('per-lease refusals come first: a lease refused on its own takes no part in conflicts', () => {
    // the wide lease is outside Network entirely: refused for that, and so it cannot knock out the
    // /24 it covers
    const a = admitPeers(
      [
        node('n1', '10.244.4.0/24', '7e:00:00:00:00:01'),
        node('wide', '10.0.0.0/8', '7e:00:00:00:00:02'),
      ],
      KUBE,
    );
    expect(a.admitted.map((l) => l.key)).toEqual(['n1']);
    expect(a.refused.map((r) => [r.lease.key, r.refusal.reason])).toEqual([
      ['wide', 'outside-network'],
    ]);
  });
});

describe('dual-stack peers', () => {
  const DUAL_VXLAN = parseNetConfig(
    '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan","VNI":1}}',
  );
  const DUAL_HOST_GW = parseNetConfig(
    '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"}}',
  );
  const SELF6 = cidr6('fd00:10:244:3::/64');
  const CTX: PeerContext = {
    config: DUAL_VXLAN,
    self: SELF,
    self6: SELF6,
    selfPublicIp: '192.168.56.11',
    selfPublicIpv6: 'fd00:56::11',
    selfVtepMac: '7e:1b:4f:9a:2c:01',
    selfVtepMac6: '9a:41:e0:11:6b:01',
  };
  const DUAL_ATTRS: Partial<LeaseAttrs> = {
    publicIpv6: 'fd00:56::12',
    backendData6: { vni: 1, vtepMac: '9a:41:e0:11:6b:02' },
  };
  /** a dual-stack lease from its flannel key ("10.244.4.0-24&fd00:10:244:4::-64") */
  function dual(key: string, attrs: Partial<LeaseAttrs> = {}): Lease {
    const { subnet, subnet6 } = parseLeaseKey(key);
    return {
      key,
      subnet,
      subnet6,
      attrs: { ...VXLAN_ATTRS, ...DUAL_ATTRS, ...attrs },
      expiresAt: 1_700_000_000_000,
      version: '7',
    };
  }
  const GOOD = '10.244.4.0-24&fd00:10:244:4::-64';

  it('accepts a valid dual-stack vxlan peer and a valid dual-stack host-gw peer', () => {
    expect(checkPeer(dual(GOOD), CTX)).toBeUndefined();
    const hostGw = dual(GOOD, { backendType: 'host-gw', backendData: null, backendData6: null });
    expect(checkPeer(hostGw, { ...CTX, config: DUAL_HOST_GW })).toBeUndefined();
  });

  it('accepts an IPv4-only peer in a dual-stack network (a node without an IPv6 podCIDR)', () => {
    expect(checkPeer(lease('10.244.4.0-24'), CTX)).toBeUndefined();
  });

  it.each([
    [
      'an IPv6 subnet of the wrong length',
      '10.244.4.0-24&fd00:10:244:4::-65',
      {},
      'subnet-size',
      ['fd00:10:244:4::/65', '/64', 'IPv6SubnetLen'],
    ],
    [
      'an IPv6 subnet outside IPv6Network',
      '10.244.4.0-24&fd00:10:245:4::-64',
      {},
      'outside-network',
      ['fd00:10:245:4::/64', 'fd00:10:244::/56'],
    ],
    [
      'the first IPv6 subnet (below IPv6SubnetMin)',
      '10.244.4.0-24&fd00:10:244::-64',
      {},
      'outside-range',
      ['fd00:10:244::/64', 'IPv6SubnetMin'],
    ],
    [
      'our own IPv6 subnet',
      '10.244.4.0-24&fd00:10:244:3::-64',
      {},
      'overlaps-own',
      ['fd00:10:244:3::/64', 'our own IPv6 subnet'],
    ],
    [
      'no PublicIPv6',
      GOOD,
      { publicIpv6: null },
      'public-ip',
      ['fd00:10:244:4::/64', 'without a PublicIPv6'],
    ],
    [
      'a link-local PublicIPv6',
      GOOD,
      { publicIpv6: 'fe80::12' },
      'public-ip',
      ['PublicIPv6 fe80::12', 'unicast'],
    ],
    [
      'a multicast PublicIPv6',
      GOOD,
      { publicIpv6: 'ff02::1' },
      'public-ip',
      ['PublicIPv6 ff02::1', 'unicast'],
    ],
    ['the loopback PublicIPv6', GOOD, { publicIpv6: '::1' }, 'public-ip', ['PublicIPv6 ::1']],
    [
      'our own PublicIPv6',
      GOOD,
      { publicIpv6: 'fd00:56::11' },
      'public-ip',
      ['PublicIPv6 fd00:56::11', "this node's own"],
    ],
    [
      'a PublicIPv6 inside the pod IPv6Network',
      GOOD,
      { publicIpv6: 'fd00:10:244:9::1' },
      'public-ip',
      ['PublicIPv6 fd00:10:244:9::1', 'fd00:10:244::/56'],
    ],
    [
      'a vxlan peer without BackendV6Data',
      GOOD,
      { backendData6: null },
      'vtep-mac',
      ['BackendV6Data.VtepMAC'],
    ],
    [
      'a vxlan peer with our IPv6 VtepMAC',
      GOOD,
      { backendData6: { vni: 1, vtepMac: '9A:41:E0:11:6B:01' } },
      'vtep-mac',
      ["this node's own"],
    ],
    [
      'a vxlan peer with another VNI for IPv6',
      GOOD,
      { backendData6: { vni: 2, vtepMac: '9a:41:e0:11:6b:02' } },
      'vni',
      ['BackendV6Data.VNI 2', '(1)'],
    ],
  ])('refuses the whole record for %s', (_name, key, attrs, reason, parts) => {
    const r = checkPeer(dual(key, attrs), CTX);
    expect(r?.reason).toBe(reason);
    for (const part of parts) expect(r?.detail).toContain(part);
  });

  it('the IPv4 checks still come first', () => {
    expect(checkPeer(dual('10.245.4.0-24&fd00:10:244:4::-64'), CTX)?.reason).toBe(
      'outside-network',
    );
  });

  it('a wrong IPv6 size or range is accepted with anySubnetSize (Kubernetes podCIDRs)', () => {
    const kube = { ...CTX, anySubnetSize: true };
    expect(checkPeer(dual('10.244.4.0-24&fd00:10:244:4::-80'), kube)).toBeUndefined();
    expect(checkPeer(dual('10.244.4.0-24&fd00:10:244::-64'), kube)).toBeUndefined();
    expect(checkPeer(dual('10.244.4.0-24&fd00:10:245::-64'), kube)?.reason).toBe('outside-network');
  });

  it('a vxlan peer without BackendV6Data is accepted with DirectRouting when its PublicIPv6 is on-link', () => {
    const direct = parseNetConfig(
      '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan","VNI":1,"DirectRouting":true}}',
    );
    const underlay = {
      name: 'eth0',
      networks: ['192.168.56.11/24'],
      networks6: ['fd00:56::11/64'],
    };
    const peer = dual(GOOD, { backendData6: null });
    expect(checkPeer(peer, { ...CTX, config: direct, underlay })).toBeUndefined();
    const far = dual(GOOD, { backendData6: null, publicIpv6: 'fd00:57::12' });
    expect(checkPeer(far, { ...CTX, config: direct, underlay })?.reason).toBe('vtep-mac');
  });

  it('host-gw: a PublicIPv6 must be on-link on the underlay when its IPv6 networks are known', () => {
    const ctx: PeerContext = {
      ...CTX,
      config: DUAL_HOST_GW,
      underlay: { name: 'eth0', networks: ['192.168.56.11/24'], networks6: ['fd00:56::11/64'] },
    };
    const hostGw = (ip6: string): Lease =>
      dual(GOOD, {
        backendType: 'host-gw',
        backendData: null,
        backendData6: null,
        publicIpv6: ip6,
      });
    expect(checkPeer(hostGw('fd00:56::12'), ctx)).toBeUndefined();
    const r = checkPeer(hostGw('fd00:57::12'), ctx);
    expect(r?.reason).toBe('not-on-link');
    expect(r?.detail).toContain('PublicIPv6 fd00:57::12');
    expect(r?.detail).toContain('fd00:56::11/64');
    // an underlay without IPv6 networks listed: no on-link check for IPv6
    const unknown = { ...ctx, underlay: { name: 'eth0', networks: ['192.168.56.11/24'] } };
    expect(checkPeer(hostGw('fd00:57::12'), unknown)).toBeUndefined();
  });

  it('our config without IPv6: the IPv6 half is ignored (forOurFamilies), the IPv4 half admitted', () => {
    const ctx: PeerContext = { config: VXLAN_CFG, self: SELF };
    // even a hostile IPv6 half does not matter: it is not used
    const peer = dual('10.244.4.0-24&fd00:10:244:3::-64', { backendData6: null });
    const only4 = forOurFamilies(peer, VXLAN_CFG);
    expect(only4.subnet6).toBeUndefined();
    expect(only4.subnet).toStrictEqual(peer.subnet);
    expect(forOurFamilies(peer, DUAL_VXLAN)).toBe(peer);
    expect(checkPeer(only4, ctx)).toBeUndefined();
    const a = admitPeers([peer], ctx);
    expect(a.admitted.map((l) => [l.key, l.subnet6])).toEqual([[peer.key, undefined]]);
    expect(a.refused).toEqual([]);
  });

  it('a peer with an IPv6 subnet but no PublicIPv6 (not dual-stack yet) is admitted for IPv4 alone', () => {
    const peer = dual(GOOD, { publicIpv6: null, backendData6: null });
    const a = admitPeers([peer], CTX);
    expect(a.admitted.map((l) => [l.key, l.subnet && formatCidr(l.subnet), l.subnet6])).toEqual([
      [GOOD, '10.244.4.0/24', undefined],
    ]);
    expect(a.refused).toEqual([]);
    // and it claims no IPv6 subnet: another peer's claim to the same one is not a conflict
    const other = dual('10.244.5.0-24&fd00:10:244:4::-64', {
      publicIpv6: 'fd00:56::15',
      backendData: { vni: 1, vtepMac: '7e:00:00:00:00:05' },
      backendData6: { vni: 1, vtepMac: '9a:00:00:00:00:05' },
    });
    expect(admitPeers([peer, other], CTX).refused).toEqual([]);
  });

  it('unreadable IPv6 fields (v6Problem): refused as malformed with IPv6 on, ignored with IPv6 off', () => {
    const problem = `PublicIPv6 "${'z'.repeat(500)}" is not an IPv6 address`;
    const peer = dual(GOOD, { publicIpv6: null, backendData6: null, v6Problem: problem });
    const a = admitPeers([peer], CTX);
    expect(a.admitted).toEqual([]);
    expect(a.refused.map((r) => [r.lease.key, r.refusal.reason])).toEqual([[GOOD, 'malformed']]);
    expect(a.refused[0]?.refusal.detail).toContain('PublicIPv6 "zzz');
    expect(a.refused[0]?.refusal.detail.length).toBeLessThan(230);
    const off = admitPeers([peer], { config: VXLAN_CFG, self: SELF });
    expect(off.admitted.map((l) => [l.key, l.subnet6])).toEqual([[GOOD, undefined]]);
    expect(off.refused).toEqual([]);
    // an IPv4-only peer's unused IPv6 fields do not refuse it either
    const v4 = { ...lease('10.244.4.0-24'), attrs: { ...VXLAN_ATTRS, v6Problem: problem } };
    expect(checkPeer(v4, CTX)).toBeUndefined();
  });

  describe('conflicts', () => {
    const at = (l: Lease, claimedAt: number): Lease => ({ ...l, claimedAt });
    const mac6 = (n: number): Partial<LeaseAttrs> => ({
      backendData: { vni: 1, vtepMac: `7e:00:00:00:00:${n.toString(16).padStart(2, '0')}` },
      backendData6: { vni: 1, vtepMac: `9a:00:00:00:00:${n.toString(16).padStart(2, '0')}` },
      publicIpv6: `fd00:56::${n}`,
    });

    it('of peers claiming one IPv6 subnet, the first claim keeps it, whatever the order', () => {
      const owner = at(dual('10.244.4.0-24&fd00:10:244:4::-64', mac6(1)), 100);
      const thief = at(dual('10.244.5.0-24&fd00:10:244:4::-64', mac6(2)), 200);
      const other = at(dual('10.244.6.0-24&fd00:10:244:6::-64', mac6(3)), 150);
      for (const order of [
        [owner, thief, other],
        [thief, other, owner],
      ]) {
        const a = admitPeers(order, CTX);
        expect(a.admitted.map((l) => l.key).sort()).toEqual([owner.key, other.key].sort());
        expect(a.refused.map((r) => [r.lease.key, r.refusal.reason, r.refusal.detail])).toEqual([
          [
            thief.key,
            'subnet-conflict',
            `IPv6 subnet fd00:10:244:4::/64 was claimed first by peer ${owner.key}`,
          ],
        ]);
      }
    });

    it('without a clear first claim, both claimants of one IPv6 subnet are refused', () => {
      const a = admitPeers(
        [
          dual('10.244.4.0-24&fd00:10:244:4::-64', mac6(1)),
          dual('10.244.5.0-24&fd00:10:244:4::-64', mac6(2)),
        ],
        CTX,
      );
      expect(a.admitted).toEqual([]);
      expect(a.refused.map((r) => r.refusal.reason)).toEqual([
        'subnet-conflict',
        'subnet-conflict',
      ]);
    });

    it('a wider IPv6 subnet covering other peers is refused (Kubernetes sizes)', () => {
      const kube = { ...CTX, anySubnetSize: true };
      const n1 = dual('10.244.4.0-24&fd00:10:244:4::-64', mac6(1));
      const n2 = dual('10.244.5.0-24&fd00:10:244:5::-64', mac6(2));
      const wide = dual('10.244.6.0-24&fd00:10:244:4::-63', mac6(3));
      const a = admitPeers([wide, n1, n2], kube);
      expect(a.admitted.map((l) => l.key).sort()).toEqual([n1.key, n2.key].sort());
      expect(a.refused.map((r) => [r.lease.key, r.refusal.detail])).toEqual([
        [wide.key, `IPv6 subnet fd00:10:244:4::/63 covers peer ${n1.key}'s fd00:10:244:4::/64`],
      ]);
    });

    it('of peers claiming one IPv6 VtepMAC, the first claim keeps it', () => {
      const owner = at(dual('10.244.4.0-24&fd00:10:244:4::-64', mac6(1)), 100);
      const mimic = at(
        dual('10.244.5.0-24&fd00:10:244:5::-64', {
          ...mac6(2),
          backendData6: { vni: 1, vtepMac: '9a:00:00:00:00:01' },
        }),
        200,
      );
      const a = admitPeers([mimic, owner], CTX);
      expect(a.admitted.map((l) => l.key)).toEqual([owner.key]);
      expect(a.refused.map((r) => [r.lease.key, r.refusal.reason, r.refusal.detail])).toEqual([
        [
          mimic.key,
          'vtep-mac',
          `IPv6 VtepMAC 9a:00:00:00:00:01 was claimed first by peer ${owner.key}`,
        ],
      ]);
    });

    it('an IPv4-only peer and a dual-stack one do not conflict over IPv6', () => {
      const a = admitPeers(
        [lease('10.244.4.0-24'), dual('10.244.5.0-24&fd00:10:244:4::-64', mac6(2))],
        CTX,
      );
      expect(a.refused).toEqual([]);
      expect(a.admitted).toHaveLength(2);
    });
  });
});
