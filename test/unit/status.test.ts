// twill status, pure: the peer table says which of a peer's entries the
// kernel lacks, the diff is sorted into missing/extra/different, and the
// chains are compared rule by rule; on a dual-stack node, for each family.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { chainSpecs, chainSpecs6 } from '../../src/dataplane/masq.ts';
import { isOwnLease } from '../../src/status/inputs.ts';
import { chainDiff } from '../../src/status/masq.ts';
import { buildStatus, type StatusInput } from '../../src/status/report.ts';
import { renderStatus } from '../../src/status/text.ts';
import type { ObservedState, VxlanDevice } from '../../src/dataplane/model.ts';
import { desiredState } from '../../src/dataplane/desired.ts';
import type { Lease } from '../../src/lease/types.ts';
import { parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
import { backendInput, masq6Of, masqOf, NETWORK6, peerLease } from '../helpers/dataplane.ts';

const PEERS = [peerLease(1, { vxlan: true }), peerLease(4, { vxlan: true })];
const input = backendInput({ backend: 'vxlan', peers: PEERS });
const want = desiredState(input);
const specs = chainSpecs(masqOf(want));
const exact: ObservedState = {
  links: [
    {
      name: 'twill.1',
      vni: 1,
      local: '10.123.0.2',
      underlay: 'eth0',
      port: 8472,
      learning: false,
      gbp: false,
      mtu: 1450,
      mac: '02:00:00:00:00:03',
      up: true,
      addresses: ['10.244.3.0/32'],
    },
  ],
  routes: want.routes,
  neighs: want.neighs.map((n) => ({ ...n, permanent: true })),
  fdb: want.fdb.map((f) => ({ ...f, permanent: true })),
  postrouting: { jumps: [specs.postrouting.jump], rules: specs.postrouting.rules },
  forward: { jumps: [specs.forward.jump], rules: specs.forward.rules },
};
const status = (observed: ObservedState): ReturnType<typeof buildStatus> => {
  const i: StatusInput = {
    config: input.config,
    self: input.self,
    records: PEERS.map((l) => ({ key: l.key, ok: true as const, lease: l })),
    choice: input.choice,
    ipMasq: true,
    randomFully: true,
    observed,
    daemon: { running: true, detail: 'running' },
  };
  return buildStatus(i);
};

describe('twill status report', () => {
  it('in Kubernetes mode: accepts a peer podCIDR of another size, as the daemon does, and shows a lease that never expires', () => {
    const five = peerLease(5, { vxlan: true });
    const small = {
      ...five,
      key: 'node-5',
      subnet: five.subnet && { ...five.subnet, prefix: 25 },
    };
    const base: StatusInput = {
      config: input.config,
      self: { ...input.self, expiresAt: Number.POSITIVE_INFINITY },
      records: [{ key: 'node-5', ok: true, lease: small }],
      choice: input.choice,
      ipMasq: true,
      randomFully: true,
      observed: exact,
      daemon: { running: true, detail: 'running' },
    };
    expect(buildStatus(base).peers[0]?.kernel).toMatch(
      /^refused \(subnet-size\): subnet 10\.244\.5\.0\/25 is not a \/24/,
    );
    const kube = buildStatus({ ...base, anySubnetSize: true });
    expect(kube.peers[0]?.kernel).toBe('missing fdb, missing neigh, missing route');
    expect(kube.lease?.expiresAt).toBe('never');
  });

  it('says ok for every peer and in sync when the kernel matches', () => {
    const r = status(exact);
    expect(r.inSync).toBe(true);
    expect(r.peers.map((p) => [p.subnet, p.kernel])).toEqual([
      ['10.244.1.0/24', 'ok'],
      ['10.244.4.0/24', 'ok'],
    ]);
    expect(r.diff).toEqual({ missing: [], extra: [], different: [] });
    expect(r.masquerade).toEqual({ postrouting: 'ok', forward: 'ok' });
  });

  it('names what the kernel lacks per peer, and what it has extra', () => {
    const r = status({
      ...exact,
      routes: exact.routes.slice(1),
      fdb: exact.fdb.slice(0, 1),
      neighs: [
        ...exact.neighs,
        { dev: 'twill.1', ip: '10.244.9.0', mac: '02:00:00:00:00:09', permanent: true },
      ],
    });
    expect(r.peers.map((p) => p.kernel)).toEqual(['missing route', 'missing fdb']);
    expect(r.diff.missing).toEqual([
      'fdb append 02:00:00:00:00:04 dev twill.1 dst 10.123.0.4 self permanent',
      'route add 10.244.1.0/24 via 10.244.1.0 dev twill.1 onlink proto 151 metric 717825',
    ]);
    expect(r.diff.extra).toEqual(['neigh del 10.244.9.0 dev twill.1']);
    expect(r.inSync).toBe(false);
  });

  it('compares chains rule by rule: missing, duplicated, out of order, jumps', () => {
    const rules = specs.postrouting.rules ?? [];
    expect(
      chainDiff(specs.postrouting, { jumps: [specs.postrouting.jump], rules: rules.slice(1) })
        .missing,
    ).toEqual([`nat: ${rules[0]}`]);
    expect(
      chainDiff(specs.postrouting, {
        jumps: [specs.postrouting.jump],
        rules: [...rules, rules[2] ?? ''],
      }).extra,
    ).toEqual([`nat: ${rules[2]}`]);
    expect(
      chainDiff(specs.postrouting, {
        jumps: [specs.postrouting.jump],
        rules: [rules[1] ?? '', rules[0] ?? '', ...rules.slice(2)],
      }).different,
    ).toEqual(['nat TWILL-POSTRTG: rules out of order']);
    expect(chainDiff(specs.postrouting, { jumps: [], rules })).toEqual({
      missing: ['nat: -A POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG'],
      extra: [],
      different: [],
    });
    expect(chainDiff(specs.postrouting, { jumps: [], rules: null }).missing).toContain(
      'chain nat TWILL-POSTRTG',
    );
  });
});

// A dual-stack node (vxlan): our lease 10.244.3.0/24 + fd00:10:244:3::/64, peers 1 and 4 with
// both families, peer 5 IPv4 only.
describe('twill status report, dual-stack', () => {
  const v6 = (t: string): Cidr6 => parseCidr6(t, { strict: true }) as Cidr6;
  const config = parseNetConfig(
    '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}',
  );
  const dualPeer = (n: number): Lease => {
    const l = peerLease(n, { vxlan: true });
    return {
      ...l,
      key: `${l.key}&fd00:10:244:${n}::-64`,
      subnet6: v6(`fd00:10:244:${n}::/64`),
      attrs: {
        ...l.attrs,
        publicIpv6: `fd00:123::${n}`,
        backendData6: { vni: 1, vtepMac: `06:00:00:00:00:0${n}` },
      },
    };
  };
  const peers = [dualPeer(1), dualPeer(4), peerLease(5, { vxlan: true })];
  const base = backendInput({ backend: 'vxlan', peers });
  const self: Lease = {
    ...base.self,
    key: '10.244.3.0-24&fd00:10:244:3::-64',
    subnet6: v6('fd00:10:244:3::/64'),
    attrs: {
      ...base.self.attrs,
      publicIpv6: 'fd00:123::2',
      backendData6: { vni: 1, vtepMac: '06:00:00:00:00:03' },
    },
  };
  const choice = {
    ...base.choice,
    iface: { ...base.choice.iface, networks6: ['fd00:123::2/64'] },
    ifaceIp6: 'fd00:123::2',
    publicIp6: 'fd00:123::2',
  };
  const dual = { ...base, config, self, choice };
  const want6 = desiredState(dual);
  const s4 = chainSpecs(masqOf(want6));
  const s6 = chainSpecs6(want6.masq6 as NonNullable<typeof want6.masq6>);
  const link = (d: NonNullable<typeof want6.vxlan>): ObservedState['links'][number] => ({
    ...d,
    up: true,
    addresses: [d.address],
  });
  const exact6: ObservedState = {
    links: [link(want6.vxlan as VxlanDevice), link(want6.vxlan6 as VxlanDevice)],
    routes: want6.routes,
    neighs: want6.neighs.map((n) => ({ ...n, permanent: true })),
    fdb: want6.fdb.map((f) => ({ ...f, permanent: true })),
    postrouting: { jumps: [s4.postrouting.jump], rules: s4.postrouting.rules },
    forward: { jumps: [s4.forward.jump], rules: s4.forward.rules },
    postrouting6: { jumps: [s6.postrouting.jump], rules: s6.postrouting.rules },
    forward6: { jumps: [s6.forward.jump], rules: s6.forward.rules },
  };
  const status6 = (observed: ObservedState): ReturnType<typeof buildStatus> =>
    buildStatus({
      config,
      self,
      records: peers.map((l) => ({ key: l.key, ok: true as const, lease: l })),
      choice,
      ipMasq: true,
      randomFully: true,
      observed,
      daemon: { running: true, detail: 'running' },
    });

  it('shows both families of our lease, of each peer, and both tools’ chains, in sync', () => {
    const r = status6(exact6);
    expect(r.inSync).toBe(true);
    expect(r.lease).toMatchObject({
      subnet: '10.244.3.0/24',
      subnet6: 'fd00:10:244:3::/64',
      publicIpv6: 'fd00:123::2',
      vtepMac6: '06:00:00:00:00:03',
    });
    expect(r.peers.map((p) => [p.subnet, p.kernel, p.subnet6, p.kernel6])).toEqual([
      ['10.244.1.0/24', 'ok', 'fd00:10:244:1::/64', 'ok'],
      ['10.244.4.0/24', 'ok', 'fd00:10:244:4::/64', 'ok'],
      ['10.244.5.0/24', 'ok', null, null],
    ]);
    expect(r.masquerade6).toEqual({ postrouting: 'ok', forward: 'ok' });
    const text = renderStatus(r);
    expect(text).toContain(
      'lease IPv6: fd00:10:244:3::/64, public IPv6 fd00:123::2, VtepMAC 06:00:00:00:00:03',
    );
    expect(text).toMatch(/10\.244\.1\.0\/24 .* ok .* fd00:10:244:1::\/64 +fd00:123::1 .* ok/);
    expect(text).toContain('ip6tables:  TWILL-POSTRTG ok; TWILL-FWD ok');
  });

  it('an IPv6-only peer (no IPv4 subnet) has no IPv4 kernel verdict, only an IPv6 one', () => {
    const d = dualPeer(7);
    const only6: Lease = {
      ...d,
      key: 'node-7',
      subnet: null,
      attrs: { ...d.attrs, publicIp: null, backendData: null },
    };
    const want = desiredState({ ...dual, peers: [...peers, only6] });
    const seen: ObservedState = {
      ...exact6,
      routes: want.routes,
      neighs: want.neighs.map((n) => ({ ...n, permanent: true })),
      fdb: want.fdb.map((f) => ({ ...f, permanent: true })),
    };
    const r = buildStatus({
      config,
      self,
      records: [...peers, only6].map((l) => ({ key: l.key, ok: true as const, lease: l })),
      choice,
      ipMasq: true,
      randomFully: true,
      observed: seen,
      daemon: { running: true, detail: 'running' },
    });
    expect(r.inSync).toBe(true);
    expect(r.peers.at(-1)).toMatchObject({
      key: 'node-7',
      subnet: null,
      kernel: null,
      subnet6: 'fd00:10:244:7::/64',
      kernel6: 'ok',
    });
  });

  it("tells a peer's missing IPv6 entries apart from its IPv4 ones", () => {
    const gone = (dst: string): boolean => dst === 'fd00:10:244:4::/64';
    const r = status6({
      ...exact6,
      routes: exact6.routes.filter((x) => !gone(x.dst)),
      fdb: exact6.fdb.filter((f) => f.mac !== '06:00:00:00:00:01'),
    });
    expect(r.peers.map((p) => [p.kernel, p.kernel6])).toEqual([
      ['ok', 'missing fdb'],
      ['ok', 'missing route'],
      ['ok', null],
    ]);
    expect(r.inSync).toBe(false);
  });

  it('reports the ip6tables chains on their own, naming the tool', () => {
    const rules = s6.postrouting.rules ?? [];
    const r = status6({
      ...exact6,
      postrouting6: { jumps: [s6.postrouting.jump], rules: rules.slice(1) },
      forward6: { jumps: [], rules: s6.forward.rules },
    });
    expect(r.masquerade).toEqual({ postrouting: 'ok', forward: 'ok' });
    expect(r.masquerade6).toEqual({ postrouting: '1 missing', forward: '1 missing' });
    expect(r.diff.missing).toEqual([
      `ip6tables nat: ${rules[0]}`,
      'ip6tables filter: -A FORWARD -m comment --comment "twill forward" -j TWILL-FWD',
    ]);
  });

  it('has no IPv6 fields on an IPv4-only node', () => {
    const r = status(exact);
    expect(r.masquerade6).toBeNull();
    expect(r.lease).not.toHaveProperty('subnet6');
    expect(r.peers[0]).not.toHaveProperty('kernel6');
    expect(renderStatus(r)).not.toContain('IPv6');
  });
});

// An IPv6-only node (vxlan): our lease fd00:0:0:3::/64 alone, peers 1 and 4 IPv6 only, peer 5 a
// dual-stack node's lease (its IPv4 half ignored here), peer 6 IPv4 only (refused: nothing to route
// it by).
describe('twill status report, IPv6 only', () => {
  const peers = [
    peerLease(1, { vxlan: true, ipv6: true, ipv4: false }),
    peerLease(4, { vxlan: true, ipv6: true, ipv4: false }),
    peerLease(5, { vxlan: true, ipv6: true }),
    peerLease(6, { vxlan: true }),
  ];
  const only6 = backendInput({
    backend: 'vxlan',
    ipv6: true,
    ipv4: false,
    peers: peers.slice(0, 3),
  });
  const want6 = desiredState(only6);
  const s6 = chainSpecs6(masq6Of(want6));
  const exact6: ObservedState = {
    links: [
      {
        ...(want6.vxlan6 as VxlanDevice),
        up: true,
        addresses: [(want6.vxlan6 as VxlanDevice).address],
      },
    ],
    routes: want6.routes,
    neighs: want6.neighs.map((n) => ({ ...n, permanent: true })),
    fdb: want6.fdb.map((f) => ({ ...f, permanent: true })),
    // the IPv4 leftovers were looked for, and there are none
    postrouting: { jumps: [], rules: null },
    forward: { jumps: [], rules: null },
    postrouting6: { jumps: [s6.postrouting.jump], rules: s6.postrouting.rules },
    forward6: { jumps: [s6.forward.jump], rules: s6.forward.rules },
  };
  const status6 = (observed: ObservedState): ReturnType<typeof buildStatus> =>
    buildStatus({
      config: only6.config,
      self: only6.self,
      records: peers.map((l) => ({ key: l.key, ok: true as const, lease: l })),
      choice: only6.choice,
      ipMasq: true,
      randomFully: true,
      observed,
      daemon: { running: true, detail: 'running' },
      anySubnetSize: true,
    });

  it('keeps the IPv4 keys, null; shows the IPv6 half, each peer by its IPv6 subnet, in sync', () => {
    const r = status6(exact6);
    expect(r.inSync).toBe(true);
    expect(r.lease).toEqual({
      key: only6.self.key,
      subnet: null,
      publicIp: null,
      backend: 'vxlan',
      vtepMac: null,
      expiresAt: expect.any(String),
      subnet6: 'fd00:0:0:3::/64',
      publicIpv6: 'fd7b::2',
      vtepMac6: '02:00:00:06:00:03',
    });
    expect(r.peers.map((p) => [p.subnet, p.publicIp, p.kernel, p.subnet6, p.kernel6])).toEqual([
      [null, null, null, 'fd00:0:0:1::/64', 'ok'],
      [null, null, null, 'fd00:0:0:4::/64', 'ok'],
      [null, null, null, 'fd00:0:0:5::/64', 'ok'],
      [null, null, null, null, expect.stringMatching(/^refused \(/)],
    ]);
    expect(r.masquerade).toBeNull();
    expect(r.masquerade6).toEqual({ postrouting: 'ok', forward: 'ok' });
    const text = renderStatus(r);
    expect(text).toContain(`lease:      IPv4 off (${only6.self.key}), vxlan, expires `);
    expect(text).toContain(
      'lease IPv6: fd00:0:0:3::/64, public IPv6 fd7b::2, VtepMAC 02:00:00:06:00:03',
    );
    expect(text).toMatch(/^ {2}IPv6 subnet +public IPv6 +VtepMAC v6 +kernel v6$/m);
    expect(text).toMatch(/^ {2}fd00:0:0:1::\/64 +fd7b::1 +02:00:00:06:00:01 +ok$/m);
    expect(text).not.toMatch(/public IP\b(?!v6)/);
    expect(text).toContain('masquerade: IPv4 off');
    expect(text).toContain('ip6tables:  TWILL-POSTRTG ok; TWILL-FWD ok');
  });

  it("judges only the IPv6 entries: a peer's missing IPv6 route shows in kernel v6", () => {
    const r = status6({
      ...exact6,
      routes: exact6.routes.filter((x) => x.dst !== 'fd00:0:0:4::/64'),
    });
    expect(r.peers.map((p) => [p.kernel, p.kernel6])).toEqual([
      [null, 'ok'],
      [null, 'missing route'],
      [null, 'ok'],
      [null, expect.stringMatching(/^refused/)],
    ]);
    expect(r.inSync).toBe(false);
  });

  it('shows what an earlier IPv4 run left as extra: twill.1, IPv4 routes, iptables chains', () => {
    const v4 = backendInput({ backend: 'vxlan', peers: [peerLease(1, { vxlan: true })] });
    const old = desiredState(v4);
    const s4 = chainSpecs(masqOf(old));
    const r = status6({
      ...exact6,
      links: [
        ...exact6.links,
        {
          ...(old.vxlan as VxlanDevice),
          up: true,
          addresses: [(old.vxlan as VxlanDevice).address],
        },
      ],
      routes: [...exact6.routes, ...old.routes],
      postrouting: { jumps: [s4.postrouting.jump], rules: s4.postrouting.rules },
      forward: { jumps: [s4.forward.jump], rules: s4.forward.rules },
    });
    expect(r.inSync).toBe(false);
    expect(r.masquerade).toBeNull();
    expect(r.diff.missing).toEqual([]);
    expect(r.diff.extra).toEqual(
      expect.arrayContaining([
        expect.stringContaining('twill.1'),
        expect.stringMatching(/^route del 10\.244\.1\.0\/24/),
        'chain nat TWILL-POSTRTG (IPv4 is off)',
        'chain filter TWILL-FWD (IPv4 is off)',
        'nat: 1 jump(s) from POSTROUTING to TWILL-POSTRTG, want none',
      ]),
    );
    // the IPv6 peers are untouched by the leftovers
    expect(r.peers.slice(0, 3).map((p) => p.kernel6)).toEqual(['ok', 'ok', 'ok']);
  });

  it('a malformed record says so in the IPv6 column', () => {
    const r = buildStatus({
      config: only6.config,
      self: only6.self,
      records: [{ key: 'node-9', ok: false, reason: 'PublicIPv6 "x" is not an IPv6 address' }],
      choice: only6.choice,
      ipMasq: true,
      randomFully: true,
      observed: exact6,
      daemon: { running: true, detail: 'running' },
    });
    expect(r.peers).toEqual([
      {
        key: 'node-9',
        subnet: null,
        publicIp: null,
        vtepMac: null,
        kernel: null,
        subnet6: null,
        publicIpv6: null,
        vtepMac6: null,
        kernel6: 'refused (malformed): PublicIPv6 "x" is not an IPv6 address',
      },
    ]);
  });
});

describe("twill status: which lease is this node's", () => {
  const dual = backendInput({ backend: 'vxlan', ipv6: true, peers: [] });
  const only6 = backendInput({ backend: 'vxlan', ipv6: true, ipv4: false, peers: [] });
  const peer6 = peerLease(1, { vxlan: true, ipv6: true, ipv4: false });
  const env6 = {
    network: null,
    subnet: null,
    network6: parseCidr6(NETWORK6, { strict: true }) ?? null,
    subnet6: only6.self.subnet6 ?? null,
    mtu: 1430,
    ipMasq: true,
  };

  it('IPv6 only: by the IPv6 subnet subnet.env names, else by PublicIPv6, never by a null PublicIP', () => {
    const o = { ipv4: false, env: env6, choice: only6.choice };
    expect(isOwnLease(only6.self, o)).toBe(true);
    expect(isOwnLease(peer6, o)).toBe(false);
    const noEnv = { ipv4: false, env: undefined, choice: only6.choice };
    expect(isOwnLease(only6.self, noEnv)).toBe(true);
    // both PublicIPs are null (IPv4 is off): that is no match
    expect(peer6.attrs.publicIp).toBeNull();
    expect(isOwnLease(peer6, noEnv)).toBe(false);
  });

  it('IPv4 on: by the IPv4 subnet subnet.env names, else by PublicIP', () => {
    const noEnv = { ipv4: true, env: undefined, choice: dual.choice };
    expect(isOwnLease(dual.self, noEnv)).toBe(true);
    expect(isOwnLease(peerLease(1, { vxlan: true, ipv6: true }), noEnv)).toBe(false);
  });
});
