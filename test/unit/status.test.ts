// twill status, pure: the peer table says which of a peer's entries the
// kernel lacks, the diff is sorted into missing/extra/different, and the
// chains are compared rule by rule.
import { describe, expect, it } from 'vitest';
import { chainSpecs } from '../../src/dataplane/masq.ts';
import { buildStatus, chainDiff, type StatusInput } from '../../src/status/report.ts';
import type { ObservedState } from '../../src/dataplane/model.ts';
import { desiredState } from '../../src/dataplane/desired.ts';
import { backendInput, peerLease } from '../helpers/dataplane.ts';

const PEERS = [peerLease(1, { vxlan: true }), peerLease(4, { vxlan: true })];
const input = backendInput({ backend: 'vxlan', peers: PEERS });
const want = desiredState(input);
const specs = chainSpecs(want.masq);
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
    const small = {
      ...peerLease(5, { vxlan: true }),
      key: 'node-5',
      subnet: { ...peerLease(5, { vxlan: true }).subnet, prefix: 25 },
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
    expect(kube.peers[0]?.kernel).toBe('missing route, missing neigh, missing fdb');
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
      'route add 10.244.1.0/24 via 10.244.1.0 dev twill.1 onlink proto 151',
      'fdb append 02:00:00:00:00:04 dev twill.1 dst 10.123.0.4 self permanent',
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
