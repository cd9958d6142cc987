// The join index (src/lease/join-index.ts) against its definition: a lease joins a set with no
// conflicts without one of its own exactly when the whole set-level stage (withoutConflicts) over
// the set with it refuses no one. Subnets of several sizes, both families and VtepMACs are drawn
// from small pools so that conflicts are common, and members leave and join between the checks
// as they do in the tracker. A subnet whose base is not a block's never reaches admission (keys
// and podCIDRs are parsed strictly); the index still compares it as a range, checked on its own.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { withoutConflicts } from '../../src/lease/admit.ts';
import { JoinIndex } from '../../src/lease/join-index.ts';
import type { Lease } from '../../src/lease/types.ts';
import { random } from '../helpers/random.ts';

const CONFIGS = {
  vxlan: parseNetConfig('{"Network":"10.0.0.0/8","Backend":{"Type":"vxlan"}}'),
  'host-gw': parseNetConfig('{"Network":"10.0.0.0/8","Backend":{"Type":"host-gw"}}'),
  'dual-stack vxlan': parseNetConfig(
    '{"Network":"10.0.0.0/8","EnableIPv6":true,"IPv6Network":"fd00::/48","Backend":{"Type":"vxlan"}}',
  ),
  'IPv6-only vxlan': parseNetConfig(
    '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/48","Backend":{"Type":"vxlan"}}',
  ),
};

/** A lease with a subnet of 10.0.0.0/16 and one of fd00::/112 drawn from small pools. */
function drawn(next: () => number, key: string): Lease {
  const pick = (n: number): number => Math.floor(next() * n);
  const prefix = [22, 24, 24, 24, 26][pick(5)] ?? 24;
  const size = 2 ** (32 - prefix);
  const base = (10 << 24) + Math.floor((pick(16) * 256) / size) * size;
  const prefix6 = [104, 112, 112, 120][pick(4)] ?? 112;
  const size6 = 1n << BigInt(128 - prefix6);
  const base6 = (0xfd00n << 112n) + ((BigInt(pick(16)) * 0x10000n) / size6) * size6;
  const mac = `02:00:00:00:00:${pick(24).toString(16).padStart(2, '0')}`;
  const mac6 = `02:00:00:06:00:${pick(24).toString(16).padStart(2, '0')}`;
  return {
    key,
    subnet: next() < 0.9 ? { base, prefix } : null,
    ...(next() < 0.8 ? { subnet6: { base: base6, prefix: prefix6 } } : {}),
    attrs: {
      publicIp: '192.168.0.9',
      publicIpv6: 'fd01::9',
      backendType: 'vxlan',
      // now and then in capitals: the stage compares VtepMACs in lower case
      backendData: { vni: 1, vtepMac: next() < 0.2 ? mac.toUpperCase() : mac },
      backendData6: { vni: 1, vtepMac: mac6 },
    },
    expiresAt: 0,
    version: '1',
  };
}

describe('JoinIndex', () => {
  for (const [name, config] of Object.entries(CONFIGS)) {
    it(`says a lease joins exactly when the whole stage would refuse no one, ${name}`, () => {
      const next = random(name.length * 7);
      let members: Lease[] = [];
      const index = new JoinIndex(config, members);
      let [joins, refusals] = [0, 0];
      for (let step = 0; step < 3000; step++) {
        if (members.length > 0 && next() < 0.3) {
          // a member leaves
          const gone = members[Math.floor(next() * members.length)] as Lease;
          members = members.filter((m) => m !== gone);
          index.remove(gone);
          continue;
        }
        const lease = drawn(next, `node-${step}`);
        const whole = withoutConflicts([...members, lease], config);
        const expected = whole.refused.length === 0;
        expect(index.joins(lease), `step ${step}`).toBe(expected);
        if (!expected) {
          refusals++;
          continue;
        }
        joins++;
        members.push(lease);
        index.add(lease);
      }
      // both answers came often
      expect(joins).toBeGreaterThan(100);
      expect(refusals).toBeGreaterThan(100);
    });
  }

  it("compares a subnet whose base is not a block's as the range it spans", () => {
    const config = CONFIGS.vxlan;
    const at = (key: string, base: number, prefix: number, mac: number): Lease => ({
      ...drawn(random(mac), key),
      subnet: { base, prefix },
      attrs: {
        publicIp: '192.168.0.9',
        publicIpv6: null,
        backendType: 'vxlan',
        backendData: { vni: 1, vtepMac: `02:00:00:00:01:${mac.toString(16).padStart(2, '0')}` },
      },
    });
    const ten = 10 << 24;
    // 10.0.0.128/24 spans 10.0.0.128-10.0.1.127: it meets 10.0.1.0/24, not 10.0.2.0/24
    const index = new JoinIndex(config, [at('a', ten + 256, 24, 1)]);
    expect(index.joins(at('b', ten + 128, 24, 2))).toBe(false);
    expect(index.joins(at('c', ten + 512, 24, 3))).toBe(true);
    // held as a range: 10.0.4.64/24 meets 10.0.5.0/26, not 10.0.5.64/26
    index.add(at('d', ten + 4 * 256 + 64, 24, 4));
    expect(index.joins(at('e', ten + 5 * 256, 26, 5))).toBe(false);
    expect(index.joins(at('f', ten + 5 * 256 + 64, 26, 6))).toBe(true);
    index.remove(at('d', ten + 4 * 256 + 64, 24, 4));
    expect(index.joins(at('e', ten + 5 * 256, 26, 5))).toBe(true);
    // checked as a range: 10.0.6.192/24 meets 10.0.6.128/25, which starts before it
    index.add(at('g', ten + 6 * 256 + 128, 25, 7));
    expect(index.joins(at('h', ten + 6 * 256 + 192, 24, 8))).toBe(false);
  });

  it('starts from a set given whole', () => {
    const config = CONFIGS.vxlan;
    const a = drawn(random(1), 'a');
    const clash = { ...a, key: 'b' };
    expect(new JoinIndex(config, [a]).joins(clash)).toBe(false);
    expect(new JoinIndex(config, []).joins(clash)).toBe(true);
  });
});
