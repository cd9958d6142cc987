// Unit tests of peer admission (docs/design.md, rule 6): one lease at a time
// (`checkPeer`: a bad peer gets a reason code and a detail that names the bad
// value, a good one gets undefined), and the set as a whole (`admitPeers`:
// conflicting subnets and VtepMACs, whatever the order leases come in).
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { parseSubnetKey } from '../../src/lease/codec.ts';
import type { Lease, LeaseAttrs } from '../../src/lease/types.ts';
import {
  admitPeers,
  checkPeer,
  REFUSAL_REASONS,
  truncated,
  type PeerContext,
} from '../../src/lease/admit.ts';
import { parseCidr, type Cidr } from '../../src/net/ipv4.ts';

const VXLAN_CFG = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":1}}');
const HOST_GW_CFG = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}');
const SELF = cidr('10.244.3.0/24');

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text} is not a network CIDR`);
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
