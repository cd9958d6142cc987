// The dataplane's pure core on an IPv6-only node ("EnableIPv4": false): the
// IPv6 half exactly as dual-stack's (twill-v6.<VNI>, its neighbours, FDB
// entries and routes, host-gw routes via PublicIPv6, ip6tables chains) and no
// IPv4 half at all (no twill.<VNI>, no IPv4 entry, no iptables chain), whatever
// IPv4 fields peers carry; the golden batches of a cold start; what an IPv4
// or dual-stack run left (twill.<VNI>, IPv4 routes, iptables chains and jumps)
// removed by the absent IPv4 spec; a bridge's stale IPv6 CNI gateway removed,
// its IPv4 addresses not; the reads (no IPv4 route or iptables chain but as
// leftovers, tolerantly); and the monitors' and chain poll's view of the
// families.
import { describe, expect, it } from 'vitest';
import { desiredState, podMtu } from '../../src/dataplane/desired.ts';
import { assumedFrom, diff } from '../../src/dataplane/diff.ts';
import { chainSpecs, chainSpecs6 } from '../../src/dataplane/masq.ts';
import type { DesiredState, ObservedChain, ObservedState } from '../../src/dataplane/model.ts';
import { ipEventMatters, nftEventMatters, pollChains } from '../../src/dataplane/monitor.ts';
import type { Touch } from '../../src/dataplane/kernel-event.ts';
import { observe } from '../../src/dataplane/observe.ts';
import { opLines, renderBatches } from '../../src/dataplane/render.ts';
import { CommandError, type Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelPart, masq6Of, peerLease, SELF_MAC6 } from '../helpers/dataplane.ts';
import { captureLog } from '../helpers/log.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const NO_CHAIN: ObservedChain = { jumps: [], rules: null };

/** What a steady IPv6-only pass observes of an empty kernel: no IPv4 chain is read. */
const EMPTY6: ObservedState = {
  links: [],
  routes: [],
  neighs: [],
  fdb: [],
  postrouting: undefined,
  forward: undefined,
  postrouting6: NO_CHAIN,
  forward6: NO_CHAIN,
};

/** The chains as a kernel holding them exactly would list them. */
const listed = (c: { jump: string; rules: readonly string[] | null }): ObservedChain => ({
  jumps: c.rules ? [c.jump] : [],
  rules: c.rules,
});

/** The observed state of a kernel holding exactly `want`, each family's chains when it has them. */
function matching(want: DesiredState): ObservedState {
  const chains = want.masq ? chainSpecs(want.masq) : undefined;
  const chains6 = want.masq6 ? chainSpecs6(want.masq6) : undefined;
  return {
    ...assumedFrom(want),
    postrouting: chains ? listed(chains.postrouting) : undefined,
    forward: chains ? listed(chains.forward) : undefined,
    ...(chains6
      ? { postrouting6: listed(chains6.postrouting), forward6: listed(chains6.forward) }
      : {}),
  };
}

const only6 = (backend: 'vxlan' | 'host-gw', peers: Parameters<typeof desiredState>[0]['peers']) =>
  desiredState(backendInput({ backend, ipv6: true, ipv4: false, peers }));
const v6peers = (vxlan: boolean) =>
  [1, 4].map((n) => peerLease(n, { vxlan, ipv6: true, ipv4: false }));
const dsPeers = (vxlan: boolean) => [1, 4].map((n) => peerLease(n, { vxlan, ipv6: true }));

const vxlan6only = only6('vxlan', v6peers(true));
const dual = desiredState(backendInput({ backend: 'vxlan', ipv6: true, peers: dsPeers(true) }));

describe('IPv6-only backends', () => {
  it('vxlan: twill-v6.<VNI> and its entries as dual-stack has them, and nothing of IPv4', () => {
    expect(vxlan6only.vxlan).toBeNull();
    expect(vxlan6only.masq).toBeNull();
    expect(vxlan6only.vxlan6).toEqual({
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
    expect(vxlan6only.routes).toEqual([
      { dst: 'fd00:0:0:1::/64', via: 'fd00:0:0:1::', dev: 'twill-v6.1', onlink: true },
      { dst: 'fd00:0:0:4::/64', via: 'fd00:0:0:4::', dev: 'twill-v6.1', onlink: true },
    ]);
    expect(vxlan6only.neighs).toEqual([
      { dev: 'twill-v6.1', ip: 'fd00:0:0:1::', mac: '02:00:00:06:00:01' },
      { dev: 'twill-v6.1', ip: 'fd00:0:0:4::', mac: '02:00:00:06:00:04' },
    ]);
    expect(vxlan6only.fdb).toEqual([
      { dev: 'twill-v6.1', mac: '02:00:00:06:00:01', dst: 'fd7b::1' },
      { dev: 'twill-v6.1', mac: '02:00:00:06:00:04', dst: 'fd7b::4' },
    ]);
    // the IPv6 half is dual-stack's, byte for byte
    const v6 = (xs: readonly { dev: string }[]) => xs.filter((x) => x.dev === 'twill-v6.1');
    expect(vxlan6only.vxlan6).toEqual(dual.vxlan6);
    expect(vxlan6only.routes).toEqual(v6(dual.routes));
    expect(vxlan6only.neighs).toEqual(v6(dual.neighs));
    expect(vxlan6only.fdb).toEqual(v6(dual.fdb));
    expect(vxlan6only.masq6).toEqual(dual.masq6);
  });

  it('ignores every IPv4 field of peers: dual-stack peers give the same state as IPv6-only ones', () => {
    for (const backend of ['vxlan', 'host-gw'] as const) {
      const vx = backend === 'vxlan';
      expect(kernelPart(only6(backend, dsPeers(vx)))).toEqual(
        kernelPart(only6(backend, v6peers(vx))),
      );
    }
    // a peer with no IPv6 half (admission refuses it: here it reaches the backend anyway) gives
    // nothing
    expect(kernelPart(only6('vxlan', [...v6peers(true), peerLease(5, { vxlan: true })]))).toEqual(
      kernelPart(vxlan6only),
    );
  });

  it('a dual-stack node routes an IPv6-only peer (a Node with only an IPv6 podCIDR) in IPv6 alone', () => {
    for (const backend of ['vxlan', 'host-gw'] as const) {
      const vx = backend === 'vxlan';
      const d = desiredState(
        backendInput({
          backend,
          ipv6: true,
          peers: [peerLease(1, { vxlan: vx, ipv6: true }), ...v6peers(vx).slice(1)],
        }),
      );
      expect(d.routes.map((r) => r.dst)).toEqual([
        '10.244.1.0/24',
        'fd00:0:0:1::/64',
        'fd00:0:0:4::/64',
      ]);
      expect(d.fdb.map((f) => f.dst)).toEqual(vx ? ['10.123.0.1', 'fd7b::1', 'fd7b::4'] : []);
    }
  });

  it('host-gw: a route per peer via its PublicIPv6 on the underlay, no device', () => {
    const d = only6('host-gw', v6peers(false));
    expect(d).toMatchObject({ vxlan: null, vxlan6: null, masq: null, neighs: [], fdb: [] });
    expect(d.routes).toEqual([
      { dst: 'fd00:0:0:1::/64', via: 'fd7b::1', dev: 'eth0', onlink: false },
      { dst: 'fd00:0:0:4::/64', via: 'fd7b::4', dev: 'eth0', onlink: false },
    ]);
  });

  it('vxlan DirectRouting: an on-link PublicIPv6 gets a plain route, the others go through twill-v6', () => {
    const far = peerLease(4, { vxlan: true, ipv6: true, ipv4: false, ipBase6: 'fd7c::' });
    const d = desiredState(
      backendInput({
        backend: 'vxlan',
        ipv6: true,
        ipv4: false,
        peers: [peerLease(1, { vxlan: true, ipv6: true, ipv4: false }), far],
        extra: ',"DirectRouting":true',
      }),
    );
    expect(d.routes).toEqual([
      { dst: 'fd00:0:0:1::/64', via: 'fd7b::1', dev: 'eth0', onlink: false },
      { dst: 'fd00:0:0:4::/64', via: 'fd00:0:0:4::', dev: 'twill-v6.1', onlink: true },
    ]);
  });

  it("pods get the IPv6 tunnel's MTU: the underlay's (or Backend.MTU) less 70", () => {
    const input = backendInput({ backend: 'vxlan', ipv6: true, ipv4: false, peers: [] });
    expect(podMtu(input.config.backend, 1500, { ipv6: true })).toBe(1430);
    const jumbo = desiredState(
      backendInput({ backend: 'vxlan', ipv6: true, ipv4: false, peers: [], extra: ',"MTU":9000' }),
    );
    expect(jumbo.vxlan6?.mtu).toBe(8930);
  });
});

describe('IPv6-only diff and render', () => {
  it('plans nothing when the kernel already matches', () => {
    expect(diff(vxlan6only, matching(vxlan6only))).toEqual([]);
  });

  it('deletes a stale IPv6 gateway on a bridge, and no IPv4 address (our IPv4 subnet is unknown)', () => {
    expect(vxlan6only.podRanges.map((r) => r.family)).toEqual([6]);
    const seen: ObservedState = {
      ...matching(vxlan6only),
      bridgeAddrs: [
        // what an earlier IPv4 or dual-stack run's CNI gateway may have left: not ours to judge
        { dev: 'cni0', address: '10.244.216.1/24' },
        { dev: 'cni0', address: '10.244.3.1/24' },
        { dev: 'cni0', address: 'fd00:0:0:9::1/64' },
        { dev: 'cni0', address: 'fd00:0:0:3::1/64' },
        { dev: 'cni0', address: 'fe80::1/64' },
      ],
    };
    expect(diff(vxlan6only, seen).flatMap(opLines)).toEqual(['addr del fd00:0:0:9::1/64 dev cni0']);
    // once it is gone, the rest stays as it is
    const rest = seen.bridgeAddrs?.filter((a) => a.address !== 'fd00:0:0:9::1/64');
    expect(diff(vxlan6only, { ...seen, bridgeAddrs: rest })).toEqual([]);
  });

  it('renders a cold start as ip, bridge, ip batches and ip6tables-restore alone (golden)', () => {
    const batches = renderBatches(diff(vxlan6only, EMPTY6));
    expect(batches.map((b) => [b.file, ...b.args].join(' '))).toEqual([
      'ip -force -batch -',
      'bridge -force -batch -',
      'ip -force -batch -',
      'ip6tables-restore --noflush -w 5',
    ]);
    expect(batches[0]?.lines).toEqual([
      'link add twill-v6.1 mtu 1430 address 02:00:00:06:00:03 type vxlan id 1 local fd7b::2 dev eth0 dstport 8472 nolearning',
      'link set twill-v6.1 addrgenmode none',
      'addr add fd00:0:0:3::/128 dev twill-v6.1 nodad',
      'link set twill-v6.1 up',
    ]);
    expect(batches[1]?.lines).toEqual([
      'fdb append 02:00:00:06:00:01 dev twill-v6.1 dst fd7b::1 self permanent',
      'fdb append 02:00:00:06:00:04 dev twill-v6.1 dst fd7b::4 self permanent',
    ]);
    expect(batches[2]?.lines).toEqual([
      'neigh replace fd00:0:0:1:: lladdr 02:00:00:06:00:01 dev twill-v6.1 nud permanent',
      'neigh replace fd00:0:0:4:: lladdr 02:00:00:06:00:04 dev twill-v6.1 nud permanent',
      'route add fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 onlink proto 151',
      'route add fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 onlink proto 151',
    ]);
    expect(batches[3]?.input).toContain('-A TWILL-POSTRTG -s fd00::/48 ! -d ff00::/8');
    expect(batches[3]?.input).not.toMatch(/10\.244|224\.0/);
  });

  it('the first pass removes what a dual-stack run left (twill.<VNI>, IPv4 routes, iptables chains and jumps), leaving the IPv6 half alone', () => {
    // the first pass with IPv4 off reads the IPv4 routes and chains too (observe's leftovers4)
    const batches = renderBatches(diff(vxlan6only, matching(dual)));
    expect(batches.map((b) => [b.file, b.input])).toEqual([
      [
        'ip',
        'route del 10.244.1.0/24 via 10.244.1.0 dev twill.1 onlink proto 151 metric 717825\n' +
          'route del 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151 metric 717828\n',
      ],
      ['ip', 'link del twill.1\n'],
      [
        'iptables-restore',
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
    // the IPv4 neighbours and FDB entries go with their device; nothing else is touched
    expect(diff(vxlan6only, matching(dual)).filter((op) => 'ipv6' in op)).toEqual([]);
  });

  it('an IPv4 host-gw run left routes via the underlay: they go too; a pass that did not read IPv4 touches none', () => {
    const v4 = desiredState(
      backendInput({
        backend: 'host-gw',
        peers: [1, 4].map((n) => peerLease(n, { vxlan: false })),
      }),
    );
    const left = matching(v4);
    const now = only6('host-gw', v6peers(false));
    const lines = diff(now, { ...left, postrouting6: NO_CHAIN, forward6: NO_CHAIN }).flatMap(
      opLines,
    );
    expect(lines.filter((l) => l.startsWith('route del'))).toEqual([
      'route del 10.244.1.0/24 via 10.123.0.1 dev eth0 proto 151 metric 717825',
      'route del 10.244.4.0/24 via 10.123.0.4 dev eth0 proto 151 metric 717828',
    ]);
    expect(lines).toContain('-X TWILL-FWD');
    // a steady pass reads neither the IPv4 routes nor the iptables chains: no IPv4 op at all
    const steady = diff(now, { ...EMPTY6, routes: matching(now).routes });
    expect(steady.filter((op) => !('ipv6' in op))).toEqual([]);
  });
});

describe('IPv6-only reads', () => {
  /** A kernel holding twill.1 and twill-v6.1, one IPv4 route and iptables' forward chain. */
  function kernel(o: { noIpv4?: boolean } = {}): { runner: Runner; calls: string[] } {
    const calls: string[] = [];
    const runner: Runner = async (file, args) => {
      const cmd = [file, ...args].join(' ');
      calls.push(cmd);
      if (cmd === 'ip -d -json addr show')
        return {
          stdout: JSON.stringify([
            {
              ifname: 'twill.1',
              linkinfo: { info_kind: 'vxlan', info_data: { id: 1, local: '10.123.0.2' } },
            },
            {
              ifname: 'twill-v6.1',
              linkinfo: { info_kind: 'vxlan', info_data: { id: 1, local6: 'fd7b::2' } },
            },
          ]),
          stderr: '',
        };
      if (cmd === 'ip -N -json route show table main') {
        if (o.noIpv4) throw new Error('ip: RTNETLINK answers: Address family not supported');
        return {
          stdout: JSON.stringify([
            { dst: '10.244.1.0/24', gateway: '10.123.0.1', dev: 'eth0', protocol: '151' },
          ]),
          stderr: '',
        };
      }
      if (file === 'iptables') {
        if (o.noIpv4) throw new Error('spawn iptables ENOENT');
        const chain = args.at(-1) ?? '';
        if (chain === 'FORWARD')
          return {
            stdout:
              '-P FORWARD ACCEPT\n-A FORWARD -m comment --comment "twill forward" -j TWILL-FWD\n',
            stderr: '',
          };
        if (chain === 'TWILL-FWD')
          return { stdout: '-N TWILL-FWD\n-A TWILL-FWD -s 10.244.0.0/16 -j ACCEPT\n', stderr: '' };
        if (chain === 'POSTROUTING') return { stdout: '-P POSTROUTING ACCEPT\n', stderr: '' };
        throw new CommandError({
          command: [file, ...args],
          exitCode: 1,
          stderr: 'iptables: No chain/target/match by that name.\n',
          reason: 'exit code 1',
        });
      }
      if (file === 'ip6tables') return { stdout: '', stderr: '' };
      return { stdout: '[]', stderr: '' };
    };
    return { runner, calls };
  }
  const v4reads = (calls: readonly string[]): string[] =>
    calls.filter((c) => c.startsWith('iptables') || c.startsWith('ip -N -json route')).sort();
  const ipv6Only = { chains: true, ipv6: true, dev6: 'twill-v6.1', ipv4: false } as const;

  it('a steady pass reads no IPv4 route, no IPv4 device entry and no iptables chain, and sees twill.1', async () => {
    const { runner, calls } = kernel();
    const seen = await observe(runner, undefined, AbortSignal.timeout(1_000), ipv6Only);
    expect(calls.sort()).toEqual(
      [
        'ip -d -json addr show',
        'ip -6 -N -json route show table main',
        'ip -json neigh show dev twill-v6.1',
        'bridge -json fdb show dev twill-v6.1',
        'ip6tables -w 5 -t nat -S POSTROUTING',
        'ip6tables -w 5 -t nat -S TWILL-POSTRTG',
        'ip6tables -w 5 -t filter -S FORWARD',
        'ip6tables -w 5 -t filter -S TWILL-FWD',
      ].sort(),
    );
    // an IPv4 device is seen either way, so the pass removes it
    expect(seen.links.map((l) => l.name)).toEqual(['twill.1', 'twill-v6.1']);
    expect(seen.postrouting).toBeUndefined();
    expect(seen.forward).toBeUndefined();
    expect(seen.routes).toEqual([]);
    // even given an IPv4 device name, its entries are not read with IPv4 off
    calls.length = 0;
    await observe(runner, 'twill.1', AbortSignal.timeout(1_000), ipv6Only);
    expect(calls.filter((c) => c.endsWith('twill.1'))).toEqual([]);
  });

  it('leftovers4: reads the IPv4 routes and iptables chains too, and they are diffed away', async () => {
    const { runner, calls } = kernel();
    const left = await observe(runner, undefined, AbortSignal.timeout(1_000), {
      ...ipv6Only,
      leftovers4: true,
    });
    expect(v4reads(calls)).toEqual([
      'ip -N -json route show table main',
      'iptables -w 5 -t filter -S FORWARD',
      'iptables -w 5 -t filter -S TWILL-FWD',
      'iptables -w 5 -t nat -S POSTROUTING',
      'iptables -w 5 -t nat -S TWILL-POSTRTG',
    ]);
    expect(left.routes).toEqual([
      { dst: '10.244.1.0/24', via: '10.123.0.1', dev: 'eth0', onlink: false },
    ]);
    expect(left.forward).toEqual({
      jumps: ['-m comment --comment "twill forward" -j TWILL-FWD'],
      rules: ['-A TWILL-FWD -s 10.244.0.0/16 -j ACCEPT'],
    });
    expect(left.postrouting).toEqual({ jumps: [], rules: null });
    const lines = diff(only6('host-gw', []), left).flatMap(opLines);
    expect(lines).toEqual(
      expect.arrayContaining([
        'route del 10.244.1.0/24 via 10.123.0.1 dev eth0 proto 151',
        'link del twill.1',
        '-D FORWARD -m comment --comment "twill forward" -j TWILL-FWD',
        '-X TWILL-FWD',
      ]),
    );
  });

  it('leftovers4 on a node without iptables or IPv4 routing: the failed reads are nothing there', async () => {
    const { runner, calls } = kernel({ noIpv4: true });
    const none = await observe(runner, undefined, AbortSignal.timeout(1_000), {
      ...ipv6Only,
      leftovers4: true,
    });
    expect(v4reads(calls)).toHaveLength(5);
    expect(none.routes).toEqual([]);
    expect(none.postrouting).toBeUndefined();
    expect(none.forward).toBeUndefined();
    // only the IPv4 device is removed; nothing iptables
    expect(diff(only6('host-gw', []), none).flatMap(opLines)).toEqual(
      expect.arrayContaining(['link del twill.1']),
    );
    expect(renderBatches(diff(only6('host-gw', []), none)).map((b) => b.file)).not.toContain(
      'iptables-restore',
    );
  });
});

describe('IPv6-only monitors and chain poll', () => {
  const ctx = { underlay: 'eth0', ipv6: true, ipv4: false } as const;

  it("the underlay's IPv4 addresses do not matter; its link, global IPv6 addresses and twill's objects do", () => {
    const inet = 'Deleted 3: eth0    inet 10.123.0.2/24 brd 10.123.0.255 scope global eth0';
    expect(ipEventMatters(inet, ctx)).toBe(false);
    expect(ipEventMatters(inet, { ...ctx, ipv4: true })).toBe(true);
    for (const line of [
      'Deleted 3: eth0    inet6 fd7b::2/64 scope global ',
      '3: eth0@if9: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500',
      'Deleted fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
      'fd00:0:0:4:: dev twill-v6.1 lladdr 02:00:00:06:00:04 PERMANENT',
      // an IPv4 leftover twill still owns (until a full pass removes it)
      'Deleted 10.244.1.0/24 via 10.123.0.1 dev eth0 proto 151',
    ])
      expect(ipEventMatters(line, ctx), line).toBe(true);
  });

  it("only ip6tables' tables matter to nft monitor: kube-proxy's iptables churn is ignored", () => {
    for (const line of [
      'delete rule ip6 nat TWILL-POSTRTG handle 2',
      'add rule ip6 nat POSTROUTING counter jump KUBE-POSTROUTING',
      'delete table ip6 filter',
      'flush ruleset',
      '# ERROR: We lost some netlink events!',
    ])
      expect(nftEventMatters(line, ctx), line).toBe(true);
    for (const line of [
      'delete rule ip nat TWILL-POSTRTG handle 2',
      'add rule ip filter FORWARD counter jump KUBE-FORWARD',
      'delete table ip nat',
      'flush table ip filter',
    ]) {
      expect(nftEventMatters(line, ctx), line).toBe(false);
      expect(nftEventMatters(line, { ipv6: true }), line).toBe(true);
    }
  });

  it('the chain poll reads only ip6tables, and reports its drift', async () => {
    const calls: string[] = [];
    const spec6 = chainSpecs6(masq6Of(vxlan6only));
    let forward6 = ['-N TWILL-FWD', ...(spec6.forward.rules ?? [])];
    const runner: Runner = async (file, args) => {
      calls.push([file, ...args].join(' '));
      const chain = args.at(-1);
      const builtin = (c: string, jump: string) => `-P ${c} ACCEPT\n-A ${c} ${jump}\n`;
      if (file !== 'ip6tables') throw new Error(`not polled with IPv4 off: ${file}`);
      if (chain === 'POSTROUTING')
        return { stdout: builtin('POSTROUTING', spec6.postrouting.jump), stderr: '' };
      if (chain === 'FORWARD')
        return { stdout: builtin('FORWARD', spec6.forward.jump), stderr: '' };
      if (chain === 'TWILL-POSTRTG')
        return {
          stdout: ['-N TWILL-POSTRTG', ...(spec6.postrouting.rules ?? []), ''].join('\n'),
          stderr: '',
        };
      return { stdout: [...forward6, ''].join('\n'), stderr: '' };
    };
    const drifts: Touch[] = [];
    const ctl = new AbortController();
    const poll = pollChains(
      {
        runner,
        logger: captureLog().logger,
        masq: () => vxlan6only.masq,
        masq6: () => vxlan6only.masq6,
        intervalMs: 5,
        onDrift: (_s, t) => void drifts.push(t),
      },
      ctl.signal,
    );
    try {
      // two rounds of the four ip6tables reads, and no drift
      await waitFor(() => calls.length >= 8, { timeoutMs: 5_000, what: 'two polls' });
      expect(drifts).toEqual([]);
      forward6 = ['-N TWILL-FWD'];
      await waitFor(() => drifts.length > 0, { timeoutMs: 5_000, what: 'poll drift' });
      expect(drifts[0]).toEqual({ kind: 'chains', tables: ['filter'] });
      expect(calls.every((c) => c.startsWith('ip6tables '))).toBe(true);
    } finally {
      ctl.abort();
      await poll;
    }
  });
});
