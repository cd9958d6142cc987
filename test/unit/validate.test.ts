// Unit tests of the semantic checks on peer leases (DESIGN.md rule 6): a bad
// peer gets a reason that names the bad value, a good one gets undefined.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { parseSubnetKey } from '../../src/lease/codec.ts';
import type { Lease, LeaseAttrs } from '../../src/lease/types.ts';
import { peerProblem } from '../../src/lease/validate.ts';
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

describe('peerProblem', () => {
  it('accepts a valid vxlan peer', () => {
    expect(peerProblem(lease('10.244.4.0-24'), { config: VXLAN_CFG, self: SELF })).toBeUndefined();
  });

  it('accepts a valid host-gw peer', () => {
    const peer = lease('10.244.4.0-24', { backendType: 'host-gw', backendData: null });
    expect(peerProblem(peer, { config: HOST_GW_CFG, self: SELF })).toBeUndefined();
  });

  it('accepts a peer while we hold no subnet yet', () => {
    expect(peerProblem(lease('10.244.3.0-24'), { config: VXLAN_CFG, self: undefined })).toBeUndefined();
  });

  it('accepts peers at the very start and end of the network', () => {
    expect(peerProblem(lease('10.244.0.0-24'), { config: VXLAN_CFG, self: SELF })).toBeUndefined();
    expect(peerProblem(lease('10.244.255.0-24'), { config: VXLAN_CFG, self: SELF })).toBeUndefined();
  });

  it.each([
    ['a subnet of the wrong length', lease('10.244.4.0-25'), ['10.244.4.0/25', '/24']],
    ['a wider subnet', lease('10.244.0.0-16'), ['10.244.0.0/16', '/24']],
    ['a subnet outside Network', lease('10.245.4.0-24'), ['10.245.4.0/24', '10.244.0.0/16']],
    ['a subnet just below Network', lease('10.243.255.0-24'), ['10.243.255.0/24', 'outside']],
    ['the whole address space', lease('0.0.0.0-0'), ['0.0.0.0/0']],
    ['our own subnet', lease('10.244.3.0-24'), ['10.244.3.0/24', 'overlaps', 'our own']],
    ['PublicIP loopback', lease('10.244.4.0-24', { publicIp: '127.0.0.1' }), ['PublicIP', '127.0.0.1']],
    ['PublicIP unspecified', lease('10.244.4.0-24', { publicIp: '0.0.0.0' }), ['PublicIP', '0.0.0.0']],
    ['PublicIP multicast', lease('10.244.4.0-24', { publicIp: '224.0.0.1' }), ['PublicIP', '224.0.0.1']],
    ['PublicIP broadcast', lease('10.244.4.0-24', { publicIp: '255.255.255.255' }), ['PublicIP', '255.255.255.255']],
    ['PublicIP not an address', lease('10.244.4.0-24', { publicIp: '10.0.0' }), ['PublicIP', '10.0.0']],
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
    ['a vxlan peer without BackendData', lease('10.244.4.0-24', { backendData: null }), ['BackendData.VNI', 'undefined']],
  ])('refuses %s', (_name, peer, parts) => {
    const reason = peerProblem(peer, { config: VXLAN_CFG, self: SELF });
    expect(reason).toBeTypeOf('string');
    for (const part of parts) expect(reason).toContain(part);
  });

  it('refuses a vxlan peer in a host-gw network', () => {
    const reason = peerProblem(lease('10.244.4.0-24'), { config: HOST_GW_CFG, self: SELF });
    expect(reason).toBe('BackendType vxlan differs from ours (host-gw)');
  });

  it('checks the VNI against a non-default VNI', () => {
    const cfg = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096}}');
    expect(peerProblem(lease('10.244.4.0-24'), { config: cfg, self: SELF })).toBe('BackendData.VNI 1 differs from ours (4096)');
    const same = lease('10.244.4.0-24', { backendData: { vni: 4096, vtepMac: '7e:1b:4f:9a:2c:02' } });
    expect(peerProblem(same, { config: cfg, self: SELF })).toBeUndefined();
  });

  it('reports the wrong length with the exact reason', () => {
    expect(peerProblem(lease('10.244.4.0-25'), { config: VXLAN_CFG, self: SELF })).toBe('subnet 10.244.4.0/25 is not a /24 (SubnetLen)');
  });
});
