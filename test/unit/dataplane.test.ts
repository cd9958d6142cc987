// The dataplane's pure core: backends (host-gw, vxlan, DirectRouting,
// problems), diff (empty when the kernel matches, owned-only deletes, device
// replacement, a bridge's stale CNI gateway), rendering (golden batch text
// and restore payload), and the helpers that read kernel output.
import { describe, expect, it } from 'vitest';
import { opLines, renderBatches } from '../../src/dataplane/render.ts';
import { desiredState, type BackendInput } from '../../src/dataplane/desired.ts';
import { admitPeers } from '../../src/lease/admit.ts';
import { assumedWithout, diff } from '../../src/dataplane/diff.ts';
import { chainRules, jumpRules, diffChain, chainSpecs } from '../../src/dataplane/masq.ts';
import type { DesiredState, ObservedState } from '../../src/dataplane/model.ts';
import { ipEventMatters, ipTouch, nftEventMatters, nftTouch } from '../../src/dataplane/monitor.ts';
import {
  observe,
  parseBridgeAddrs,
  parseIptablesVersion,
  parseLinks,
  splitRoutes,
} from '../../src/dataplane/observe.ts';
import { CommandError, type Runner } from '../../src/exec/runner.ts';
import { parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { backendInput, masqOf, peerLease } from '../helpers/dataplane.ts';
import { routeMetric } from '../../src/dataplane/peer-entries.ts';

const EMPTY: ObservedState = {
  links: [],
  routes: [],
  neighs: [],
  fdb: [],
  postrouting: { jumps: [], rules: null },
  forward: { jumps: [], rules: null },
};

/** The observed state a kernel holding exactly `want` would report. */
function matching(want: DesiredState): ObservedState {
  const d = want.vxlan;
  const chains = chainSpecs(masqOf(want));
  return {
    links: d
      ? [
          {
            name: d.name,
            vni: d.vni,
            local: d.local,
            underlay: d.underlay,
            port: d.port,
            learning: d.learning,
            gbp: d.gbp,
            mtu: d.mtu,
            mac: d.mac,
            up: true,
            addresses: [d.address],
          },
        ]
      : [],
    routes: want.routes,
    neighs: want.neighs.map((n) => ({ ...n, permanent: true })),
    fdb: want.fdb.map((f) => ({ ...f, permanent: true })),
    postrouting: {
      jumps: chains.postrouting.rules ? [chains.postrouting.jump] : [],
      rules: chains.postrouting.rules,
    },
    forward: { jumps: [chains.forward.jump], rules: chains.forward.rules },
  };
}

const vxlan = desiredState(
  backendInput({
    backend: 'vxlan',
    peers: [peerLease(1, { vxlan: true }), peerLease(4, { vxlan: true })],
  }),
);

describe('backends', () => {
  it('vxlan: device, and per peer a neighbour, an FDB entry and an onlink route', () => {
    expect(vxlan.vxlan).toEqual({
      name: 'twill.1',
      vni: 1,
      local: '10.123.0.2',
      underlay: 'eth0',
      port: 8472,
      learning: false,
      gbp: false,
      mtu: 1450,
      mac: '02:00:00:00:00:03',
      address: '10.244.3.0/32',
    });
    expect(vxlan.neighs).toEqual([
      { dev: 'twill.1', ip: '10.244.1.0', mac: '02:00:00:00:00:01' },
      { dev: 'twill.1', ip: '10.244.4.0', mac: '02:00:00:00:00:04' },
    ]);
    expect(vxlan.fdb).toEqual([
      { dev: 'twill.1', mac: '02:00:00:00:00:01', dst: '10.123.0.1' },
      { dev: 'twill.1', mac: '02:00:00:00:00:04', dst: '10.123.0.4' },
    ]);
    expect(vxlan.routes).toEqual([
      { dst: '10.244.1.0/24', via: '10.244.1.0', dev: 'twill.1', onlink: true, metric: 717825 },
      { dst: '10.244.4.0/24', via: '10.244.4.0', dev: 'twill.1', onlink: true, metric: 717828 },
    ]);
  });

  it('vxlan: Backend MTU, VNI, Port, GBP and Learning reach the device', () => {
    const d = desiredState(
      backendInput({
        backend: 'vxlan',
        peers: [],
        extra: ',"MTU":9000,"VNI":1,"Port":4789,"GBP":true,"Learning":true',
      }),
    ).vxlan;
    expect(d).toMatchObject({ mtu: 8950, port: 4789, gbp: true, learning: true });
  });

  it('vxlan DirectRouting: on-link peers get a plain route, the others go through the tunnel', () => {
    const peers = [
      peerLease(1, { vxlan: true }),
      peerLease(5, { vxlan: true, ipBase: '198.51.100' }),
    ];
    const d = desiredState(
      backendInput({ backend: 'vxlan', peers, extra: ',"DirectRouting":true' }),
    );
    expect(d.routes).toEqual([
      { dst: '10.244.1.0/24', via: '10.123.0.1', dev: 'eth0', onlink: false, metric: 717825 },
      { dst: '10.244.5.0/24', via: '10.244.5.0', dev: 'twill.1', onlink: true, metric: 717829 },
    ]);
    expect(d.neighs.map((n) => n.ip)).toEqual(['10.244.5.0']);
  });

  it("vxlan: peers claiming one VtepMAC with no clear first claim are all refused, and a peer claiming ours too: none takes another's FDB entry", () => {
    const withMac = (n: number, mac: string) => ({
      ...peerLease(n, { vxlan: true }),
      attrs: { ...peerLease(n, { vxlan: true }).attrs, backendData: { vni: 1, vtepMac: mac } },
    });
    const peers = [
      peerLease(1, { vxlan: true }),
      withMac(5, '02:00:00:00:00:01'),
      withMac(6, '02:00:00:00:00:03'),
      peerLease(7, { vxlan: true }),
    ];
    for (const order of [peers, [...peers].reverse()]) {
      const { d, refused } = admitted(backendInput({ backend: 'vxlan', peers: order }));
      expect(d.fdb.map((f) => f.dst).sort()).toEqual(['10.123.0.7']);
      expect(refused.map((p) => [p.key, p.code])).toEqual([
        ['10.244.1.0-24', 'vtep-mac'],
        ['10.244.5.0-24', 'vtep-mac'],
        ['10.244.6.0-24', 'vtep-mac'],
      ]);
      expect(refused[0]?.reason).toBe(
        'VtepMAC 02:00:00:00:00:01 is claimed by 2 peers (10.244.1.0-24, 10.244.5.0-24) and none claimed it first',
      );
      expect(refused[2]?.reason).toBe("VtepMAC 02:00:00:00:00:03 is this node's own");
    }
  });

  it('peers with overlapping subnets (Kubernetes keys are node names): a wider one never captures the narrower ones, identical ones with no clear first claim refuse each other, on every node alike', () => {
    const named = (n: number, key: string, subnet?: { base: number; prefix: number }) => ({
      ...peerLease(n, { vxlan: true }),
      key,
      ...(subnet ? { subnet } : {}),
    });
    const seven = peerLease(7, { vxlan: true }).subnet as Cidr;
    const eight = peerLease(8, { vxlan: true }).subnet as Cidr;
    // node-w's /23 covers node-a's and node-e's /24s; node-b claims node-a's /24 again
    const peers = [
      named(7, 'node-a'),
      named(8, 'node-e'),
      named(9, 'node-w', { base: seven.base - 256, prefix: 23 }),
      named(1, 'node-d'),
      named(6, 'node-b', seven),
      named(10, 'node-f', { base: eight.base + 128, prefix: 25 }),
    ];
    for (const order of [peers, [...peers].reverse()]) {
      const { d, refused } = admitted(backendInput({ backend: 'vxlan', peers: order }));
      expect(d.routes.map((r) => r.dst).sort()).toEqual(['10.244.1.0/24', '10.244.8.128/25']);
      expect(refused.map((p) => [p.key, p.code, p.reason])).toEqual([
        [
          'node-a',
          'subnet-conflict',
          'subnet 10.244.7.0/24 is claimed by 2 peers (node-a, node-b) and none claimed it first',
        ],
        [
          'node-b',
          'subnet-conflict',
          'subnet 10.244.7.0/24 is claimed by 2 peers (node-a, node-b) and none claimed it first',
        ],
        ['node-e', 'subnet-conflict', "subnet 10.244.8.0/24 covers peer node-f's 10.244.8.128/25"],
        ['node-w', 'subnet-conflict', "subnet 10.244.6.0/23 covers peer node-a's 10.244.7.0/24"],
      ]);
    }
  });

  it('host-gw: routes via the peer address on the interface; off-link peers are refused', () => {
    const { d, refused } = admitted(
      backendInput({
        backend: 'host-gw',
        peers: [
          peerLease(6, { vxlan: false, ipBase: '198.51.100' }),
          peerLease(1, { vxlan: false }),
        ],
      }),
    );
    expect(d.vxlan).toBeNull();
    expect(d.routes).toEqual([
      { dst: '10.244.1.0/24', via: '10.123.0.1', dev: 'eth0', onlink: false, metric: 717825 },
    ]);
    expect(refused).toEqual([
      {
        key: '10.244.6.0-24',
        code: 'not-on-link',
        reason: expect.stringContaining(
          'PublicIP 198.51.100.6 is not on-link on eth0 (10.123.0.2/24)',
        ),
      },
    ]);
  });
});

/**
 * Admission then the backend, as the daemon runs them: the refused peers with why, in key order,
 * and the desired state of the admitted ones.
 */
function admitted(input: BackendInput): {
  d: DesiredState;
  refused: { key: string; code: string; reason: string }[];
} {
  const a = admitPeers(input.peers, {
    config: input.config,
    self: input.self.subnet,
    selfPublicIp: input.self.attrs.publicIp,
    ...(input.self.attrs.backendData ? { selfVtepMac: input.self.attrs.backendData.vtepMac } : {}),
    underlay: input.choice.iface,
    // peers of any size, as in Kubernetes mode: the set-level stage is what these tests are about
    anySubnetSize: true,
  });
  const refused = a.refused.map((r) => ({
    key: r.lease.key,
    code: r.refusal.reason,
    reason: r.refusal.detail,
  }));
  return { d: desiredState({ ...input, peers: a.admitted }), refused };
}

describe('diff and render', () => {
  it('plans nothing when the kernel already matches', () => {
    expect(diff(vxlan, matching(vxlan))).toEqual([]);
    const hostgw = desiredState(
      backendInput({ backend: 'host-gw', peers: [peerLease(1, { vxlan: false })], ipMasq: false }),
    );
    expect(diff(hostgw, matching(hostgw))).toEqual([]);
  });

  it('renders a cold start as ip, bridge, ip batches and one restore payload (golden)', () => {
    const batches = renderBatches(diff(vxlan, EMPTY));
    expect(batches.map((b) => [b.file, ...b.args].join(' '))).toEqual([
      'ip -force -batch -',
      'bridge -force -batch -',
      'ip -force -batch -',
      'iptables-restore --noflush -w 5',
    ]);
    expect(batches.map((b) => b.input)).toEqual([
      [
        'link add twill.1 mtu 1450 address 02:00:00:00:00:03 type vxlan id 1 local 10.123.0.2 dev eth0 dstport 8472 nolearning',
        'addr add 10.244.3.0/32 dev twill.1',
        'link set twill.1 up',
        '',
      ].join('\n'),
      'fdb append 02:00:00:00:00:01 dev twill.1 dst 10.123.0.1 self permanent\nfdb append 02:00:00:00:00:04 dev twill.1 dst 10.123.0.4 self permanent\n',
      [
        'neigh replace 10.244.1.0 lladdr 02:00:00:00:00:01 dev twill.1 nud permanent',
        'neigh replace 10.244.4.0 lladdr 02:00:00:00:00:04 dev twill.1 nud permanent',
        'route add 10.244.1.0/24 via 10.244.1.0 dev twill.1 onlink proto 151 metric 717825',
        'route add 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151 metric 717828',
        '',
      ].join('\n'),
      [
        '*nat',
        ':TWILL-POSTRTG - [0:0]',
        '-A TWILL-POSTRTG -m mark --mark 0x4000/0x4000 -m comment --comment "twill masq" -j RETURN',
        '-A TWILL-POSTRTG -s 10.244.3.0/24 -d 10.244.0.0/16 -m comment --comment "twill masq" -j RETURN',
        '-A TWILL-POSTRTG -s 10.244.0.0/16 -d 10.244.3.0/24 -m comment --comment "twill masq" -j RETURN',
        '-A TWILL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.3.0/24 -m comment --comment "twill masq" -j RETURN',
        '-A TWILL-POSTRTG -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "twill masq" -j MASQUERADE --random-fully',
        '-A TWILL-POSTRTG ! -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment "twill masq" -j MASQUERADE --random-fully',
        '-A POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG',
        'COMMIT',
        '*filter',
        ':TWILL-FWD - [0:0]',
        '-A TWILL-FWD -s 10.244.0.0/16 -m comment --comment "twill forward" -j ACCEPT',
        '-A TWILL-FWD -d 10.244.0.0/16 -m comment --comment "twill forward" -j ACCEPT',
        '-A FORWARD -m comment --comment "twill forward" -j TWILL-FWD',
        'COMMIT',
        '',
      ].join('\n'),
    ]);
  });

  it('removes a departed peer in reverse order, in two processes: route and neighbour, then FDB', () => {
    const one = desiredState(
      backendInput({ backend: 'vxlan', peers: [peerLease(1, { vxlan: true })] }),
    );
    const batches = renderBatches(diff(one, matching(vxlan)));
    expect(batches.map((b) => b.input)).toEqual([
      'route del 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151 metric 717828\nneigh del 10.244.4.0 dev twill.1\n',
      'fdb del 02:00:00:00:00:04 dev twill.1 dst 10.123.0.4 self\n',
    ]);
  });

  it("gives each IPv4 route its destination's block number as metric, and takes over an older twill's metric-0 route after adding its own", () => {
    const block = (text: string): Cidr => parseCidr(text, { strict: true }) as Cidr;
    expect(routeMetric(block('10.244.1.0/24'))).toBe(717825);
    expect(routeMetric(block('10.50.7.0/24'))).toBe(668167);
    expect(routeMetric(block('192.168.0.0/16'))).toBe(49320);
    expect(routeMetric(block('0.0.0.0/0'))).toBe(0);
    const seen = matching(vxlan);
    // peer 4's route as an older twill wrote it: metric 0
    const old = seen.routes.map((r) =>
      r.dst === '10.244.4.0/24' ? { ...r, metric: undefined } : r,
    );
    // the new one first, alone: the old one keeps routing until the new one is seen in
    const ops = diff(vxlan, { ...seen, routes: old });
    expect(ops.map((op) => [op.phase, ...opLines(op)])).toEqual([
      [
        'ip-post',
        'route add 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151 metric 717828',
      ],
    ]);
    // both there (the next pass): the old one goes, the new one stays
    const both = [...seen.routes, { ...seen.routes[1]!, metric: undefined }];
    expect(diff(vxlan, { ...seen, routes: both }).flatMap(opLines)).toEqual([
      'route del 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151',
    ]);
  });

  it("writes a peer's route at metric 0 where another program's route holds its destination, and keeps its own", () => {
    const seen = matching(vxlan);
    const foreignRoutes = [
      { dst: 'default', dev: 'eth0' },
      { dst: '10.123.0.0/24', dev: 'eth0' },
      { dst: '10.244.4.0/24', dev: 'eth0' },
    ];
    // twill's route of its own metric stays; the metric-0 add fails on a metric-0 foreign route
    // (visibly), and wins over one of a higher metric
    expect(diff(vxlan, { ...seen, foreignRoutes }).flatMap(opLines)).toEqual([
      'route add 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151',
    ]);
    // once in, nothing more
    const taken = [...seen.routes, { ...seen.routes[1]!, metric: undefined }];
    expect(diff(vxlan, { ...seen, routes: taken, foreignRoutes })).toEqual([]);
    // the other program's route gone: twill's own metric again, and its metric-0 route goes
    expect(diff(vxlan, { ...seen, routes: taken }).flatMap(opLines)).toEqual([
      'route del 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151',
    ]);
  });

  it('replaces a device with incompatible settings and re-adds its entries', () => {
    const seen = matching(vxlan);
    const wrong = { ...seen, links: seen.links.map((l) => ({ ...l, port: 4789 })) };
    const lines = diff(vxlan, wrong).flatMap(opLines);
    expect(lines.slice(0, 2)).toEqual([
      'link del twill.1',
      expect.stringContaining('link add twill.1'),
    ]);
    expect(lines.filter((l) => l.startsWith('route add'))).toHaveLength(2);
    expect(lines.filter((l) => l.startsWith('fdb append'))).toHaveLength(2);
  });

  it('fixes MTU, MAC, address and up in place, and deletes stray twill devices and owned entries only', () => {
    const seen = matching(vxlan);
    const drifted: ObservedState = {
      ...seen,
      links: [
        {
          ...(seen.links[0] as ObservedState['links'][number]),
          mtu: 1500,
          mac: '02:00:00:00:00:99',
          up: false,
          addresses: ['10.244.9.0/32'],
        },
        { ...(seen.links[0] as ObservedState['links'][number]), name: 'twill.7', vni: 7 },
      ],
      neighs: [
        ...seen.neighs,
        { dev: 'twill.1', ip: '10.244.8.0', mac: '02:00:00:00:00:08', permanent: false },
      ],
      fdb: [
        ...seen.fdb,
        { dev: 'twill.1', mac: '02:00:00:00:00:08', dst: '10.123.0.8', permanent: false },
      ],
    };
    expect(diff(vxlan, drifted).flatMap(opLines)).toEqual([
      'link set twill.1 address 02:00:00:00:00:03',
      'link set twill.1 mtu 1450',
      'addr del 10.244.9.0/32 dev twill.1',
      'addr add 10.244.3.0/32 dev twill.1',
      'link set twill.1 up',
      'link del twill.7',
    ]);
  });
});

describe('stale bridge gateways (a CNI gateway of an earlier lease of ours)', () => {
  // this node held 10.244.216.0/24 before; the CNI plugin's gateway for it is still on cni0 beside
  // the current one, and peer 216 holds that subnet now
  const peer216 = peerLease(216, { vxlan: true });
  const now = desiredState(
    backendInput({ backend: 'vxlan', peers: [peerLease(1, { vxlan: true })] }),
  );
  const withPeer = desiredState(
    backendInput({ backend: 'vxlan', peers: [peerLease(1, { vxlan: true }), peer216] }),
  );
  const bridge = (...addresses: string[]) => addresses.map((address) => ({ dev: 'cni0', address }));
  const cidr = (text: string): Cidr => parseCidr(text, { strict: true }) as Cidr;

  it('desired: the pod network and our subnet in it, per family that has both', () => {
    expect(now.podRanges).toEqual([
      { family: 4, bridge: 'cni0', network: cidr('10.244.0.0/16'), subnet: cidr('10.244.3.0/24') },
    ]);
  });

  it('touches only the CNI bridge, and only a gateway-shaped address (first host, our prefix)', () => {
    const seen = (addrs: { dev: string; address: string }[]): ObservedState => ({
      ...matching(now),
      bridgeAddrs: addrs,
    });
    // bridges of other programs inside a wide pod network: LXD's, docker's with --bip, libvirt's
    const others = [
      { dev: 'lxdbr0', address: '10.244.7.1/24' },
      { dev: 'docker0', address: '10.244.200.1/24' },
      { dev: 'virbr0', address: '10.244.122.1/24' },
    ];
    expect(diff(now, seen(others))).toEqual([]);
    // on cni0, not what the CNI plugin makes a gateway of: another host, another prefix
    expect(diff(now, seen(bridge('10.244.216.5/24', '10.244.216.1/16', '10.244.0.1/23')))).toEqual(
      [],
    );
    // another bridge name named by --cni-bridge: that one is cleaned, cni0 is left alone
    const kube = desiredState({
      ...backendInput({ backend: 'vxlan', peers: [peerLease(1, { vxlan: true })] }),
      cniBridge: 'kube-bridge',
    });
    const both = seen([
      { dev: 'kube-bridge', address: '10.244.216.1/24' },
      { dev: 'cni0', address: '10.244.217.1/24' },
    ]);
    expect(diff(kube, both).flatMap(opLines)).toEqual(['addr del 10.244.216.1/24 dev kube-bridge']);
  });

  it('deletes the old gateway in the first ip batch, before the route to its new holder is added', () => {
    const seen: ObservedState = {
      ...matching(now),
      bridgeAddrs: [
        ...bridge('10.244.216.1/24', '10.244.3.1/24'),
        // another bridge, outside the pod network (docker's)
        { dev: 'docker0', address: '172.17.0.1/16' },
      ],
      // the old gateway's connected route, which goes with it: not another program's route in
      // the way of twill's (which keeps its own metric)
      foreignRoutes: [
        { dst: '10.244.216.0/24', dev: 'cni0' },
        { dst: '10.244.3.0/24', dev: 'cni0' },
        { dst: '172.17.0.0/16', dev: 'docker0' },
      ],
    };
    const ops = diff(withPeer, seen);
    expect(ops.filter((o) => o.kind === 'addr')).toEqual([
      {
        kind: 'addr',
        action: 'delete',
        phase: 'ip-pre',
        dev: 'cni0',
        address: '10.244.216.1/24',
        stale: true,
      },
    ]);
    const batches = renderBatches(ops);
    expect(batches.map((b) => [b.phase, b.input])).toEqual([
      ['ip-pre', 'addr del 10.244.216.1/24 dev cni0\n'],
      ['bridge', 'fdb append 02:00:00:00:00:d8 dev twill.1 dst 10.123.0.216 self permanent\n'],
      [
        'ip-post',
        'neigh replace 10.244.216.0 lladdr 02:00:00:00:00:d8 dev twill.1 nud permanent\n' +
          'route add 10.244.216.0/24 via 10.244.216.0 dev twill.1 onlink proto 151 metric 718040\n',
      ],
    ]);
    // the same without the peer: the address goes all the same
    expect(diff(now, seen).flatMap(opLines)).toEqual(['addr del 10.244.216.1/24 dev cni0']);
    // another program's route to that subnet on another device stays in the way: metric 0
    const held = {
      ...seen,
      foreignRoutes: [...(seen.foreignRoutes ?? []), { dst: '10.244.216.0/24', dev: 'eth0' }],
    };
    expect(diff(withPeer, held).flatMap(opLines)).toContain(
      'route add 10.244.216.0/24 via 10.244.216.0 dev twill.1 onlink proto 151',
    );
  });

  it('plans nothing when the bridge holds only our gateway, or addresses outside the pod network', () => {
    const seen = (addrs: { dev: string; address: string }[]): ObservedState => ({
      ...matching(now),
      bridgeAddrs: addrs,
    });
    expect(diff(now, seen(bridge('10.244.3.1/24')))).toEqual([]);
    // our subnet's other addresses, and anything outside 10.244.0.0/16
    expect(diff(now, seen(bridge('10.244.3.200/24', '10.245.0.1/24', '192.168.1.1/24')))).toEqual(
      [],
    );
    // an IPv4-only node has no IPv6 range: an IPv6 address on a bridge is never its business
    expect(diff(now, seen(bridge('fd00:0:0:9::1/64', 'fe80::1/64')))).toEqual([]);
  });

  it("reads only bridges' addresses: a non-bridge device with such an address is left alone", async () => {
    const json = [
      {
        ifname: 'eth0',
        linkinfo: { info_kind: 'veth' },
        addr_info: [{ family: 'inet', local: '10.244.216.5', prefixlen: 24 }],
      },
      // no linkinfo (a physical NIC)
      {
        ifname: 'eth1',
        addr_info: [{ family: 'inet', local: '10.244.216.6', prefixlen: 24 }],
      },
      // a pod's veth end in the bridge: its kind is veth, the bridge is its master
      {
        ifname: 'veth1',
        master: 'cni0',
        linkinfo: { info_kind: 'veth', info_slave_kind: 'bridge' },
        addr_info: [{ family: 'inet', local: '10.244.216.7', prefixlen: 24 }],
      },
      {
        ifname: 'cni0',
        linkinfo: { info_kind: 'bridge', info_data: { stp_state: 0 } },
        addr_info: [
          { family: 'inet', local: '10.244.216.1', prefixlen: 24 },
          { family: 'inet', local: '10.244.3.1', prefixlen: 24 },
          { family: 'inet6', local: 'fe80::1', prefixlen: 64, scope: 'link' },
        ],
      },
      // a bridge named like twill's device is not twill's device
      { ifname: 'twill.1', linkinfo: { info_kind: 'bridge' }, addr_info: [] },
    ];
    expect(parseBridgeAddrs(json)).toEqual([
      { dev: 'cni0', address: '10.244.216.1/24' },
      { dev: 'cni0', address: '10.244.3.1/24' },
      { dev: 'cni0', address: 'fe80::1/64' },
    ]);
    expect(parseLinks(json)).toEqual([]);
    // one read gives both, whatever else the host has
    const calls: string[] = [];
    const runner: Runner = async (file, args) => {
      calls.push([file, ...args].join(' '));
      if (file === 'ip' && args.includes('addr'))
        return { stdout: JSON.stringify(json), stderr: '' };
      return { stdout: '[]', stderr: '' };
    };
    const seen = await observe(runner, 'twill.1', AbortSignal.timeout(1_000), { chains: false });
    expect(calls.filter((c) => c.includes('addr'))).toEqual(['ip -d -json addr show']);
    expect(diff(now, seen).filter((o) => o.kind === 'addr' && o.action === 'delete')).toEqual([
      expect.objectContaining({ action: 'delete', dev: 'cni0', address: '10.244.216.1/24' }),
    ]);
  });

  it('touches nothing of a family whose subnet of ours is unknown, nor when the addresses were not read', () => {
    const noRange: DesiredState = { ...now, podRanges: [] };
    const seen: ObservedState = { ...matching(now), bridgeAddrs: bridge('10.244.216.1/24') };
    expect(diff(noRange, seen)).toEqual([]);
    // a pass that did not read them (delta, repair: no reading at all) never deletes one
    expect(diff(now, matching(now))).toEqual([]);
  });
});

describe('masquerade chains', () => {
  const spec = chainSpecs(masqOf(vxlan)).postrouting;
  const rules = spec.rules ?? [];
  it('rewrites the chain when a rule is missing, swapped or duplicated, and keeps one jump', () => {
    for (const seenRules of [
      rules.slice(1),
      [rules[1], rules[0], ...rules.slice(2)],
      [...rules, rules[4]],
    ]) {
      const ops = diffChain(spec, { jumps: [spec.jump], rules: seenRules as string[] });
      expect(ops.flatMap(opLines)).toEqual([':TWILL-POSTRTG - [0:0]', ...rules]);
    }
    expect(
      diffChain(spec, { jumps: [spec.jump, spec.jump, spec.jump], rules }).flatMap(opLines),
    ).toEqual([
      '-D POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG',
      '-D POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG',
    ]);
  });

  it('replaces a jump of another shape (no comment) with ours, deleting it as listed', () => {
    expect(diffChain(spec, { jumps: ['-j TWILL-POSTRTG'], rules }).flatMap(opLines)).toEqual([
      '-D POSTROUTING -j TWILL-POSTRTG',
      '-A POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG',
    ]);
  });

  it('removes the masquerade chain when --ip-masq is off, whatever shape its jumps have', () => {
    const off = chainSpecs({ ...masqOf(vxlan), ipMasq: false }).postrouting;
    expect(
      diffChain(off, { jumps: [spec.jump, '-s 10.0.0.0/8 -j TWILL-POSTRTG'], rules }).flatMap(
        opLines,
      ),
    ).toEqual([
      '-D POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG',
      '-D POSTROUTING -s 10.0.0.0/8 -j TWILL-POSTRTG',
      ':TWILL-POSTRTG - [0:0]',
      '-X TWILL-POSTRTG',
    ]);
    expect(diffChain(off, { jumps: [], rules: null })).toEqual([]);
  });

  it('leaves out --random-fully where iptables lacks it', () => {
    expect(
      chainSpecs({ ...masqOf(vxlan), randomFully: false }).postrouting.rules?.join('\n'),
    ).not.toContain('random-fully');
  });

  it('reads iptables -S listings', () => {
    const listing =
      '-P POSTROUTING ACCEPT\n-A POSTROUTING -j KUBE-POSTROUTING\n-A POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG\n';
    expect(jumpRules(listing, 'POSTROUTING', 'TWILL-POSTRTG')).toEqual([
      '-m comment --comment "twill masq" -j TWILL-POSTRTG',
    ]);
    expect(chainRules('-N TWILL-FWD\n-A TWILL-FWD -s 10.0.0.0/8 -j ACCEPT\n')).toEqual([
      '-A TWILL-FWD -s 10.0.0.0/8 -j ACCEPT',
    ]);
  });
});

describe('kernel output readers', () => {
  it("splits the main table into twill's routes (protocol 151, IPv4 with their metric) and other programs' destinations", () => {
    const json = [
      { dst: 'default', gateway: '10.123.0.1', dev: 'eth0', protocol: '4', flags: [] },
      { dst: '10.123.0.0/24', dev: 'eth0', protocol: '2', scope: '253', flags: [] },
      {
        dst: '10.244.1.0/24',
        gateway: '10.123.0.1',
        dev: 'eth0',
        protocol: '151',
        metric: 717825,
        flags: [],
      },
      {
        dst: '10.244.2.0/24',
        gateway: '10.244.2.0',
        dev: 'twill.1',
        protocol: '151',
        flags: ['onlink'],
      },
      { dst: '10.244.3.0/24', gateway: '10.123.0.3', dev: 'eth0', flags: [] },
      {
        dst: 'fd00:0:0:1::/64',
        gateway: 'fd7b::1',
        dev: 'eth0',
        protocol: '151',
        metric: 1024,
        flags: [],
      },
    ];
    expect(splitRoutes(json)).toEqual({
      own: [
        { dst: '10.244.1.0/24', via: '10.123.0.1', dev: 'eth0', onlink: false, metric: 717825 },
        { dst: '10.244.2.0/24', via: '10.244.2.0', dev: 'twill.1', onlink: true },
        // an IPv6 route's metric is the kernel's default, not twill's
        { dst: 'fd00:0:0:1::/64', via: 'fd7b::1', dev: 'eth0', onlink: false },
      ],
      // (a route of the boot protocol prints none)
      foreign: [
        { dst: 'default', dev: 'eth0' },
        { dst: '10.123.0.0/24', dev: 'eth0' },
        { dst: '10.244.3.0/24', dev: 'eth0' },
      ],
    });
  });

  it('observes a vxlan device deleted between its reads as absent, not as a failed pass', async () => {
    const link = [{ ifname: 'twill.1', linkinfo: { info_kind: 'vxlan', info_data: { id: 1 } } }];
    const runner: Runner = async (file, args) => {
      if (file === 'ip' && args.includes('addr'))
        return { stdout: JSON.stringify(link), stderr: '' };
      if (args.includes('twill.1'))
        throw new CommandError({
          command: [file, ...args],
          exitCode: 1,
          stderr: 'Cannot find device "twill.1"\n',
          reason: 'exit code 1',
        });
      return { stdout: '[]', stderr: '' };
    };
    const seen = await observe(runner, 'twill.1', AbortSignal.timeout(1_000), { chains: false });
    expect(seen.links).toEqual([]);
    expect([seen.neighs, seen.fdb]).toEqual([[], []]);
    // the device's own entries then come back with a new device
    expect(diff(vxlan, seen).some((o) => o.kind === 'link' && o.action === 'add')).toBe(true);
    // any other failure still fails the pass
    const broken: Runner = async (file, args) => {
      if (file === 'ip' && args.includes('addr'))
        return { stdout: JSON.stringify(link), stderr: '' };
      throw new Error('ip: out of memory');
    };
    await expect(observe(broken, 'twill.1', AbortSignal.timeout(1_000))).rejects.toThrow(
      'out of memory',
    );
  });

  it('parses iptables --version', () => {
    expect(parseIptablesVersion('iptables v1.8.9 (nf_tables)\n')).toEqual({
      nftables: true,
      randomFully: true,
    });
    expect(parseIptablesVersion('iptables v1.6.1\n')).toEqual({
      nftables: false,
      randomFully: false,
    });
  });

  it('keeps only twill devices from ip -d -json addr', () => {
    const json = [
      { ifname: 'flannel.1', mtu: 1450 },
      {
        ifname: 'twill.1',
        mtu: 1450,
        address: '02:00:00:00:00:03',
        flags: ['UP'],
        linkinfo: {
          info_kind: 'vxlan',
          info_data: { id: 1, local: '10.0.0.1', link: 'eth0', port: 8472, learning: false },
        },
        addr_info: [
          { family: 'inet', local: '10.244.3.0', prefixlen: 32 },
          { family: 'inet6', local: 'fe80::1', prefixlen: 64 },
        ],
      },
    ];
    expect(parseLinks(json)).toEqual([
      {
        name: 'twill.1',
        vni: 1,
        local: '10.0.0.1',
        underlay: 'eth0',
        port: 8472,
        learning: false,
        gbp: false,
        mtu: 1450,
        mac: '02:00:00:00:00:03',
        up: true,
        addresses: ['10.244.3.0/32'],
      },
    ]);
  });

  it('lets through only monitor events about twill objects', () => {
    const ctx = { underlay: 'eth0' };
    expect(ipEventMatters('Deleted 10.244.7.0/24 via 10.123.0.9 dev eth0 proto 151 ', ctx)).toBe(
      true,
    );
    expect(ipEventMatters('10.244.1.0 dev twill.1 lladdr 02:aa:bb:cc:dd:ee PERMANENT', ctx)).toBe(
      true,
    );
    expect(ipEventMatters('3: eth0@if9: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500', ctx)).toBe(
      true,
    );
    expect(ipEventMatters('10.123.0.9 dev eth0 lladdr 02:aa:bb:cc:dd:ee REACHABLE', ctx)).toBe(
      false,
    );
    expect(ipEventMatters('10.99.0.0/24 via 10.123.0.7 dev eth0 proto static', ctx)).toBe(false);
    expect(ipEventMatters('12: veth1234@if3: <BROADCAST> mtu 1450', ctx)).toBe(false);
    expect(ipEventMatters('Deleted 3: eth0    inet 10.123.0.2/24 scope global eth0', ctx)).toBe(
      true,
    );
    expect(ipEventMatters('3: eth0    inet 10.123.0.2/24 scope global eth0', ctx)).toBe(true);
    expect(ipEventMatters('3: eth0    inet6 fe80::1/64 scope link', ctx)).toBe(false);
    expect(nftEventMatters('delete rule ip nat TWILL-POSTRTG handle 2')).toBe(true);
    expect(nftEventMatters('delete rule ip nat POSTROUTING handle 4')).toBe(true);
    expect(nftEventMatters('delete table ip nat')).toBe(true);
    expect(nftEventMatters('add rule ip nat KUBE-POSTROUTING counter return')).toBe(false);
    expect(nftEventMatters('add rule ip nat KUBE-SVC-ABC counter jump KUBE-SEP-XYZ')).toBe(false);
  });
});

describe('what a kernel event touched', () => {
  it("reads routes of twill's protocol, with their shape when it is one twill writes", () => {
    expect(
      ipTouch('Deleted 10.244.2.0/24 via 10.244.2.0 dev twill.1 proto 151 metric 717826 onlink '),
    ).toEqual({
      kind: 'route',
      deleted: true,
      dst: '10.244.2.0/24',
      route: {
        dst: '10.244.2.0/24',
        via: '10.244.2.0',
        dev: 'twill.1',
        onlink: true,
        metric: 717826,
      },
    });
    expect(ipTouch('10.244.7.0/24 via 10.123.0.9 dev eth0 proto 151 ')).toEqual({
      kind: 'route',
      deleted: false,
      dst: '10.244.7.0/24',
      // (an older twill's, at metric 0)
      route: { dst: '10.244.7.0/24', via: '10.123.0.9', dev: 'eth0', onlink: false },
    });
    expect(ipTouch('10.244.7.0/24 via 10.123.0.9 dev eth0 proto 151 metric 5')).toMatchObject({
      route: { metric: 5 },
    });
    // more than twill writes (a source): the shape is unknown, so a full pass judges it
    expect(ipTouch('10.244.7.0/24 via 10.123.0.9 dev eth0 proto 151 src 10.123.0.2')).toMatchObject(
      {
        kind: 'route',
        route: undefined,
      },
    );
  });

  it("reads neighbour and FDB entries on twill's device (FDB entries show their dst as the address)", () => {
    expect(ipTouch('10.244.2.0 dev twill.1 lladdr 02:AA:00:00:00:02 PERMANENT ')).toEqual({
      kind: 'neigh',
      deleted: false,
      dev: 'twill.1',
      ip: '10.244.2.0',
      mac: '02:aa:00:00:00:02',
      permanent: true,
    });
    expect(ipTouch('Deleted 10.244.2.0 dev twill.1 FAILED ')).toEqual({
      kind: 'neigh',
      deleted: true,
      dev: 'twill.1',
      ip: '10.244.2.0',
      mac: undefined,
      permanent: false,
    });
    expect(
      ipTouch('Deleted 10.123.0.12 dev twill.1 lladdr 02:00:00:00:00:02 NOARP PERMANENT '),
    ).toMatchObject({ kind: 'neigh', deleted: true, ip: '10.123.0.12', mac: '02:00:00:00:00:02' });
  });

  it('leaves links, addresses and anything else to a full pass; rules name their table', () => {
    expect(ipTouch('7: twill.1: <BROADCAST,MULTICAST> mtu 1450 qdisc noop state DOWN')).toEqual({
      kind: 'all',
    });
    expect(ipTouch('Deleted 3: eth0    inet 10.123.0.2/24 scope global eth0')).toEqual({
      kind: 'all',
    });
    expect(
      ipTouch('local 10.244.3.0 dev twill.1 table local proto kernel scope host src 10.244.3.0'),
    ).toEqual({ kind: 'all' });
    expect(nftTouch('delete rule ip nat TWILL-POSTRTG handle 2')).toEqual({
      kind: 'chains',
      tables: ['nat'],
    });
    expect(nftTouch('delete rule ip filter FORWARD handle 9')).toEqual({
      kind: 'chains',
      tables: ['filter'],
    });
    expect(nftTouch('flush ruleset')).toEqual({ kind: 'chains', tables: ['nat', 'filter'] });
    // nft monitor lost events: any rule may have changed meanwhile
    expect(nftEventMatters('# ERROR: We lost some netlink events!')).toBe(true);
    expect(nftTouch('# ERROR: We lost some netlink events!')).toEqual({
      kind: 'chains',
      tables: ['nat', 'filter'],
    });
  });

  it('re-applies just the touched entries, FDB and neighbour before the route, a route only by adding', () => {
    const ops = diff(
      vxlan,
      assumedWithout(vxlan, {
        routes: new Set(['10.244.4.0/24']),
        neighs: new Set(['10.244.4.0']),
        fdbDsts: new Set(['10.123.0.4']),
      }),
    );
    expect(renderBatches(ops).map((b) => [b.file, b.input])).toEqual([
      ['bridge', 'fdb append 02:00:00:00:00:04 dev twill.1 dst 10.123.0.4 self permanent\n'],
      [
        'ip',
        'neigh replace 10.244.4.0 lladdr 02:00:00:00:00:04 dev twill.1 nud permanent\n' +
          'route add 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151 metric 717828\n',
      ],
    ]);
    expect(
      diff(
        vxlan,
        assumedWithout(vxlan, {
          routes: new Set(['10.244.99.0/24']),
          neighs: new Set(),
          fdbDsts: new Set(),
        }),
      ),
    ).toEqual([]);
  });
});
