// Unit tests of the daemon's health probe facts that read the node: subnet.env compared with the
// lease, for both families on a dual-stack node and the IPv6 pair alone on an IPv6-only one, and
// the peer gauges per family, and a pass's ops counted by kind and action (and as drift).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Op } from '../../src/dataplane/model.ts';
import type { PassReport } from '../../src/dataplane/pass-report.ts';
import { DaemonProbe } from '../../src/health/probe.ts';
import type { Lease } from '../../src/lease/types.ts';
import { parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
import { renderSubnetEnv, type SubnetEnv } from '../../src/subnetenv.ts';

const v4 = (t: string): Cidr => parseCidr(t, { strict: true }) as Cidr;
const v6 = (t: string): Cidr6 => parseCidr6(t, { strict: true }) as Cidr6;

const DUAL: SubnetEnv = {
  network: v4('10.244.0.0/16'),
  subnet: v4('10.244.3.0/24'),
  network6: v6('fd00:10:244::/56'),
  subnet6: v6('fd00:10:244:3::/64'),
  mtu: 1450,
  ipMasq: true,
};

function lease(o: { subnet: string; subnet6?: string; backend?: 'vxlan' | 'host-gw' }): Lease {
  return {
    key: o.subnet,
    subnet: v4(o.subnet),
    ...(o.subnet6 ? { subnet6: v6(o.subnet6) } : {}),
    attrs: {
      publicIp: '192.0.2.9',
      publicIpv6: null,
      backendType: o.backend ?? 'host-gw',
      backendData: null,
    },
    expiresAt: Date.now() + 3_600_000,
    version: '1',
  };
}

let dir = '';
beforeAll(async () => (dir = await mkdtemp(join(tmpdir(), 'twill-probe-'))));
afterAll(() => rm(dir, { recursive: true, force: true }));

async function problem(want: SubnetEnv, onDisk: SubnetEnv): Promise<string | undefined> {
  const path = join(dir, `subnet-${Math.random().toString(36).slice(2)}.env`);
  await writeFile(path, renderSubnetEnv(onDisk));
  const probe = new DaemonProbe({ version: 'test', resyncMs: 60_000 });
  const self = lease({ subnet: '10.244.3.0/24', subnet6: 'fd00:10:244:3::/64' });
  probe.started({
    keeper: { current: () => self, lost: () => undefined },
    subnetFile: path,
    env: want,
    underlay: 'lo',
  });
  return (await probe.facts()).subnetEnvProblem;
}

describe("the probe's subnet.env check", () => {
  it('finds nothing wrong when both families match', async () => {
    expect(await problem(DUAL, DUAL)).toBeUndefined();
  });

  it('reports a different IPv6 subnet with both values', async () => {
    const got = await problem(DUAL, { ...DUAL, subnet6: v6('fd00:10:244:7::/64') });
    expect(got).toContain('fd00:10:244:7::/64');
    expect(got).toContain('fd00:10:244:3::/64');
  });

  it('reports a different IPv6 network', async () => {
    expect(await problem(DUAL, { ...DUAL, network6: v6('fd00:99::/56') })).toContain(
      'fd00:99::/56',
    );
  });

  it('reports a subnet.env without the IPv6 pair on a dual-stack node, and the reverse', async () => {
    const v4only = { ...DUAL, network6: null, subnet6: null };
    expect(await problem(DUAL, v4only)).toMatch(/says IPv6 none in none, the lease says fd00/);
    expect(await problem(v4only, DUAL)).toMatch(/says IPv6 fd00:10:244:3::\/64 .* lease says/);
    expect(await problem(v4only, v4only)).toBeUndefined();
  });

  it('still reports a different IPv4 subnet', async () => {
    expect(await problem(DUAL, { ...DUAL, subnet: v4('10.244.9.0/24') })).toContain(
      '10.244.9.0/24',
    );
  });
});

describe("the probe's subnet.env check, IPv6 only", () => {
  const V6ONLY: SubnetEnv = { ...DUAL, network: null, subnet: null, mtu: 1430 };

  it('finds nothing wrong when the IPv6 pair and the MTU match and there is no IPv4 pair', async () => {
    expect(await problem(V6ONLY, V6ONLY)).toBeUndefined();
  });

  it('reports a different IPv6 subnet, and an MTU that differs, with both values', async () => {
    const moved = await problem(V6ONLY, { ...V6ONLY, subnet6: v6('fd00:10:244:7::/64') });
    expect(moved).toContain('says IPv6 fd00:10:244:7::/64 in fd00:10:244::/56');
    expect(moved).toContain('the lease says fd00:10:244:3::/64');
    expect(await problem(V6ONLY, { ...V6ONLY, mtu: 1450 })).toMatch(
      /says IPv6 fd00:10:244:3::\/64 in fd00:10:244::\/56 MTU 1450, the lease says fd00:10:244:3::\/64 in fd00:10:244::\/56 MTU 1430$/,
    );
  });

  it('reports an IPv4 pair on an IPv6-only node, and a missing one on a dual-stack node', async () => {
    expect(await problem(V6ONLY, { ...DUAL, mtu: 1430 })).toMatch(
      /says 10\.244\.3\.0\/24 MTU 1430, the lease says no IPv4 subnet MTU 1430/,
    );
    expect(await problem(DUAL, { ...V6ONLY, mtu: 1450 })).toMatch(
      /says no IPv4 subnet MTU 1450, the lease says 10\.244\.3\.0\/24/,
    );
  });
});

describe('peer gauges', () => {
  it('counts peers by backend, and those with an IPv6 subnet apart', async () => {
    const probe = new DaemonProbe({ version: 'test', resyncMs: 60_000 });
    probe.peers(
      [
        lease({ subnet: '10.244.1.0/24', subnet6: 'fd00:10:244:1::/64', backend: 'vxlan' }),
        lease({ subnet: '10.244.2.0/24', backend: 'vxlan' }),
        lease({ subnet: '10.244.4.0/24', subnet6: 'fd00:10:244:4::/64' }),
      ],
      new Map(),
    );
    const text = await probe.metrics.registry.metrics();
    const lines = text.split('\n').filter((l) => l.startsWith('twill_peers'));
    expect(lines.sort()).toStrictEqual([
      'twill_peers_ipv6{backend="host-gw"} 1',
      'twill_peers_ipv6{backend="vxlan"} 1',
      'twill_peers{backend="host-gw"} 1',
      'twill_peers{backend="vxlan"} 2',
    ]);
  });

  it('counts IPv6-only peers (no IPv4 subnet) in both gauges', async () => {
    const probe = new DaemonProbe({ version: 'test', resyncMs: 60_000 });
    const only6 = (n: number): Lease => ({
      ...lease({ subnet: `10.244.${n}.0/24`, subnet6: `fd00:10:244:${n}::/64`, backend: 'vxlan' }),
      key: `node-${n}`,
      subnet: null,
      attrs: {
        publicIp: null,
        publicIpv6: `fd00:123::${n}`,
        backendType: 'vxlan',
        backendData: null,
      },
    });
    probe.peers([only6(1), only6(2)], new Map());
    const text = await probe.metrics.registry.metrics();
    expect(text).toContain('twill_peers{backend="vxlan"} 2');
    expect(text).toContain('twill_peers_ipv6{backend="vxlan"} 2');
  });
});

describe('pass counters', () => {
  const route = (n: number, action: 'add' | 'delete'): Op => ({
    kind: 'route',
    action,
    phase: 'ip-post',
    route: { dst: `10.244.${n}.0/24`, via: `10.244.${n}.0`, dev: 'twill.1', onlink: true },
  });
  const neigh = (n: number): Op => ({
    kind: 'neigh',
    action: 'add',
    phase: 'ip-post',
    neigh: { dev: 'twill.1', ip: `10.244.${n}.0`, mac: '02:00:00:00:00:01' },
  });
  const report = (ops: Op[], drift: boolean): PassReport => ({
    at: Date.now(),
    kind: 'full',
    durationMs: 12,
    ops,
    failures: [],
    converged: false,
    drift,
    stages: { trigger: 'test', waitedMs: 0, observeMs: 1, applyMs: 1, spawns: 1 },
  });

  it('counts every op by kind and action, and drift by kind, over passes', async () => {
    const probe = new DaemonProbe({ version: 'test', resyncMs: 60_000 });
    probe.passDone(report([route(1, 'add'), route(2, 'add'), neigh(1), route(3, 'delete')], false));
    probe.passDone(report([route(4, 'add'), neigh(4), neigh(5)], true));
    const text = await probe.metrics.registry.metrics();
    const of = (prefix: string): string[] =>
      text
        .split('\n')
        .filter((l) => l.startsWith(prefix))
        .sort();
    expect(of('twill_dataplane_ops_total{')).toStrictEqual([
      'twill_dataplane_ops_total{kind="neigh",action="add"} 3',
      'twill_dataplane_ops_total{kind="route",action="add"} 3',
      'twill_dataplane_ops_total{kind="route",action="delete"} 1',
    ]);
    expect(of('twill_drift_repaired_total{')).toStrictEqual([
      'twill_drift_repaired_total{kind="fdb"} 0',
      'twill_drift_repaired_total{kind="link"} 0',
      'twill_drift_repaired_total{kind="masquerade"} 0',
      'twill_drift_repaired_total{kind="neigh"} 2',
      'twill_drift_repaired_total{kind="route"} 1',
    ]);
    expect(of('twill_reconcile_passes_total{result="changed"}')).toStrictEqual([
      'twill_reconcile_passes_total{result="changed"} 2',
    ]);
  });
});
