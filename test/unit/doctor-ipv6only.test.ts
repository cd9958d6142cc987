// The doctor on an IPv6-only node ("EnableIPv4": false): the IPv4 checks say n/a or look at the
// IPv6 equivalent (bridge-nf-call-ip6tables, ip6tables' backend and INPUT, the IPv6 device's
// MTU, subnet.env's IPv6 pair, our lease by PublicIPv6), the IPv6 checks run, and what an earlier
// IPv4 run left (routes, cni0 addresses, twill.<VNI>, the iptables chains) is reported as stale.
import { describe, expect, it } from 'vitest';
import { doctorExitCode, runChecks } from '../../src/doctor/checks.ts';
import { failed, got, type DoctorFacts, type LinkFact } from '../../src/doctor/facts.ts';
import { chainSpecs } from '../../src/dataplane/masq.ts';
import type { SubnetEnv } from '../../src/subnetenv.ts';
import {
  doctorCidr,
  doctorCidr6,
  healthyDualFacts,
  healthyFacts,
  healthyV6OnlyFacts,
  link,
  resultOf,
} from '../helpers/doctor.ts';
import { peerLease } from '../helpers/dataplane.ts';

/**
 * Runs every check on the healthy IPv6-only facts with `change` applied; expects only `check` to
 * differ, with `verdict`.
 */
function only(
  change: Partial<DoctorFacts>,
  check: string,
  verdict: 'warn' | 'fail',
): { detail: string; fix: string } {
  const results = runChecks({ ...healthyV6OnlyFacts(), ...change });
  expect(results.filter((r) => r.verdict !== 'ok').map((r) => r.check)).toEqual([check]);
  const r = resultOf(results, check);
  expect(r.verdict).toBe(verdict);
  expect(r.fix).not.toBe('');
  expect(doctorExitCode(results)).toBe(verdict === 'fail' ? 1 : 0);
  return r;
}

const withLinks = (change: (l: LinkFact) => LinkFact | undefined): Partial<DoctorFacts> => {
  const f = healthyV6OnlyFacts();
  if (!f.links.ok) throw new Error('fixture');
  return { links: got(f.links.value.flatMap((l) => change(l) ?? [])) };
};

const env = (): SubnetEnv => {
  const e = healthyV6OnlyFacts().subnetEnv;
  if (!e.ok || !e.value) throw new Error('fixture');
  return e.value;
};

describe('doctor checks, IPv6 only', () => {
  it('a healthy IPv6-only node: every check ok, the IPv6 ones run, the IPv4 ones n/a', () => {
    const results = runChecks(healthyV6OnlyFacts());
    expect(results.filter((r) => r.verdict !== 'ok')).toEqual([]);
    expect(results.map((r) => r.check)).toEqual([
      'ip-forward',
      'br-netfilter',
      'bridge-nf-call-ip6tables',
      'rp-filter',
      'iptables-backend',
      'vxlan-port',
      'mtu',
      'subnet-env',
      'cni0-subnet',
      'stale-routes',
      'foreign-overlay',
      'masq-leftovers',
      'ipv6-forward',
      'vxlan6-device',
      'ip6tables-chains',
      'ipv4-leftovers',
    ]);
    // net.ipv4.ip_forward is 0 in the fixture: it does not matter with IPv4 off
    expect(resultOf(results, 'ip-forward').detail).toMatch(/^n\/a: IPv4 is off/);
    expect(resultOf(results, 'rp-filter').detail).toMatch(/^n\/a: /);
    expect(resultOf(results, 'iptables-backend').detail).toBe(
      'ip6tables drives nf_tables; the legacy backend holds no rules',
    );
    expect(resultOf(results, 'vxlan-port').detail).toMatch(/^ip6tables: UDP port 8472/);
    expect(resultOf(results, 'subnet-env').detail).toBe(
      '/run/twill/subnet.env: FLANNEL_IPV6_NETWORK=fd00:10:244::/56 FLANNEL_IPV6_SUBNET=fd00:10:244:3::1/64 matches our lease fd00:10:244:3::-64 (PublicIPv6 fd00:123::2)',
    );
    expect(resultOf(results, 'mtu').detail).toBe(
      'consistent: eth0 1500, twill-v6.1 1430, FLANNEL_MTU 1430, cni0 and pods 1430',
    );
    expect(resultOf(results, 'cni0-subnet').detail).toBe(
      'cni0 carries no address outside fd00:10:244:3::/64',
    );
    expect(resultOf(results, 'stale-routes').detail).toBe(
      "1 route with protocol 151, each explained by a peer's lease",
    );
    expect(doctorExitCode(results)).toBe(0);
  });

  it('subnet.env alone tells an IPv6-only node when the store is unreachable', () => {
    const results = runChecks({
      ...healthyV6OnlyFacts(),
      store: failed('lease store unreachable'),
    });
    expect(resultOf(results, 'ip-forward').detail).toMatch(/^n\/a/);
    expect(results.map((r) => r.check)).toContain('ipv4-leftovers');
    expect(resultOf(results, 'subnet-env').verdict).toBe('warn');
  });

  it('bridge-nf-call-ip6tables 0 fails, naming ip6tables; the iptables one does not matter', () => {
    const r = only({ bridgeNf6: got('0') }, 'bridge-nf-call-ip6tables', 'fail');
    expect(r.fix).toContain('sysctl -w net.bridge.bridge-nf-call-ip6tables=1');
    expect(
      runChecks({ ...healthyV6OnlyFacts(), bridgeNf: got('0') }).every((x) => x.verdict === 'ok'),
    ).toBe(true);
  });

  it('strict rp_filter does not matter (it filters IPv4 only)', () => {
    const results = runChecks({
      ...healthyV6OnlyFacts(),
      rpFilter: new Map([
        ['all', '1'],
        ['eth0', '1'],
      ]),
    });
    expect(resultOf(results, 'rp-filter').verdict).toBe('ok');
  });

  it('ip6tables: rules in the backend not in use fail, an INPUT drop of vxlan fails, with ip6tables fixes', () => {
    const backend = only(
      { iptables: got({ backend: 'nf_tables', otherRules: got(2) }) },
      'iptables-backend',
      'fail',
    );
    expect(backend.detail).toContain(
      'ip6tables drives nf_tables, but the legacy backend holds 2 rules (ip6tables-legacy-save)',
    );
    expect(backend.fix).toContain('update-alternatives --set ip6tables /usr/sbin/ip6tables-nft');
    const port = only(
      { inputChain: got('-P INPUT DROP\n-A INPUT -p tcp --dport 22 -j ACCEPT\n') },
      'vxlan-port',
      'fail',
    );
    expect(port.detail).toContain('ip6tables: UDP port 8472');
    expect(port.fix).toMatch(/^ip6tables -I INPUT -p udp --dport 8472/);
  });

  it('subnet.env with an IPv4 pair, another IPv6 subnet, or no lease with our PublicIPv6 fails', () => {
    const e = env();
    expect(
      only(
        {
          subnetEnv: got({
            ...e,
            network: doctorCidr('10.244.0.0/16'),
            subnet: doctorCidr('10.244.3.1/24'),
          }),
        },
        'subnet-env',
        'fail',
      ).detail,
    ).toContain(
      'the network config turns IPv4 off ("EnableIPv4": false), so the file should have no FLANNEL_NETWORK/FLANNEL_SUBNET',
    );
    // cni0's gateway is then from an old subnet too
    const moved = runChecks({
      ...healthyV6OnlyFacts(),
      subnetEnv: got({ ...e, subnet6: doctorCidr6('fd00:10:244:9::1/64') }),
    });
    expect(resultOf(moved, 'subnet-env').detail).toContain(
      'but our lease (PublicIPv6 fd00:123::2) is fd00:10:244:3::/64',
    );
    expect(
      resultOf(
        runChecks({
          ...healthyV6OnlyFacts(),
          subnetEnv: got({ ...e, network6: doctorCidr6('fd00:99::/56') }),
        }),
        'subnet-env',
      ).detail,
    ).toContain('the network config says IPv6Network fd00:10:244::/56');
    const f = healthyV6OnlyFacts();
    if (!f.store.ok) throw new Error('fixture');
    const peers = f.store.value.leases.filter(
      (r) => r.ok && r.lease.attrs.publicIpv6 !== 'fd00:123::2',
    );
    const none = only({ store: got({ ...f.store.value, leases: peers }) }, 'subnet-env', 'fail');
    expect(none.detail).toContain('no lease in the store has PublicIPv6 fd00:123::2');
    expect(none.fix).toContain('--public-ipv6');
  });

  it("without the underlay's IPv6 address the lease comparison is skipped, not matched by a null PublicIP", () => {
    const r = runChecks({ ...healthyV6OnlyFacts(), underlay6: failed('no IPv6 address on eth0') });
    expect(resultOf(r, 'subnet-env')).toMatchObject({
      verdict: 'warn',
      detail: expect.stringContaining(
        'skipped: cannot tell our PublicIPv6 (no IPv6 address on eth0)',
      ),
      fix: 'pass the --iface or --public-ipv6 twill run uses',
    });
  });

  it("an IPv4 route with twill's protocol is stale, even for a peer's IPv4 subnet (IPv4 is off)", () => {
    const dualPeer = peerLease(1, { vxlan: true });
    const f = healthyV6OnlyFacts();
    if (!f.store.ok) throw new Error('fixture');
    // a peer that still publishes its IPv4 half: an IPv6-only node ignores it
    const leases = f.store.value.leases.map((r) =>
      r.ok && r.lease.attrs.publicIpv6 === 'fd00:123::1'
        ? {
            ...r,
            lease: {
              ...r.lease,
              subnet: dualPeer.subnet,
              attrs: { ...r.lease.attrs, publicIp: dualPeer.attrs.publicIp },
            },
          }
        : r,
    );
    const r = only(
      {
        store: got({ ...f.store.value, leases }),
        ownedRoutes: got([
          { dst: '10.244.1.0/24', via: '10.244.1.0', dev: 'twill.1', onlink: true },
        ]),
      },
      'stale-routes',
      'fail',
    );
    expect(r.detail).toContain(
      "1 route with twill's protocol 151 that no lease explains: 10.244.1.0/24 via 10.244.1.0 dev twill.1 (IPv4 is off: its IPv4 routes are leftovers of an earlier IPv4 run)",
    );
    expect(r.fix).toContain('ip route del 10.244.1.0/24 proto 151');
    expect(only({ ownedRoutes6: failed('ip: not found') }, 'stale-routes', 'warn').detail).toBe(
      'no IPv4 route with protocol 151 (IPv4 is off); could not list the IPv6 ones: ip: not found',
    );
  });

  it("an IPv6 route no peer's IPv6 subnet explains is stale", () => {
    const r = only(
      {
        ownedRoutes6: got([
          { dst: 'fd00:10:244:1::/64', via: 'fd00:10:244:1::', dev: 'twill-v6.1', onlink: true },
          { dst: 'fd00:10:244:3::/64', via: 'fd00:10:244:3::', dev: 'twill-v6.1', onlink: true },
        ]),
      },
      'stale-routes',
      'fail',
    );
    expect(r.detail).toContain('fd00:10:244:3::/64 via fd00:10:244:3:: dev twill-v6.1');
    expect(r.detail).not.toContain('IPv4 is off');
  });

  it('cni0 with an IPv4 address (an earlier IPv4 run) or an old IPv6 subnet fails', () => {
    const v4 = only(
      withLinks((l) => (l.name === 'cni0' ? { ...l, addresses: ['10.244.3.1/24'] } : l)),
      'cni0-subnet',
      'fail',
    );
    expect(v4.detail).toContain('10.244.3.1/24 from an earlier IPv4 run (IPv4 is off now)');
    expect(v4.fix).toContain('ip addr del 10.244.3.1/24 dev cni0');
    const old = only(
      withLinks((l) =>
        l.name === 'cni0'
          ? { ...l, addresses6: [...(l.addresses6 ?? []), 'fd00:10:244:7::1/64'] }
          : l,
      ),
      'cni0-subnet',
      'fail',
    );
    expect(old.detail).toContain(
      "fd00:10:244:7::1/64 from an old subnet (the node's subnet is now fd00:10:244:3::/64)",
    );
    expect(old.fix).toContain('ip addr del fd00:10:244:7::1/64 dev cni0');
  });

  it('twill.1 and twill’s iptables chains left by an IPv4 run warn, with how to remove them', () => {
    const specs = chainSpecs({
      ipMasq: true,
      network: doctorCidr('10.244.0.0/16'),
      subnet: doctorCidr('10.244.3.0/24'),
      randomFully: true,
    });
    const r = only(
      {
        links: got([
          ...(healthyV6OnlyFacts().links as { ok: true; value: LinkFact[] }).value,
          // the IPv4 device's MTU (1450) is an IPv4 run's: the mtu check does not compare it
          link('twill.1', { kind: 'vxlan', mtu: 1450, vni: 1, port: 8472 }),
        ]),
        ip4Chains: got({
          postrouting: { jumps: [specs.postrouting.jump], rules: specs.postrouting.rules },
          forward: { jumps: [], rules: specs.forward.rules },
        }),
      },
      'ipv4-leftovers',
      'warn',
    );
    expect(r.detail).toBe(
      'IPv4 is off (IPv6 only), but an earlier IPv4 run left device twill.1 (vxlan VNI 1); 1 jump from POSTROUTING to TWILL-POSTRTG; chain TWILL-POSTRTG in nat (6 rules); chain TWILL-FWD in filter (2 rules)',
    );
    expect(r.fix).toContain('ip link del twill.1');
    expect(r.fix).toContain(
      'iptables -t nat -D POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG',
    );
    expect(r.fix).toContain('iptables -t filter -F TWILL-FWD && iptables -t filter -X TWILL-FWD');
    expect(
      only({ ip4Chains: failed('iptables: not found') }, 'ipv4-leftovers', 'warn').detail,
    ).toBe('could not look everywhere: iptables: not found');
  });

  it('the IPv6 device with the IPv4 figure fails mtu; a missing one fails vxlan6-device', () => {
    expect(
      only(
        withLinks((l) => (l.name === 'twill-v6.1' ? { ...l, mtu: 1450 } : l)),
        'mtu',
        'fail',
      ).detail,
    ).toContain('twill-v6.1 has MTU 1450, expected 1430 (eth0 MTU 1500 − 70)');
    expect(
      only(
        withLinks((l) => (l.name === 'twill-v6.1' ? undefined : l)),
        'vxlan6-device',
        'fail',
      ).detail,
    ).toContain('twill-v6.1 does not exist');
  });

  it("flannel's IPv6 leftovers fail foreign-overlay: flannel-v6.1, its ip6tables chain, a cni0 address outside the IPv6 network", () => {
    const r = only(
      {
        ...withLinks((l) =>
          l.name === 'cni0' ? { ...l, addresses6: [...(l.addresses6 ?? []), 'fd00:42::1/64'] } : l,
        ),
        foreignChains: got([
          { ipv6: true, table: 'nat', chain: 'FLANNEL-POSTRTG', rules: 3, jumps: 1 },
        ]),
      },
      'foreign-overlay',
      'fail',
    );
    expect(r.detail).toContain('chain FLANNEL-POSTRTG in ip6tables nat (3 rules, 1 jumps to it)');
    expect(r.detail).toContain(
      'cni0 address fd00:42::1/64 outside our IPv6 network fd00:10:244::/56',
    );
    expect(r.fix).toContain(
      'ip6tables -t nat -F FLANNEL-POSTRTG && ip6tables -t nat -X FLANNEL-POSTRTG',
    );
    const dev = only(
      {
        links: got([
          ...(healthyV6OnlyFacts().links as { ok: true; value: LinkFact[] }).value,
          link('flannel-v6.1', { kind: 'vxlan', vni: 1, port: 8472 }),
        ]),
      },
      'foreign-overlay',
      'fail',
    );
    expect(dev.detail).toContain('device flannel-v6.1 (vxlan VNI 1 port 8472');
  });

  it('IPv6 forwarding off fails, with a fix that does not suggest turning IPv6 off', () => {
    expect(only({ ipv6Forward: got('0') }, 'ipv6-forward', 'fail').fix).toContain(
      'sysctl -w net.ipv6.conf.all.forwarding=1',
    );
    expect(only({ ipv6Forward: got(undefined) }, 'ipv6-forward', 'fail').fix).toBe(
      'enable IPv6 on the node (remove ipv6.disable=1 and reboot): the network config is IPv6 only',
    );
  });

  it('a dual-stack or IPv4-only node runs neither ipv4-leftovers nor the n/a forms', () => {
    for (const f of [healthyFacts(), healthyDualFacts()]) {
      const results = runChecks(f);
      expect(results.map((r) => r.check)).not.toContain('ipv4-leftovers');
      expect(results.map((r) => r.check)).toContain('bridge-nf-call-iptables');
      expect(resultOf(results, 'ip-forward').detail).toBe('net.ipv4.ip_forward is 1');
    }
  });
});
