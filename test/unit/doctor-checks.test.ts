// Each doctor check's verdict from facts: a healthy vxlan node passes every
// check, and each broken fact turns exactly its check to fail (or warn),
// naming the condition, with a fix. Also the cases the kernel tests cannot
// make in a namespace: br_netfilter not loaded (the module is host-global).
import { describe, expect, it } from 'vitest';
import { doctorExitCode, runChecks } from '../../src/doctor/checks.ts';
import { failed, got, type DoctorFacts } from '../../src/doctor/facts.ts';
import type { LinkFact } from '../../src/doctor/facts.ts';
import type { SubnetEnv } from '../../src/subnetenv.ts';
import {
  HEALTHY_LINKS,
  healthyDualFacts,
  healthyFacts,
  link,
  resultOf,
  storeFact,
  doctorCidr,
  doctorCidr6,
} from '../helpers/doctor.ts';
import { peerLease } from '../helpers/dataplane.ts';

function verdicts(f: DoctorFacts): Record<string, string> {
  return Object.fromEntries(runChecks(f).map((r) => [r.check, r.verdict]));
}

/**
 * Runs every check on the healthy facts with `change` applied; expects only `check` to differ, with
 * `verdict`.
 */
function only(
  change: Partial<DoctorFacts>,
  check: string,
  verdict: 'warn' | 'fail',
): { detail: string; fix: string } {
  const results = runChecks({ ...healthyFacts(), ...change });
  const notOk = results.filter((r) => r.verdict !== 'ok').map((r) => r.check);
  expect(notOk).toEqual([check]);
  const r = resultOf(results, check);
  expect(r.verdict).toBe(verdict);
  expect(r.fix).not.toBe('');
  expect(doctorExitCode(results)).toBe(verdict === 'fail' ? 1 : 0);
  return r;
}

const withLinks = (
  change: (l: typeof HEALTHY_LINKS) => typeof HEALTHY_LINKS,
): Partial<DoctorFacts> => ({ links: got(change(HEALTHY_LINKS)) });

describe('doctor checks', () => {
  it('a healthy node: every check ok, exit 0', () => {
    const results = runChecks(healthyFacts());
    expect(results.filter((r) => r.verdict !== 'ok')).toEqual([]);
    expect(results.map((r) => r.check)).toEqual([
      'ip-forward',
      'br-netfilter',
      'bridge-nf-call-iptables',
      'rp-filter',
      'iptables-backend',
      'vxlan-port',
      'mtu',
      'subnet-env',
      'cni0-subnet',
      'stale-routes',
      'foreign-overlay',
      'masq-leftovers',
    ]);
    expect(doctorExitCode(results)).toBe(0);
  });

  it('ip_forward 0 fails', () => {
    expect(only({ ipForward: got('0') }, 'ip-forward', 'fail').fix).toContain(
      'sysctl -w net.ipv4.ip_forward=1',
    );
  });

  it('br_netfilter not loaded fails (the module is host-global: not testable in a namespace), bridge-nf-call-iptables then warns', () => {
    const results = runChecks({ ...healthyFacts(), bridgeNf: got(undefined) });
    expect(resultOf(results, 'br-netfilter')).toMatchObject({
      verdict: 'fail',
      fix: expect.stringContaining('modprobe br_netfilter'),
    });
    expect(resultOf(results, 'bridge-nf-call-iptables').verdict).toBe('warn');
    expect(doctorExitCode(results)).toBe(1);
  });

  it('bridge-nf-call-iptables 0 fails', () => {
    expect(only({ bridgeNf: got('0') }, 'bridge-nf-call-iptables', 'fail').detail).toContain(
      'is 0',
    );
  });

  it('rp_filter strict on all, the underlay, twill.1 or cni0 fails, naming which; loose (2) passes; default=1 warns', () => {
    for (const dev of ['all', 'eth0', 'twill.1', 'cni0']) {
      const r = only(
        { rpFilter: new Map([...healthyFacts().rpFilter, [dev, '1']]) },
        'rp-filter',
        'fail',
      );
      expect(r.detail).toContain(`${dev}=1`);
      expect(r.fix).toContain(`net.ipv4.conf.${dev}.rp_filter=2`);
    }
    expect(
      verdicts({
        ...healthyFacts(),
        rpFilter: new Map([...healthyFacts().rpFilter, ['all', '2'], ['eth0', '2']]),
      })['rp-filter'],
    ).toBe('ok');
    expect(
      only(
        { rpFilter: new Map([...healthyFacts().rpFilter, ['default', '1']]) },
        'rp-filter',
        'warn',
      ).detail,
    ).toContain('default');
    // host-gw: the vxlan device does not matter
    const hostGw = {
      ...healthyFacts(),
      store: storeFact({ backend: 'host-gw' }),
      links: got(HEALTHY_LINKS.filter((l) => l.name !== 'twill.1')),
      subnetEnv: got({
        network: doctorCidr('10.244.0.0/16'),
        subnet: doctorCidr('10.244.3.1/24'),
        mtu: 1500,
        ipMasq: true,
      }),
    };
    expect(
      verdicts({ ...hostGw, rpFilter: new Map([...hostGw.rpFilter, ['twill.1', '1']]) })[
        'rp-filter'
      ],
    ).toBe('ok');
  });

  it('rules in the iptables backend not in use fail; either direction; an unreadable other backend warns', () => {
    expect(
      only(
        { iptables: got({ backend: 'nf_tables', otherRules: got(3) }) },
        'iptables-backend',
        'fail',
      ).detail,
    ).toContain('legacy backend holds 3 rules');
    expect(
      only({ iptables: got({ backend: 'legacy', otherRules: got(1) }) }, 'iptables-backend', 'fail')
        .detail,
    ).toContain('iptables-nft-save');
    only(
      {
        iptables: got({
          backend: 'nf_tables',
          otherRules: failed('iptables-legacy-save: not installed'),
        }),
      },
      'iptables-backend',
      'warn',
    );
  });

  it('MTU: twill.1 not underlay − 50, FLANNEL_MTU off, cni0 or a pod veth above FLANNEL_MTU all fail', () => {
    const dev = only(
      withLinks((ls) => ls.map((l) => (l.name === 'twill.1' ? { ...l, mtu: 1400 } : l))),
      'mtu',
      'fail',
    );
    expect(dev.detail).toContain('twill.1 has MTU 1400, expected 1450 (eth0 MTU 1500 − 50)');
    const env = healthyFacts().subnetEnv;
    if (!env.ok || !env.value) throw new Error('fixture');
    expect(only({ subnetEnv: got({ ...env.value, mtu: 1500 }) }, 'mtu', 'fail').detail).toContain(
      'FLANNEL_MTU is 1500',
    );
    const veth = only(
      withLinks((ls) => ls.map((l) => (l.kind === 'veth' ? { ...l, mtu: 1500 } : l))),
      'mtu',
      'fail',
    );
    expect(veth.detail).toContain('twv0123456789ab has MTU 1500, above FLANNEL_MTU 1450');
    expect(
      only(
        withLinks((ls) => ls.map((l) => (l.name === 'cni0' ? { ...l, mtu: 9000 } : l))),
        'mtu',
        'fail',
      ).detail,
    ).toContain('cni0 has MTU 9000');
    expect(
      only(
        withLinks((ls) => ls.map((l) => (l.kind === 'veth' ? { ...l, mtu: 1400 } : l))),
        'mtu',
        'warn',
      ).detail,
    ).toContain('below');
  });

  it('MTU: Backend.MTU sets the device MTU, and one above the underlay fails', () => {
    const f = { ...healthyFacts(), store: storeFact({ backendExtra: ',"MTU":1400' }) };
    expect(resultOf(runChecks(f), 'mtu').detail).toContain(
      'twill.1 has MTU 1450, expected 1350 (Backend.MTU 1400 − 50)',
    );
    expect(
      resultOf(
        runChecks({ ...healthyFacts(), store: storeFact({ backendExtra: ',"MTU":9000' }) }),
        'mtu',
      ).detail,
    ).toContain("Backend.MTU 9000 is above eth0's MTU 1500");
  });

  it('subnet.env: missing, another subnet, another network, no lease for our IP: fail; store unreachable: warn "skipped"', () => {
    only({ subnetEnv: got(undefined) }, 'subnet-env', 'fail');
    const env = healthyFacts().subnetEnv;
    if (!env.ok || !env.value) throw new Error('fixture');
    // cni0's 10.244.3.1 is now from an old subnet too: two checks fail
    const moved = runChecks({
      ...healthyFacts(),
      subnetEnv: got({ ...env.value, subnet: doctorCidr('10.244.9.1/24') }),
    });
    expect(resultOf(moved, 'subnet-env')).toMatchObject({
      verdict: 'fail',
      detail: expect.stringContaining('our lease (PublicIP 10.123.0.2) is 10.244.3.0/24'),
    });
    const net = runChecks({
      ...healthyFacts(),
      subnetEnv: got({ ...env.value, network: doctorCidr('10.245.0.0/16') }),
    });
    expect(resultOf(net, 'subnet-env').detail).toContain(
      'network config says Network 10.244.0.0/16',
    );
    const peer = peerLease(1, { vxlan: true });
    expect(
      only(
        { store: storeFact({ leases: [{ key: peer.key, ok: true, lease: peer }] }) },
        'subnet-env',
        'fail',
      ).detail,
    ).toContain('no lease in the store has PublicIP 10.123.0.2');
    const skipped = runChecks({
      ...healthyFacts(),
      store: failed('etcd unreachable (connect ECONNREFUSED)'),
    });
    expect(resultOf(skipped, 'subnet-env')).toMatchObject({
      verdict: 'warn',
      detail: expect.stringContaining('skipped: etcd unreachable (connect ECONNREFUSED)'),
    });
    expect(resultOf(skipped, 'stale-routes')).toMatchObject({
      verdict: 'warn',
      detail: 'skipped: etcd unreachable (connect ECONNREFUSED)',
    });
    expect(doctorExitCode(skipped)).toBe(0);
  });

  it('cni0 with an address from an old subnet fails; no cni0 is fine', () => {
    const r = only(
      withLinks((ls) =>
        ls.map((l) =>
          l.name === 'cni0' ? { ...l, addresses: ['10.244.3.1/24', '10.244.7.1/24'] } : l,
        ),
      ),
      'cni0-subnet',
      'fail',
    );
    expect(r.detail).toContain('10.244.7.1/24 from an old subnet');
    expect(r.fix).toContain('ip addr del 10.244.7.1/24 dev cni0');
    expect(
      verdicts({
        ...healthyFacts(),
        ...withLinks((ls) => ls.filter((l) => l.name !== 'cni0' && l.kind !== 'veth')),
      })['cni0-subnet'],
    ).toBe('ok');
  });

  it('a proto 151 route no lease explains fails (our own subnet does not explain one)', () => {
    const routes = [
      { dst: '10.244.1.0/24', via: '10.244.1.0', dev: 'twill.1', onlink: true },
      { dst: '10.244.3.0/24', via: '10.244.3.0', dev: 'twill.1', onlink: true },
      { dst: '10.244.99.0/24', via: '10.244.99.0', dev: 'twill.1', onlink: true },
    ];
    const r = only({ ownedRoutes: got(routes) }, 'stale-routes', 'fail');
    expect(r.detail).toContain('2 routes');
    expect(r.detail).toContain('10.244.99.0/24 via 10.244.99.0 dev twill.1');
    expect(r.fix).toContain('ip route del 10.244.3.0/24 proto 151');
  });

  it('flannel.1, FLANNEL-* chains, a cni0 address outside the network: foreign-overlay fails naming each', () => {
    const dev = only(
      withLinks((ls) => [...ls, link('flannel.1', { kind: 'vxlan', vni: 1, port: 8472 })]),
      'foreign-overlay',
      'fail',
    );
    expect(dev.detail).toContain('device flannel.1 (vxlan VNI 1 port 8472');
    expect(dev.fix).toContain('ip link del flannel.1');
    const chains = only(
      {
        foreignChains: got([
          { table: 'nat', chain: 'FLANNEL-POSTRTG', rules: 4, jumps: 1 },
          { table: 'filter', chain: 'FLANNEL-FWD', rules: 2, jumps: 1 },
        ]),
      },
      'foreign-overlay',
      'fail',
    );
    expect(chains.detail).toContain(
      'chain FLANNEL-POSTRTG in nat (4 rules, 1 jumps to it); chain FLANNEL-FWD in filter',
    );
    expect(chains.fix).toContain(
      'iptables -t nat -F FLANNEL-POSTRTG && iptables -t nat -X FLANNEL-POSTRTG',
    );
    const addr = only(
      withLinks((ls) =>
        ls.map((l) =>
          l.name === 'cni0' ? { ...l, addresses: [...l.addresses, '10.42.0.1/24'] } : l,
        ),
      ),
      'foreign-overlay',
      'fail',
    );
    expect(addr.detail).toContain('cni0 address 10.42.0.1/24 outside our network 10.244.0.0/16');
  });

  it('failed reads warn instead of failing', () => {
    const results = runChecks({
      ...healthyFacts(),
      ipForward: failed('EACCES'),
      inputChain: failed('iptables: not found'),
      links: failed('ip: not found'),
      ownedRoutes: failed('ip: not found'),
    });
    for (const check of [
      'ip-forward',
      'vxlan-port',
      'mtu',
      'cni0-subnet',
      'stale-routes',
      'foreign-overlay',
    ])
      expect(resultOf(results, check).verdict).toBe('warn');
    expect(doctorExitCode(results)).toBe(0);
  });
});

describe('doctor checks, dual-stack', () => {
  /** Like `only`, over the healthy dual-stack facts. */
  function only6(
    change: Partial<DoctorFacts>,
    check: string,
    verdict: 'warn' | 'fail',
  ): { detail: string; fix: string } {
    const results = runChecks({ ...healthyDualFacts(), ...change });
    expect(results.filter((r) => r.verdict !== 'ok').map((r) => r.check)).toEqual([check]);
    const r = resultOf(results, check);
    expect(r.verdict).toBe(verdict);
    expect(r.fix).not.toBe('');
    return r;
  }
  const links6 = (change: (l: LinkFact) => LinkFact | undefined): Partial<DoctorFacts> => {
    const f = healthyDualFacts();
    if (!f.links.ok) throw new Error('fixture');
    return { links: got(f.links.value.flatMap((l) => change(l) ?? [])) };
  };
  const env6 = (): NonNullable<SubnetEnv> => {
    const e = healthyDualFacts().subnetEnv;
    if (!e.ok || !e.value) throw new Error('fixture');
    return e.value;
  };

  it('a healthy dual-stack node: every check ok, the IPv6 ones after the others', () => {
    const results = runChecks(healthyDualFacts());
    expect(results.filter((r) => r.verdict !== 'ok')).toEqual([]);
    expect(results.map((r) => r.check).slice(-3)).toEqual([
      'ipv6-forward',
      'vxlan6-device',
      'ip6tables-chains',
    ]);
    expect(resultOf(results, 'subnet-env').detail).toContain(
      'FLANNEL_IPV6_NETWORK=fd00:10:244::/56 FLANNEL_IPV6_SUBNET=fd00:10:244:3::1/64',
    );
    expect(resultOf(results, 'mtu').detail).toContain('twill-v6.1 1430');
  });

  it('an IPv4-only node runs no IPv6 check', () => {
    expect(runChecks(healthyFacts()).map((r) => r.check)).not.toContain('ipv6-forward');
  });

  it('IPv6 forwarding off fails; no IPv6 sysctls at all fails too', () => {
    expect(only6({ ipv6Forward: got('0') }, 'ipv6-forward', 'fail').fix).toContain(
      'sysctl -w net.ipv6.conf.all.forwarding=1',
    );
    expect(only6({ ipv6Forward: got(undefined) }, 'ipv6-forward', 'fail').detail).toContain(
      'no IPv6 sysctls',
    );
  });

  it('subnet.env: a missing, foreign or stale IPv6 pair fails', () => {
    const e = env6();
    expect(
      only6({ subnetEnv: got({ ...e, network6: null, subnet6: null }) }, 'subnet-env', 'fail')
        .detail,
    ).toContain('no FLANNEL_IPV6_NETWORK/FLANNEL_IPV6_SUBNET');
    expect(
      only6(
        { subnetEnv: got({ ...e, subnet6: doctorCidr6('fd00:10:244:9::/64') }) },
        'subnet-env',
        'fail',
      ).detail,
    ).toContain("our lease's IPv6 subnet is fd00:10:244:3::/64, not fd00:10:244:9::/64");
    // ip6tables chains are checked against subnet.env's subnet: they fail with it
    const moved = runChecks({
      ...healthyDualFacts(),
      subnetEnv: got({ ...e, network6: doctorCidr6('fd00:99::/56') }),
    });
    expect(resultOf(moved, 'subnet-env').detail).toContain(
      'the network config says IPv6Network fd00:10:244::/56',
    );
  });

  it('subnet.env: a lease without an IPv6 subnet fails', () => {
    const f = healthyDualFacts();
    if (!f.store.ok) throw new Error('fixture');
    const leases = f.store.value.leases.map((r) =>
      r.ok && r.lease.attrs.publicIp === '10.123.0.2'
        ? { ...r, lease: { ...r.lease, subnet6: null } }
        : r,
    );
    expect(
      only6({ store: got({ ...f.store.value, leases }) }, 'subnet-env', 'fail').detail,
    ).toContain('has no IPv6 subnet');
  });

  it('subnet.env with an IPv6 pair while the config has IPv6 off fails', () => {
    const f = healthyFacts();
    const env = f.subnetEnv.ok ? f.subnetEnv.value : undefined;
    if (!env) throw new Error('fixture');
    const withV6 = runChecks({
      ...f,
      subnetEnv: got({
        ...env,
        network6: doctorCidr6('fd00:10:244::/56'),
        subnet6: doctorCidr6('fd00:10:244:3::/64'),
      }),
      store: storeFact(),
    });
    expect(resultOf(withV6, 'subnet-env')).toMatchObject({
      verdict: 'fail',
      detail: expect.stringContaining('does not enable IPv6'),
    });
  });

  it('the IPv6 device with the wrong MTU fails the mtu check (underlay − 70)', () => {
    const r = only6(
      links6((l) => (l.name === 'twill-v6.1' ? { ...l, mtu: 1450 } : l)),
      'mtu',
      'fail',
    );
    expect(r.detail).toContain('twill-v6.1 has MTU 1450, expected 1430 (eth0 MTU 1500 − 70)');
  });

  it('the IPv6 device missing, or with another local address, fails', () => {
    expect(
      only6(
        links6((l) => (l.name === 'twill-v6.1' ? undefined : l)),
        'vxlan6-device',
        'fail',
      ).detail,
    ).toContain('twill-v6.1 does not exist');
    expect(
      only6(
        links6((l) => (l.name === 'twill-v6.1' ? { ...l, local: 'fd00:123::99' } : l)),
        'vxlan6-device',
        'fail',
      ).detail,
    ).toContain("local fd00:123::99, the underlay's IPv6 address is fd00:123::2");
    expect(
      only6(
        { underlay6: failed('failed to find IPv6 address for interface eth0') },
        'vxlan6-device',
        'warn',
      ).detail,
    ).toContain('failed to find IPv6 address for interface eth0');
  });

  it('host-gw has no IPv6 device to check', () => {
    const f = healthyDualFacts();
    if (!f.store.ok) throw new Error('fixture');
    const config = { ...f.store.value.config, backend: { type: 'host-gw' as const } };
    const r = runChecks({ ...f, store: got({ ...f.store.value, config }) });
    expect(resultOf(r, 'vxlan6-device')).toMatchObject({ verdict: 'ok' });
  });

  it("stale-routes: a dual-stack node's IPv6 proto 151 routes are explained by peers' IPv6 subnets", () => {
    expect(resultOf(runChecks(healthyDualFacts()), 'stale-routes').detail).toBe(
      "2 routes with protocol 151, each explained by a peer's lease",
    );
    const routes6 = [
      { dst: 'fd00:10:244:1::/64', via: 'fd00:10:244:1::', dev: 'twill-v6.1', onlink: true },
      { dst: 'fd00:10:244:9::/64', via: 'fd00:123::9', dev: 'eth0', onlink: false },
    ];
    const r = only6({ ownedRoutes6: got(routes6) }, 'stale-routes', 'fail');
    expect(r.detail).toContain('1 route with');
    expect(r.detail).toContain('fd00:10:244:9::/64 via fd00:123::9 dev eth0');
    expect(r.fix).toContain('ip route del fd00:10:244:9::/64 proto 151');
    expect(
      only6({ ownedRoutes6: failed('ip: not found') }, 'stale-routes', 'warn').detail,
    ).toContain('could not list the IPv6 ones: ip: not found');
  });

  it('ip6tables: a jump that is not the one twill writes fails, as the daemon would replace it', () => {
    const f = healthyDualFacts();
    if (!f.ip6Chains?.ok) throw new Error('fixture');
    const { forward } = f.ip6Chains.value;
    expect(
      only6(
        {
          ip6Chains: got({
            ...f.ip6Chains.value,
            forward: { ...forward, jumps: ['-j TWILL-FWD'] },
          }),
        },
        'ip6tables-chains',
        'fail',
      ).detail,
    ).toContain(
      'the jump from FORWARD to TWILL-FWD is `-j TWILL-FWD`, not twill\'s `-m comment --comment "twill forward" -j TWILL-FWD`',
    );
  });

  it('ip6tables: a missing chain, a missing rule, a missing jump or rules out of order fail', () => {
    const f = healthyDualFacts();
    if (!f.ip6Chains?.ok) throw new Error('fixture');
    const { postrouting, forward } = f.ip6Chains.value;
    const rules = postrouting.rules ?? [];
    const cases: [Partial<typeof f.ip6Chains.value>, string][] = [
      [{ forward: { jumps: [], rules: null } }, 'no chain TWILL-FWD in the filter table'],
      [{ postrouting: { ...postrouting, rules: rules.slice(1) } }, 'TWILL-POSTRTG lacks'],
      [{ forward: { ...forward, jumps: [] } }, '0 jumps from FORWARD to TWILL-FWD'],
      [
        {
          postrouting: {
            ...postrouting,
            rules: [rules[1] ?? '', rules[0] ?? '', ...rules.slice(2)],
          },
        },
        "TWILL-POSTRTG's rules are not in twill's order",
      ],
    ];
    for (const [change, text] of cases)
      expect(
        only6({ ip6Chains: got({ ...f.ip6Chains.value, ...change }) }, 'ip6tables-chains', 'fail')
          .detail,
      ).toContain(text);
    expect(
      only6({ ip6Chains: failed('ip6tables: not found') }, 'ip6tables-chains', 'warn').detail,
    ).toContain('ip6tables: not found');
  });
});
