// The hostile-lease drill's keys: /24s of the lab Network that no node holds, whatever the shape of
// the nodes' keys (a dual-stack lease's key also names its IPv6 subnet, so keys are no guide).
import { describe, expect, it } from 'vitest';
import { hostileKeys } from '../../lab/drills-store.ts';

describe('hostileKeys', () => {
  it('takes the highest free /24s', () => {
    expect(hostileKeys(['10.244.3.0/24'])).toEqual({
      loopback: '10.244.254.0-24',
      inNetwork: '10.244.253.0-24',
      nodeIp: '10.244.252.0-24',
      junk: '10.244.251.0-24',
    });
  });

  it('skips a subnet a node holds, IPv6-only leases (no IPv4 subnet) aside', () => {
    // a dual-stack node holding 10.244.251.0/24 (its key 10.244.251.0-24&fd00:…-64): the junk
    // lease must not name its subnet, or its peers rightly route what the drill expects refused
    expect(hostileKeys(['10.244.251.0/24', '10.244.253.0/24', null])).toEqual({
      loopback: '10.244.254.0-24',
      inNetwork: '10.244.252.0-24',
      nodeIp: '10.244.250.0-24',
      junk: '10.244.249.0-24',
    });
  });
});
