// The dataplane's pure core in dual-stack: IPv6 entries per backend (host-gw
// routes via PublicIPv6; vxlan's twill-v6.<VNI> device, neighbours, FDB
// entries and onlink routes; DirectRouting), the golden batches of a cold
// start for both families, IPv4-only plans unchanged byte for byte when IPv6
// is off (even with peers that carry IPv6 subnets), what dual-stack left
// (twill-v6, IPv6 routes, ip6tables chains) removed when IPv6 is off,
// ip6tables chains, an IPv6 route moved to another device by delete and add,
// a bridge's stale IPv6 CNI gateway, and the readers of kernel output and
// monitor lines for IPv6.
import { describe, expect, it } from 'vitest';
import { desiredState } from '../../src/dataplane/desired.ts';
import { assumedFrom, assumedWithout, diff } from '../../src/dataplane/diff.ts';
import { indexDesired, judge } from '../../src/dataplane/judge.ts';
import { chainSpecs, chainSpecs6, diffChain, masqRules6 } from '../../src/dataplane/masq.ts';
import type { DesiredState, ObservedState } from '../../src/dataplane/model.ts';
import {
  ipEventMatters,
  ipNeedles,
  ipTouch,
  nftEventMatters,
  nftTouch,
} from '../../src/dataplane/monitor.ts';
import { observe, parseFdb, parseLinks, parseNeighs } from '../../src/dataplane/observe.ts';
import { opLines, renderBatches } from '../../src/dataplane/render.ts';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelPart, masqOf, peerLease, SELF_MAC6 } from '../helpers/dataplane.ts';

const EMPTY: ObservedState = {
  links: [],
  routes: [],
  neighs: [],
  fdb: [],
  postrouting: { jumps: [], rules: null },
  forward: { jumps: [], rules: null },
  postrouting6: { jumps: [], rules: null },
  forward6: { jumps: [], rules: null },
};

/** The observed state a kernel holding exactly `want` would report (both families). */
function matching(want: DesiredState): ObservedState {
  const chains = chainSpecs(masqOf(want));
  const chains6 = want.masq6 ? chainSpecs6(want.masq6) : undefined;
  const chain = (c: { jump: string; rules: readonly string[] | null }) => ({
    jumps: c.rules ? [c.jump] : [],
    rules: c.rules,
  });
  return {
    ...assumedFrom(want),
    postrouting: chain(chains.postrouting),
    forward: chain(chains.forward),
    ...(chains6
      ? { postrouting6: chain(chains6.postrouting), forward6: chain(chains6.forward) }
      : {}),
  };
}

const PEERS6 = [
  peerLease(1, { vxlan: true, ipv6: true }),
  peerLease(4, { vxlan: true, ipv6: true }),
];
const vxlan6 = desiredState(backendInput({ backend: 'vxlan', ipv6: true, peers: PEERS6 }));

describe('dual-stack backends', () => {
  it('vxlan: twill-v6.<VNI> over the IPv6 underlay, and per IPv6 peer a neighbour, an FDB entry and an onlink route', () => {
    expect(vxlan6.vxlan6).toEqual({
      name: 'twill-v6.1',
      vni: 1,
      local: 'fd7b::2',
      underlay: 'eth0',
      port: 8472,
      learning: false,
      gbp: false,
      mtu: 1430,
      mac: SELF_MAC6,
      address: 'fd00:0:0:3::/128',
    });
    // the IPv4 device is as it always was
    expect(vxlan6.vxlan).toMatchObject({ name: 'twill.1', local: '10.123.0.2', mtu: 1450 });
    expect(vxlan6.neighs.filter((n) => n.dev === 'twill-v6.1')).toEqual([
      { dev: 'twill-v6.1', ip: 'fd00:0:0:1::', mac: '02:00:00:06:00:01' },
      { dev: 'twill-v6.1', ip: 'fd00:0:0:4::', mac: '02:00:00:06:00:04' },
    ]);
    expect(vxlan6.fdb.filter((f) => f.dev === 'twill-v6.1')).toEqual([
      { dev: 'twill-v6.1', mac: '02:00:00:06:00:01', dst: 'fd7b::1' },
      { dev: 'twill-v6.1', mac: '02:00:00:06:00:04', dst: 'fd7b::4' },
    ]);
    expect(vxlan6.routes).toEqual([
      { dst: '10.244.1.0/24', via: '10.244.1.0', dev: 'twill.1', onlink: true, metric: 717825 },
      { dst: '10.244.4.0/24', via: '10.244.4.0', dev: 'twill.1', onlink: true, metric: 717828 },
      { dst: 'fd00:0:0:1::/64', via: 'fd00:0:0:1::', dev: 'twill-v6.1', onlink: true },
      { dst: 'fd00:0:0:4::/64', via: 'fd00:0:0:4::', dev: 'twill-v6.1', onlink: true },
    ]);
    expect(vxlan6.masq6).toMatchObject({ ipMasq: true, randomFully: true });
  });

  it('vxlan: Backend MTU less 70 for the IPv6 device; VNI, Port, GBP and Learning as the IPv4 one', () => {
    const d = desiredState(
      backendInput({
        backend: 'vxlan',
        ipv6: true,
        peers: [],
        extra: ',"MTU":9000,"VNI":7,"Port":4789,"GBP":true,"Learning":true',
      }),
    );
    expect(d.vxlan6).toMatchObject({
      name: 'twill-v6.7',
      vni: 7,
      port: 4789,
      gbp: true,
      learning: true,
      mtu: 8930,
    });
    expect(d.vxlan?.mtu).toBe(8950);
  });

  it('host-gw: a route per IPv6 peer via its PublicIPv6 on the underlay; IPv4-only peers get IPv4 routes only', () => {
    const d = desiredState(
      backendInput({
        backend: 'host-gw',
        ipv6: true,
        peers: [peerLease(1, { vxlan: false, ipv6: true }), peerLease(5, { vxlan: false })],
      }),
    );
    expect(d.vxlan6).toBeNull();
    expect(d.routes).toEqual([
      { dst: '10.244.1.0/24', via: '10.123.0.1', dev: 'eth0', onlink: false, metric: 717825 },
      { dst: '10.244.5.0/24', via: '10.123.0.5', dev: 'eth0', onlink: false, metric: 717829 },
      { dst: 'fd00:0:0:1::/64', via: 'fd7b::1', dev: 'eth0', onlink: false },
    ]);
    expect([d.neighs, d.fdb]).toEqual([[], []]);
    expect(diff(d, EMPTY).flatMap(opLines)).toContain(
      'route add fd00:0:0:1::/64 via fd7b::1 dev eth0 proto 151',
    );
  });

  it('vxlan DirectRouting: a peer whose PublicIPv6 is on-link gets a plain IPv6 route, the others go through twill-v6', () => {
    const far = peerLease(4, { vxlan: true, ipv6: true, ipBase6: 'fd7c::' });
    const d = desiredState(
      backendInput({
        backend: 'vxlan',
        ipv6: true,
        peers: [peerLease(1, { vxlan: true, ipv6: true }), far],
        extra: ',"DirectRouting":true',
      }),
    );
    expect(d.routes.filter((r) => r.dst.includes(':'))).toEqual([
      { dst: 'fd00:0:0:1::/64', via: 'fd7b::1', dev: 'eth0', onlink: false },
      { dst: 'fd00:0:0:4::/64', via: 'fd00:0:0:4::', dev: 'twill-v6.1', onlink: true },
    ]);
    expect(d.fdb.filter((f) => f.dev === 'twill-v6.1')).toEqual([
      { dev: 'twill-v6.1', mac: '02:00:00:06:00:04', dst: 'fd7c::4' },
    ]);
  });

  it('IPv6 off: the same peers (carrying IPv6 subnets) give the IPv4-only state and byte-identical batches', () => {
    for (const backend of ['vxlan', 'host-gw'] as const) {
      const vx = backend === 'vxlan';
      const v4peers = [peerLease(1, { vxlan: vx }), peerLease(4, { vxlan: vx })];
      const dsPeers = [
        peerLease(1, { vxlan: vx, ipv6: true }),
        peerLease(4, { vxlan: vx, ipv6: true }),
      ];
      const plain = desiredState(backendInput({ backend, peers: v4peers }));
      const withPeers6 = desiredState(backendInput({ backend, peers: dsPeers }));
      expect(kernelPart(withPeers6)).toEqual(kernelPart(plain));
      expect(plain).toMatchObject({ vxlan6: null, masq6: null });
      const render = (d: DesiredState) =>
        renderBatches(diff(d, EMPTY)).map((b) => ({ ...b, input: b.input }));
      expect(render(withPeers6)).toEqual(render(plain));
      expect(render(plain).map((b) => b.file)).not.toContain('ip6tables-restore');
      // IPv6 enabled in the config but no IPv6 underlay address chosen: no IPv6 either
      const input = backendInput({ backend, ipv6: true, peers: dsPeers });
      const noAddr = desiredState({ ...input, choice: { ...input.choice, ifaceIp6: null } });
      expect(noAddr).toMatchObject({ vxlan6: null, masq6: null });
      expect(render(noAddr)).toEqual(render(plain));
    }
  });
});

describe("peers' entries made when first read", () => {
  it("come from the memo of their own state's setup, whichever state is read first", () => {
    const peers = [
      peerLease(1, { vxlan: true, ipv6: true }),
      peerLease(4, { vxlan: true, ipv6: true }),
    ];
    const memo = { entries: new WeakMap() } as Parameters<typeof desiredState>[1] & object;
    // the same leases under an IPv4-only setup, then a dual-stack one (which replaces the memo)
    const v4 = desiredState(backendInput({ backend: 'vxlan', peers }), memo);
    const ds = desiredState(backendInput({ backend: 'vxlan', peers, ipv6: true }), memo);
    // read the later state first: the earlier one must not take its entries from the new memo
    expect(ds.peers?.map((p) => p.route6 !== undefined)).toEqual([true, true]);
    expect(v4.peers?.map((p) => p.route6)).toEqual([undefined, undefined]);
    // the dual-stack setup's memo holds the dual-stack entries: a next state reuses them
    const again = desiredState(backendInput({ backend: 'vxlan', peers, ipv6: true }), memo);
    expect(again.peers?.every((p, i) => p === ds.peers?.[i])).toBe(true);
  });
});

describe('dual-stack diff and render', () => {
  it('plans nothing when the kernel already matches', () => {
    expect(diff(vxlan6, matching(vxlan6))).toEqual([]);
  });

  it('plans an empty kernel (no key made per entry) as one holding a stale entry of each kind, but for their deletes', () => {
    // the devices are there, so the stale entries are in scope and take the general path
    const devices = assumedFrom(vxlan6).links;
    const stale: ObservedState = {
      ...EMPTY,
      links: devices,
      routes: [{ dst: '10.244.9.0/24', via: '10.244.9.0', dev: 'twill.1', onlink: true }],
      neighs: [{ dev: 'twill.1', ip: '10.244.9.0', mac: '02:00:00:00:00:09', permanent: true }],
      fdb: [{ dev: 'twill-v6.1', mac: '02:00:00:06:00:09', dst: 'fd7c::9', permanent: true }],
    };
    const deletes = (o: { action: string }) => o.action === 'delete';
    const general = diff(vxlan6, stale);
    expect(general.filter(deletes)).toHaveLength(3);
    const empty = diff(vxlan6, { ...EMPTY, links: devices });
    expect(empty.length).toBeGreaterThan(6);
    expect(empty).toEqual(general.filter((o) => !deletes(o)));
  });

  it('renders a cold start as ip, bridge, ip batches with both families, then iptables-restore and ip6tables-restore (golden)', () => {
    const batches = renderBatches(diff(vxlan6, EMPTY));
    expect(batches.map((b) => [b.file, ...b.args].join(' '))).toEqual([
      'ip -force -batch -',
      'bridge -force -batch -',
      'ip -force -batch -',
      'iptables-restore --noflush -w 5',
      'ip6tables-restore --noflush -w 5',
    ]);
    expect(batches[0]?.lines).toEqual([
      'link add twill.1 mtu 1450 address 02:00:00:00:00:03 type vxlan id 1 local 10.123.0.2 dev eth0 dstport 8472 nolearning',
      'addr add 10.244.3.0/32 dev twill.1',
      'link set twill.1 up',
      'link add twill-v6.1 mtu 1430 address 02:00:00:06:00:03 type vxlan id 1 local fd7b::2 dev eth0 dstport 8472 nolearning',
      'link set twill-v6.1 addrgenmode none',
      'addr add fd00:0:0:3::/128 dev twill-v6.1 nodad',
      'link set twill-v6.1 up',
    ]);
    expect(batches[1]?.lines).toEqual([
      'fdb append 02:00:00:00:00:01 dev twill.1 dst 10.123.0.1 self permanent',
      'fdb append 02:00:00:00:00:04 dev twill.1 dst 10.123.0.4 self permanent',
      'fdb append 02:00:00:06:00:01 dev twill-v6.1 dst fd7b::1 self permanent',
      'fdb append 02:00:00:06:00:04 dev twill-v6.1 dst fd7b::4 self permanent',
    ]);
    expect(batches[2]?.lines).toEqual([
      'neigh replace 10.244.1.0 lladdr 02:00:00:00:00:01 dev twill.1 nud permanent',
      'neigh replace 10.244.4.0 lladdr 02:00:00:00:00:04 dev twill.1 nud permanent',
      'neigh replace fd00:0:0:1:: lladdr 02:00:00:06:00:01 dev twill-v6.1 nud permanent',
      'neigh replace fd00:0:0:4:: lladdr 02:00:00:06:00:04 dev twill-v6.1 nud permanent',
      'route add 10.244.1.0/24 via 10.244.1.0 dev twill.1 onlink proto 151 metric 717825',
      'route add 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151 metric 717828',
      'route add fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 onlink proto 151',
      'route add fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 onlink proto 151',
    ]);
    // iptables-restore carries only the IPv4 chains
    expect(batches[3]?.input).not.toContain('fd00');
    expect(batches[4]?.input).toBe(
      [
        '*nat',
        ':TWILL-POSTRTG - [0:0]',
        '-A TWILL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "twill masq" -j RETURN',
        '-A TWILL-POSTRTG -s fd00:0:0:3::/64 -d fd00::/48 -m comment --comment "twill masq" -j RETURN',
        '-A TWILL-POSTRTG -s fd00::/48 -d fd00:0:0:3::/64 -m comment --comment "twill masq" -j RETURN',
        '-A TWILL-POSTRTG ! -s fd00::/48 -d fd00:0:0:3::/64 -m comment --comment "twill masq" -j RETURN',
        '-A TWILL-POSTRTG -s fd00::/48 ! -d ff00::/8 -m comment --comment "twill masq" -j MASQUERADE --random-fully',
        '-A TWILL-POSTRTG ! -s fd00::/48 -d fd00::/48 -m comment --comment "twill masq" -j MASQUERADE --random-fully',
        '-A POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG',
        'COMMIT',
        '*filter',
        ':TWILL-FWD - [0:0]',
        '-A TWILL-FWD -s fd00::/48 -m comment --comment "twill forward" -j ACCEPT',
        '-A TWILL-FWD -d fd00::/48 -m comment --comment "twill forward" -j ACCEPT',
        '-A FORWARD -m comment --comment "twill forward" -j TWILL-FWD',
        'COMMIT',
        '',
      ].join('\n'),
    );
  });

  it('removes a departed IPv6 peer in reverse order, leaving its IPv4 entries alone', () => {
    // peer 4 dropped its IPv6 subnet (its lease is IPv4-only now)
    const now = desiredState(
      backendInput({
        backend: 'vxlan',
        ipv6: true,
        peers: [PEERS6[0] as (typeof PEERS6)[number], peerLease(4, { vxlan: true })],
      }),
    );
    expect(renderBatches(diff(now, matching(vxlan6))).map((b) => b.input)).toEqual([
      'route del fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 onlink proto 151\n' +
        'neigh del fd00:0:0:4:: dev twill-v6.1\n',
      'fdb del 02:00:00:06:00:04 dev twill-v6.1 dst fd7b::4 self\n',
    ]);
  });

  it('replaces an incompatible IPv6 device and re-adds only its entries', () => {
    const seen = matching(vxlan6);
    const wrong = {
      ...seen,
      links: seen.links.map((l) => (l.name === 'twill-v6.1' ? { ...l, local: 'fd7b::99' } : l)),
    };
    const lines = diff(vxlan6, wrong).flatMap(opLines);
    expect(lines.slice(0, 2)).toEqual([
      'link del twill-v6.1',
      expect.stringContaining('link add twill-v6.1'),
    ]);
    expect(lines.filter((l) => l.startsWith('route add'))).toEqual([
      'route add fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 onlink proto 151',
      'route add fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 onlink proto 151',
    ]);
    expect(lines.filter((l) => l.includes('twill.1'))).toEqual([]);
  });

  it('switches an IPv6 route to another device by deleting it first and adding it after (host-gw → vxlan); IPv4 replaces in place', () => {
    // the kernel holds host-gw's routes via the peers' public addresses on the underlay
    const hostGw = desiredState(backendInput({ backend: 'host-gw', ipv6: true, peers: PEERS6 }));
    const seen: ObservedState = { ...matching(vxlan6), routes: hostGw.routes };
    const ops = diff(vxlan6, seen).filter((o) => o.kind === 'route');
    expect(ops.map((o) => [o.action, o.phase, ...opLines(o)])).toEqual([
      ['delete', 'ip-pre', 'route del fd00:0:0:1::/64 via fd7b::1 dev eth0 proto 151'],
      ['delete', 'ip-pre', 'route del fd00:0:0:4::/64 via fd7b::4 dev eth0 proto 151'],
      [
        'change',
        'ip-post',
        'route replace 10.244.1.0/24 via 10.244.1.0 dev twill.1 onlink proto 151 metric 717825',
      ],
      [
        'change',
        'ip-post',
        'route replace 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151 metric 717828',
      ],
      [
        'add',
        'ip-post',
        'route add fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 onlink proto 151',
      ],
      [
        'add',
        'ip-post',
        'route add fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 onlink proto 151',
      ],
    ]);
    // the delete runs in the first ip batch, the add in the last, after the device, FDB entry and
    // neighbour (here the device is created by the same plan: its link add comes first)
    const cold = { ...EMPTY, routes: hostGw.routes };
    const batches = renderBatches(diff(vxlan6, cold)).filter((b) => b.file === 'ip');
    const pre = batches[0]?.lines ?? [];
    const post = batches[1]?.lines ?? [];
    expect(pre.findIndex((l) => l.startsWith('link add twill-v6.1'))).toBeLessThan(
      pre.indexOf('route del fd00:0:0:1::/64 via fd7b::1 dev eth0 proto 151'),
    );
    expect(post).toContain(
      'route add fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 onlink proto 151',
    );
    expect([...pre, ...post].filter((l) => l.startsWith('route replace fd00'))).toEqual([]);
    // and back (vxlan → host-gw): the same, the other way round
    const back = diff(hostGw, matching(vxlan6)).filter((o) => o.kind === 'route');
    expect(back.filter((o) => o.route.dst.includes(':')).map((o) => o.action)).toEqual([
      'delete',
      'delete',
      'add',
      'add',
    ]);
    // only the onlink flag differs: replaced in place, which IPv6 accepts
    const flag = {
      ...matching(vxlan6),
      routes: vxlan6.routes.map((r) => (r.dst.includes(':') ? { ...r, onlink: false } : r)),
    };
    expect(diff(vxlan6, flag).map((o) => o.action)).toEqual(['change', 'change']);
  });

  it('deletes a stale IPv6 gateway on a bridge too, never its link-local, and the IPv4 one beside it', () => {
    const seen: ObservedState = {
      ...matching(vxlan6),
      bridgeAddrs: [
        { dev: 'cni0', address: '10.244.216.1/24' },
        { dev: 'cni0', address: '10.244.3.1/24' },
        { dev: 'cni0', address: 'fd00:0:0:9::1/64' },
        { dev: 'cni0', address: 'fd00:0:0:3::1/64' },
        { dev: 'cni0', address: 'fe80::1/64' },
        // outside fd00::/48
        { dev: 'cni0', address: 'fd01::1/64' },
      ],
    };
    expect(renderBatches(diff(vxlan6, seen)).map((b) => b.input)).toEqual([
      'addr del 10.244.216.1/24 dev cni0\naddr del fd00:0:0:9::1/64 dev cni0\n',
    ]);
    // without an IPv6 subnet of ours (IPv6 on, but our lease has none yet), IPv6 addresses stay
    const { subnet6: _mine, ...self } = backendInput({
      backend: 'vxlan',
      ipv6: true,
      peers: PEERS6,
    }).self;
    const noSubnet6 = desiredState({
      ...backendInput({ backend: 'vxlan', ipv6: true, peers: PEERS6 }),
      self,
    });
    expect(noSubnet6.podRanges.map((r) => r.family)).toEqual([4]);
    expect(
      diff(noSubnet6, seen)
        .filter((o) => o.kind === 'addr')
        .flatMap(opLines),
    ).toEqual(['addr del 10.244.216.1/24 dev cni0']);
  });

  it('IPv6 off: the first pass removes what dual-stack left (twill-v6, IPv6 routes, ip6tables chains and jumps); a pass that did not read them touches only the device', () => {
    const v4 = desiredState(
      backendInput({ backend: 'vxlan', peers: PEERS6.map((p) => ({ ...p, subnet6: null })) }),
    );
    const seen = matching(vxlan6);
    // the first pass after a start without IPv6 reads the IPv6 routes and chains too
    // (observe with leftovers6): all of it goes, the IPv4 side stays
    expect(renderBatches(diff(v4, seen)).map((b) => [b.file, b.input])).toEqual([
      [
        'ip',
        'route del fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 onlink proto 151\n' +
          'route del fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 onlink proto 151\n',
      ],
      ['ip', 'link del twill-v6.1\n'],
      [
        'ip6tables-restore',
        [
          '*nat',
          '-D POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG',
          ':TWILL-POSTRTG - [0:0]',
          '-X TWILL-POSTRTG',
          'COMMIT',
          '*filter',
          '-D FORWARD -m comment --comment "twill forward" -j TWILL-FWD',
          ':TWILL-FWD - [0:0]',
          '-X TWILL-FWD',
          'COMMIT',
          '',
        ].join('\n'),
      ],
    ]);
    // host-gw: the IPv6 routes via PublicIPv6 (no device to take them) go the same way
    const hostGw6 = desiredState(backendInput({ backend: 'host-gw', ipv6: true, peers: PEERS6 }));
    const hostGw4 = desiredState(
      backendInput({ backend: 'host-gw', peers: PEERS6.map((p) => ({ ...p, subnet6: null })) }),
    );
    expect(
      diff(hostGw4, matching(hostGw6))
        .filter((o) => o.kind === 'route')
        .flatMap(opLines),
    ).toEqual([
      'route del fd00:0:0:1::/64 via fd7b::1 dev eth0 proto 151',
      'route del fd00:0:0:4::/64 via fd7b::4 dev eth0 proto 151',
    ]);
    // later IPv4-only passes read no IPv6 route or chain: only the device is theirs to see
    const v4seen: ObservedState = {
      ...seen,
      routes: seen.routes.filter((r) => !r.dst.includes(':')),
      postrouting6: undefined,
      forward6: undefined,
    };
    expect(diff(v4, v4seen)).toEqual([
      { kind: 'link', action: 'delete', phase: 'ip-post', name: 'twill-v6.1' },
    ]);
    expect(renderBatches(diff(v4, v4seen)).map((b) => b.input)).toEqual(['link del twill-v6.1\n']);
  });

  it('fixes the IPv6 device in place: MTU, MAC, its /128 (a link-local is not its business), up', () => {
    const seen = matching(vxlan6);
    const drifted: ObservedState = {
      ...seen,
      links: seen.links.map((l) =>
        l.name === 'twill-v6.1'
          ? {
              ...l,
              mtu: 1450,
              mac: '02:00:00:06:00:99',
              up: false,
              addresses: ['fd00:0:0:9::/128'],
            }
          : l,
      ),
    };
    expect(diff(vxlan6, drifted).flatMap(opLines)).toEqual([
      'link set twill-v6.1 address 02:00:00:06:00:03',
      'link set twill-v6.1 mtu 1430',
      'addr del fd00:0:0:9::/128 dev twill-v6.1',
      'addr add fd00:0:0:3::/128 dev twill-v6.1 nodad',
      'link set twill-v6.1 up',
    ]);
  });

  it('rewrites a drifted ip6tables chain through ip6tables-restore only, with the same ordering guarantees', () => {
    const spec = chainSpecs6(vxlan6.masq6 ?? fail()).postrouting;
    const rules = masqRules6(vxlan6.masq6 ?? fail());
    const swapped = [rules[1], rules[0], ...rules.slice(2)] as string[];
    const ops = diffChain(spec, { jumps: [spec.jump, spec.jump], rules: swapped });
    expect(ops).toMatchObject([
      { kind: 'chain', action: 'change', ipv6: true, reordered: true, rules },
      { kind: 'jump', action: 'delete', ipv6: true, parent: 'POSTROUTING' },
    ]);
    const seen = { ...matching(vxlan6), postrouting6: { jumps: [], rules: swapped } };
    const batches = renderBatches(diff(vxlan6, seen));
    expect(batches.map((b) => b.file)).toEqual(['ip6tables-restore']);
    expect(batches[0]?.lines).toEqual([
      '*nat',
      ':TWILL-POSTRTG - [0:0]',
      ...rules,
      '-A POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG',
      'COMMIT',
    ]);
    // the IPv4 chain ops keep no family marker
    const v4ops = diffChain(chainSpecs(masqOf(vxlan6)).forward, { jumps: [], rules: null });
    expect(v4ops.every((o) => !('ipv6' in o))).toBe(true);
  });

  it('removes the IPv6 masquerade chain when --ip-masq is off, keeping the forward chain', () => {
    const off = desiredState(
      backendInput({ backend: 'vxlan', ipv6: true, peers: PEERS6, ipMasq: false }),
    );
    const lines = renderBatches(diff(off, matching(vxlan6))).flatMap((b) =>
      b.lines.map((l) => `${b.file}: ${l}`),
    );
    expect(lines).toContain('ip6tables-restore: -X TWILL-POSTRTG');
    expect(lines).toContain('iptables-restore: -X TWILL-POSTRTG');
    expect(lines.some((l) => l.includes('TWILL-FWD'))).toBe(false);
  });

  it('re-applies drifted IPv6 entries from the desired state: FDB and neighbour before the route', () => {
    const ops = diff(
      vxlan6,
      assumedWithout(vxlan6, {
        routes: new Set(['fd00:0:0:4::/64']),
        neighs: new Set(['fd00:0:0:4::']),
        fdbDsts: new Set(['fd7b::4']),
      }),
    );
    expect(renderBatches(ops).map((b) => b.input)).toEqual([
      'fdb append 02:00:00:06:00:04 dev twill-v6.1 dst fd7b::4 self permanent\n',
      'neigh replace fd00:0:0:4:: lladdr 02:00:00:06:00:04 dev twill-v6.1 nud permanent\n' +
        'route add fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 onlink proto 151\n',
    ]);
  });
});

function fail(): never {
  throw new Error('IPv6 is off in a dual-stack fixture');
}

describe('reading IPv6 kernel output', () => {
  it('keeps twill-v6 devices with their IPv6 source address and global IPv6 addresses', () => {
    const links = parseLinks([
      {
        ifname: 'twill-v6.1',
        mtu: 1430,
        address: '02:00:00:06:00:03',
        flags: ['UP'],
        linkinfo: {
          info_kind: 'vxlan',
          info_data: { id: 1, local6: 'fd7b:0::2', link: 'eth0', port: 8472, learning: false },
        },
        addr_info: [
          { family: 'inet6', local: 'fd00:0:0:3::', prefixlen: 128, scope: 'global' },
          { family: 'inet6', local: 'fe80::1', prefixlen: 64, scope: 'link' },
        ],
      },
      { ifname: 'flannel-v6.1', linkinfo: { info_kind: 'vxlan', info_data: { id: 1 } } },
    ]);
    expect(links).toEqual([
      {
        name: 'twill-v6.1',
        vni: 1,
        local: 'fd7b::2',
        underlay: 'eth0',
        port: 8472,
        learning: false,
        gbp: false,
        mtu: 1430,
        mac: '02:00:00:06:00:03',
        up: true,
        addresses: ['fd00:0:0:3::/128'],
      },
    ]);
    expect(
      parseNeighs(
        [{ dst: 'fd00:0:0:1::', lladdr: '02:00:00:06:00:01', state: ['PERMANENT'] }],
        'twill-v6.1',
      ),
    ).toEqual([
      { dev: 'twill-v6.1', ip: 'fd00:0:0:1::', mac: '02:00:00:06:00:01', permanent: true },
    ]);
    expect(
      parseFdb([{ mac: '02:00:00:06:00:01', dst: 'fd7b::1', state: 'permanent' }], 'twill-v6.1'),
    ).toEqual([{ dev: 'twill-v6.1', mac: '02:00:00:06:00:01', dst: 'fd7b::1', permanent: true }]);
  });

  it('observes IPv6 routes, the IPv6 device entries and the ip6tables chains only when asked', async () => {
    const calls: string[] = [];
    const runner: Runner = async (file, args) => {
      calls.push([file, ...args].join(' '));
      if (file === 'ip' && args.includes('addr'))
        return {
          stdout: JSON.stringify([
            { ifname: 'twill.1', linkinfo: { info_kind: 'vxlan', info_data: { id: 1 } } },
            {
              ifname: 'twill-v6.1',
              linkinfo: { info_kind: 'vxlan', info_data: { id: 1, local6: 'fd7b::2' } },
            },
          ]),
          stderr: '',
        };
      if (file === 'ip' && args[0] === '-6' && args.includes('route'))
        return {
          stdout: JSON.stringify([
            {
              dst: 'fd00:0:0:1::/64',
              gateway: 'fd00:0:0:1::',
              dev: 'twill-v6.1',
              protocol: '151',
              flags: ['onlink'],
            },
          ]),
          stderr: '',
        };
      if (file === 'ip6tables') return { stdout: '', stderr: '' };
      if (file === 'iptables') return { stdout: '', stderr: '' };
      return { stdout: '[]', stderr: '' };
    };
    const v4 = await observe(runner, 'twill.1', AbortSignal.timeout(1_000), { chains: true });
    expect(calls.filter((c) => c.startsWith('ip6tables') || c.startsWith('ip -6'))).toEqual([]);
    expect(calls.some((c) => c.includes('twill-v6.1'))).toBe(false);
    // a twill-v6 device is seen either way, so an IPv4-only pass removes it
    expect(v4.links.map((l) => l.name)).toEqual(['twill.1', 'twill-v6.1']);
    expect(v4).not.toHaveProperty('postrouting6');
    calls.length = 0;
    const ds = await observe(runner, 'twill.1', AbortSignal.timeout(1_000), {
      chains: true,
      ipv6: true,
      dev6: 'twill-v6.1',
    });
    expect(ds.routes).toEqual([
      { dst: 'fd00:0:0:1::/64', via: 'fd00:0:0:1::', dev: 'twill-v6.1', onlink: true },
    ]);
    expect(calls.sort()).toEqual(
      [
        'ip -d -json addr show',
        'ip -N -json route show table main',
        'ip -6 -N -json route show table main',
        'ip -json neigh show dev twill.1',
        'ip -json neigh show dev twill-v6.1',
        'bridge -json fdb show dev twill.1',
        'bridge -json fdb show dev twill-v6.1',
        ...['iptables', 'ip6tables'].flatMap((t) => [
          `${t} -w 5 -t nat -S POSTROUTING`,
          `${t} -w 5 -t nat -S TWILL-POSTRTG`,
          `${t} -w 5 -t filter -S FORWARD`,
          `${t} -w 5 -t filter -S TWILL-FWD`,
        ]),
      ].sort(),
    );
    expect(ds.postrouting6).toEqual({ jumps: [], rules: [] });
  });

  it('IPv6 off, leftovers6: reads the IPv6 routes and ip6tables chains (not the IPv6 device entries), and a read that fails is nothing there', async () => {
    const calls: string[] = [];
    let noIpv6 = false;
    const runner: Runner = async (file, args) => {
      calls.push([file, ...args].join(' '));
      if (file === 'ip' && args[0] === '-6') {
        if (noIpv6) throw new Error('ip -6: Address family not supported by protocol');
        return {
          stdout: JSON.stringify([
            { dst: 'fd00:0:0:1::/64', gateway: 'fd7b::1', dev: 'eth0', protocol: '151' },
          ]),
          stderr: '',
        };
      }
      if (file === 'ip6tables') {
        if (noIpv6) throw new Error('spawn ip6tables ENOENT');
        const chain = args.at(-1) ?? '';
        const jump = '-m comment --comment "twill forward" -j TWILL-FWD';
        return {
          stdout:
            chain === 'FORWARD'
              ? `-P FORWARD ACCEPT\n-A FORWARD ${jump}\n`
              : `-N ${chain}\n-A ${chain} -s fd00::/56 -j ACCEPT\n`,
          stderr: '',
        };
      }
      if (file === 'iptables') return { stdout: '', stderr: '' };
      return { stdout: '[]', stderr: '' };
    };
    const o = { chains: true, leftovers6: true };
    const left = await observe(runner, 'twill.1', AbortSignal.timeout(1_000), o);
    expect(calls.filter((c) => c.startsWith('ip6tables') || c.startsWith('ip -6')).sort()).toEqual([
      'ip -6 -N -json route show table main',
      'ip6tables -w 5 -t filter -S FORWARD',
      'ip6tables -w 5 -t filter -S TWILL-FWD',
      'ip6tables -w 5 -t nat -S POSTROUTING',
      'ip6tables -w 5 -t nat -S TWILL-POSTRTG',
    ]);
    expect(left.routes).toEqual([
      { dst: 'fd00:0:0:1::/64', via: 'fd7b::1', dev: 'eth0', onlink: false },
    ]);
    expect(left.forward6).toEqual({
      jumps: ['-m comment --comment "twill forward" -j TWILL-FWD'],
      rules: ['-A TWILL-FWD -s fd00::/56 -j ACCEPT'],
    });
    // diffed against "no IPv6": the route, the chain and its jump go
    const v4 = desiredState(backendInput({ backend: 'host-gw', peers: [] }));
    expect(diff(v4, left).flatMap(opLines)).toEqual(
      expect.arrayContaining([
        'route del fd00:0:0:1::/64 via fd7b::1 dev eth0 proto 151',
        '-D FORWARD -m comment --comment "twill forward" -j TWILL-FWD',
        '-X TWILL-FWD',
      ]),
    );
    // a kernel without IPv6, no ip6tables: nothing there, and the observation stands
    noIpv6 = true;
    const none = await observe(runner, 'twill.1', AbortSignal.timeout(1_000), o);
    expect(none.routes).toEqual([]);
    expect(none.postrouting6).toBeUndefined();
    expect(none.forward6).toBeUndefined();
    expect(diff(v4, none).filter((op) => 'ipv6' in op || op.kind === 'route')).toEqual([]);
  });

  it('lets through monitor events about twill-v6 devices, IPv6 routes of its protocol and ip6tables chains', () => {
    const ctx = { underlay: 'eth0' };
    expect(ipNeedles(ctx)).toContain('twill-v6.');
    expect(
      ipEventMatters('fd00:0:0:1:: dev twill-v6.1 lladdr 02:00:00:06:00:01 PERMANENT', ctx),
    ).toBe(true);
    expect(
      ipEventMatters(
        'Deleted fd00:0:0:1::/64 via fd7b::1 dev eth0 proto 151 metric 1024 pref medium',
        ctx,
      ),
    ).toBe(true);
    expect(
      ipEventMatters('fd00:0:0:1:: dev flannel-v6.1 lladdr 02:00:00:06:00:01 PERMANENT', ctx),
    ).toBe(false);
    // the underlay's global IPv6 address matters only with IPv6 on (its link-local never)
    const global = 'Deleted 3: eth0    inet6 fd7b::2/64 scope global ';
    expect(ipEventMatters(global, ctx)).toBe(false);
    expect(ipEventMatters(global, { ...ctx, ipv6: true })).toBe(true);
    expect(ipEventMatters('3: eth0    inet6 fe80::1/64 scope link', { ...ctx, ipv6: true })).toBe(
      false,
    );
    // the kernel's own IPv6 churn on twill's devices (link-local, multicast, local table) is not
    // twill's: a (re)created twill.1 would otherwise trigger a pass when its DAD ends
    for (const kernel of [
      '5: twill.1    inet6 fe80::2c3a:bff:fefc:c61b/64 scope link ',
      'Deleted 5: twill.1    inet6 fe80::2c3a:bff:fefc:c61b/64 scope link tentative ',
      'fe80::/64 dev twill.1 proto kernel metric 256 pref medium',
      'multicast ff00::/8 dev twill-v6.1 table local proto kernel metric 256 pref medium',
      'local fe80::2c3a:bff:fefc:c61b dev twill.1 table local proto kernel metric 0 pref medium',
    ])
      expect(ipEventMatters(kernel, { ...ctx, ipv6: true }), kernel).toBe(false);
    // twill's own lines on the same devices still matter, MACs that start fe:8… included
    expect(
      ipEventMatters('fd00:0:0:1:: dev twill-v6.1 lladdr fe:80:00:06:00:01 PERMANENT', ctx),
    ).toBe(true);
    expect(ipEventMatters('Deleted 5: twill.1: <BROADCAST,MULTICAST> mtu 1450', ctx)).toBe(true);
    // ip6tables' tables matter only with IPv6 on: an IPv4-only node ignores kube-proxy's IPv6 churn
    const v6 = { ipv6: true };
    const ip6Lines = [
      'delete rule ip6 nat TWILL-POSTRTG handle 2',
      'delete rule ip6 filter FORWARD handle 4',
      'add rule ip6 nat POSTROUTING counter jump KUBE-POSTROUTING',
      'delete table ip6 nat',
      'flush table ip6 filter',
    ];
    for (const line of ip6Lines) {
      expect(nftEventMatters(line, v6), line).toBe(true);
      expect(nftEventMatters(line), line).toBe(false);
      expect(nftEventMatters(line, { ipv6: false }), line).toBe(false);
    }
    expect(nftEventMatters('add rule ip6 nat KUBE-SERVICES handle 9', v6)).toBe(false);
    // iptables' tables, flushing everything and lost events matter either way
    for (const line of [
      'delete rule ip nat TWILL-POSTRTG handle 2',
      'delete table ip filter',
      'flush ruleset',
      '# ERROR: We lost some netlink events!',
    ]) {
      expect(nftEventMatters(line), line).toBe(true);
      expect(nftEventMatters(line, v6), line).toBe(true);
    }
    expect(nftTouch('delete rule ip6 nat TWILL-POSTRTG handle 2')).toEqual({
      kind: 'chains',
      tables: ['nat'],
    });
    expect(nftTouch('delete rule ip6 filter TWILL-FWD handle 2')).toEqual({
      kind: 'chains',
      tables: ['filter'],
    });
  });

  it('reads IPv6 route, neighbour and FDB events into what they touched', () => {
    expect(
      ipTouch(
        'fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
      ),
    ).toEqual({
      kind: 'route',
      deleted: false,
      dst: 'fd00:0:0:1::/64',
      route: { dst: 'fd00:0:0:1::/64', via: 'fd00:0:0:1::', dev: 'twill-v6.1', onlink: true },
    });
    // another metric is not a route twill writes
    expect(
      ipTouch('Deleted fd00:0:0:1::/64 via fd7b::1 dev eth0 proto 151 metric 5 pref medium'),
    ).toEqual({ kind: 'route', deleted: true, dst: 'fd00:0:0:1::/64', route: undefined });
    expect(
      ipTouch('Deleted fd00:0:0:4:: dev twill-v6.1 lladdr 02:00:00:06:00:04 PERMANENT'),
    ).toEqual({
      kind: 'neigh',
      deleted: true,
      dev: 'twill-v6.1',
      ip: 'fd00:0:0:4::',
      mac: '02:00:00:06:00:04',
      permanent: true,
    });
    // an FDB entry shows its dst first
    expect(
      ipTouch('fd7b::4 dev twill-v6.1 lladdr 02:00:00:06:00:04 NOARP PERMANENT'),
    ).toMatchObject({
      kind: 'neigh',
      ip: 'fd7b::4',
      mac: '02:00:00:06:00:04',
    });
    // a MAC first is no address
    expect(ipTouch('02:00:00:06:00:04 dev twill-v6.1 self permanent')).toEqual({ kind: 'all' });
  });

  it('judges IPv6 events against the desired state: put back what went, nothing for its own changes', () => {
    const k = indexDesired(vxlan6, 1);
    const work = (line: string) => judge(ipTouch(line), k);
    expect(
      work(
        'Deleted fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
      ),
    ).toEqual([{ kind: 'route', key: 'fd00:0:0:4::/64' }]);
    expect(
      work(
        'fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
      ),
    ).toEqual([]);
    expect(work('Deleted fd00:0:0:4:: dev twill-v6.1 lladdr 02:00:00:06:00:04 PERMANENT')).toEqual([
      { kind: 'neigh', key: 'fd00:0:0:4::' },
    ]);
    expect(work('fd00:0:0:4:: dev twill-v6.1 lladdr 02:00:00:06:00:04 PERMANENT')).toEqual([]);
    expect(work('Deleted fd7b::4 dev twill-v6.1 lladdr 02:00:00:06:00:04 NOARP PERMANENT')).toEqual(
      [{ kind: 'fdb', key: 'fd7b::4' }],
    );
    // the old route a device switch deletes (its own change, not the wanted route going) needs
    // nothing; the add that follows is the wanted route coming back
    expect(
      work('Deleted fd00:0:0:4::/64 via fd7b::4 dev eth0 proto 151 metric 1024 pref medium'),
    ).toEqual([]);
    // a route of another shape going (another metric): it may have been the one, look again
    expect(
      work('Deleted fd00:0:0:4::/64 via fd7b::4 dev eth0 proto 151 metric 5 pref medium'),
    ).toEqual([{ kind: 'route', key: 'fd00:0:0:4::/64' }]);
  });
});
