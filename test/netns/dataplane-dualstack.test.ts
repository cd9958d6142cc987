// The programmer in dual-stack on a real kernel, in namespaces the test
// makes (an underlay with IPv4 and IPv6 addresses): vxlan gives exactly the
// expected IPv6 device (twill-v6.<VNI>: VNI, port, learning off, IPv6 source
// address, no link-local), neighbours, FDB entries, onlink routes and
// ip6tables chains beside the IPv4 ones, and a second pass does nothing; a
// new IPv6 peer is applied as a delta, and so is an IPv6 host-gw peer's new
// PublicIPv6 (delete, then add, no repair after); host-gw routes via
// PublicIPv6; going back to vxlan moves the IPv6 routes onto twill-v6 without
// a failure, and to IPv4 only removes the IPv6 device; CNI gateways of an
// earlier lease on a bridge are removed in both families; and pods on two
// nodes reach each other over IPv6 through the two nodes' twill-v6 devices.
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { desiredState, type BackendInput } from '../../src/dataplane/desired.ts';
import { forwardRules6, masqRules6 } from '../../src/dataplane/masq.ts';
import { pollChains, runMonitors } from '../../src/dataplane/monitor.ts';
import type { Touch } from '../../src/dataplane/kernel-event.ts';
import { Reconciler } from '../../src/dataplane/reconciler.ts';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelView, peerLease, SELF_MAC6 } from '../helpers/dataplane.ts';
import { captureLog } from '../helpers/log.ts';
import { NetnsLab, nsForwarding, nsRunner, nsWatch, sweepStaleNetns } from '../../lab/kit/netns.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';

const lab = new NetnsLab();
let ns: string;
let peerNs: string;
let runner: Runner;
let peerRunner: Runner;

function reconciler(input: () => BackendInput, o: { ns?: string; r?: Runner } = {}): Reconciler {
  return new Reconciler({
    runner: o.r ?? runner,
    logger: captureLog().logger,
    desired: () => desiredState(input()),
    ensureForwarding: nsForwarding(o.ns ?? ns),
    resyncMs: 60_000,
  });
}

const PEERS = [1, 2, 4].map((n) => peerLease(n, { vxlan: true, ipv6: true }));
const dual = (peers: BackendInput['peers'], backend: 'vxlan' | 'host-gw' = 'vxlan') =>
  backendInput({ backend, ipv6: true, peers });

beforeAll(async () => {
  await sweepStaleNetns();
  ns = await lab.add('ds');
  peerNs = await lab.add('ds-peer');
  await lab.link(
    { ns, dev: 'eth0', cidr: '10.123.0.2/24' },
    { ns: peerNs, dev: 'eth0', cidr: '10.123.0.1/24' },
  );
  runner = nsRunner(ns);
  peerRunner = nsRunner(peerNs);
  // the IPv6 underlay (no duplicate address detection: usable at once)
  await runner('ip', ['addr', 'add', 'fd7b::2/64', 'dev', 'eth0', 'nodad']);
  await peerRunner('ip', ['addr', 'add', 'fd7b::1/64', 'dev', 'eth0', 'nodad']);
});
afterAll(() => lab.destroy());

/** Removes twill's objects of both families from a namespace (the forward chains too). */
async function clean(r: Runner, nsName: string): Promise<void> {
  await reconciler(
    () => backendInput({ backend: 'host-gw', ipv6: true, peers: [], ipMasq: false }),
    { ns: nsName, r },
  ).pass(AbortSignal.timeout(20_000));
  for (const tool of ['iptables', 'ip6tables']) {
    const del = ['-m', 'comment', '--comment', 'twill forward', '-j', 'TWILL-FWD'];
    await r(tool, ['-t', 'filter', '-D', 'FORWARD', ...del]).catch(() => undefined);
    await r(tool, ['-t', 'filter', '-F', 'TWILL-FWD']).catch(() => undefined);
    await r(tool, ['-t', 'filter', '-X', 'TWILL-FWD']).catch(() => undefined);
  }
}

beforeEach(async () => {
  await clean(runner, ns);
  await clean(peerRunner, peerNs);
});

describe('dual-stack dataplane on a real kernel', () => {
  it('programs vxlan for both families exactly, flannel-shaped, and a second pass does nothing', async () => {
    const input = dual(PEERS);
    const r = reconciler(() => input);
    const first = await r.pass(AbortSignal.timeout(20_000));
    expect(first.failures).toEqual([]);
    const view = await kernelView(runner, { ipv6: true });
    // IPv4 as always
    expect(view.routes).toHaveLength(3);
    expect(view.devices).toEqual(['twill-v6.1', 'twill.1']);
    expect(view.v6?.routes).toEqual([
      'fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
      'fd00:0:0:2::/64 via fd00:0:0:2:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
      'fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
    ]);
    expect(view.v6?.neighs).toEqual([
      'fd00:0:0:1:: lladdr 02:00:00:06:00:01 PERMANENT',
      'fd00:0:0:2:: lladdr 02:00:00:06:00:02 PERMANENT',
      'fd00:0:0:4:: lladdr 02:00:00:06:00:04 PERMANENT',
    ]);
    expect(view.v6?.fdb).toEqual([
      '02:00:00:06:00:01 dst fd7b::1 self permanent',
      '02:00:00:06:00:02 dst fd7b::2 self permanent',
      '02:00:00:06:00:04 dst fd7b::4 self permanent',
    ]);
    const [link] = JSON.parse(
      (await runner('ip', ['-d', '-j', 'addr', 'show', 'dev', 'twill-v6.1'])).stdout,
    ) as { flags: string[]; addr_info: { family: string; local: string; prefixlen: number }[] }[];
    // flannel-v6.<VNI>'s wire settings: same VNI and port, no learning, the IPv6 underlay address
    expect(link).toMatchObject({
      mtu: 1430,
      address: SELF_MAC6,
      linkinfo: {
        info_kind: 'vxlan',
        info_data: { id: 1, local6: 'fd7b::2', link: 'eth0', port: 8472, learning: false },
      },
    });
    expect(link?.flags.includes('UP')).toBe(true);
    // its one address, usable at once; no link-local (addrgenmode none)
    expect(link?.addr_info).toMatchObject([
      { family: 'inet6', local: 'fd00:0:0:3::', prefixlen: 128, nodad: true },
    ]);
    const masq6 = desiredState(input).masq6;
    if (!masq6) throw new Error('dual-stack input without IPv6');
    expect(view.v6?.postrtg).toBe(['-N TWILL-POSTRTG', ...masqRules6(masq6), ''].join('\n'));
    expect(view.v6?.fwd).toBe(['-N TWILL-FWD', ...forwardRules6(masq6), ''].join('\n'));
    expect(view.v6?.postrouting.match(/-j TWILL-POSTRTG/g)).toHaveLength(1);
    expect(view.v6?.forward.match(/-j TWILL-FWD/g)).toHaveLength(1);
    const second = await r.pass(AbortSignal.timeout(20_000));
    expect(second.ops).toEqual([]);
    expect(second.converged).toBe(true);
  });

  it('applies a new IPv6 peer as a delta, without reading the kernel', async () => {
    let peers = PEERS;
    const log = captureLog();
    const r = new Reconciler({
      runner,
      logger: log.logger,
      desired: () => desiredState(dual(peers)),
      ensureForwarding: nsForwarding(ns),
      resyncMs: 600_000,
    });
    const ctl = new AbortController();
    const loop = r.run(ctl.signal);
    onTestFinished(async () => {
      ctl.abort();
      await loop;
    });
    await waitFor(() => r.lastPass()?.converged === true, {
      timeoutMs: slowBound(2_000),
      what: 'converged',
    });
    peers = [...PEERS, peerLease(5, { vxlan: true, ipv6: true })];
    r.leasesChanged();
    await waitFor(
      async () =>
        (await runner('ip', ['-6', 'route', 'show', 'fd00:0:0:5::/64'])).stdout.includes(
          'proto 151',
        ),
      { timeoutMs: slowBound(1_000), what: 'the new IPv6 peer route' },
    );
    expect(r.lastPass()).toMatchObject({ kind: 'delta', failures: [] });
    expect(r.lastPass()?.stages.spawns).toBe(2);
    const view = await kernelView(runner, { ipv6: true });
    expect(view.routes).toHaveLength(4);
    expect(view.v6?.routes).toHaveLength(4);
    expect(view.v6?.fdb).toContain('02:00:00:06:00:05 dst fd7b::5 self permanent');
  });

  it('programs host-gw IPv6 routes via PublicIPv6, and going back to IPv4 only removes twill-v6', async () => {
    await reconciler(() => dual(PEERS)).pass(AbortSignal.timeout(20_000));
    expect((await kernelView(runner)).devices).toEqual(['twill-v6.1', 'twill.1']);
    const hostPeers = [1, 5].map((n) => peerLease(n, { vxlan: false, ipv6: true }));
    const hg = reconciler(() => dual(hostPeers, 'host-gw'));
    expect((await hg.pass(AbortSignal.timeout(20_000))).failures).toEqual([]);
    const view = await kernelView(runner, { ipv6: true });
    expect(view.devices).toEqual([]);
    expect(view.v6?.routes).toEqual([
      'fd00:0:0:1::/64 via fd7b::1 dev eth0 proto 151 metric 1024 pref medium',
      'fd00:0:0:5::/64 via fd7b::5 dev eth0 proto 151 metric 1024 pref medium',
    ]);
    expect((await hg.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
    // vxlan again: peer 1's IPv6 route moves from the underlay to twill-v6.1, which IPv6 refuses
    // to do by `route replace` (the old route covers the new one's onlink gateway through another
    // device): deleted, then added, in one pass that reports no failure
    const vx = reconciler(() => dual(PEERS));
    const back = await vx.pass(AbortSignal.timeout(20_000));
    expect(back.failures).toEqual([]);
    expect(
      back.ops.flatMap((o) =>
        o.kind === 'route' && o.route.dst === 'fd00:0:0:1::/64'
          ? [`${o.action} ${o.route.dev}`]
          : [],
      ),
    ).toEqual(['delete eth0', 'add twill-v6.1']);
    expect((await kernelView(runner, { ipv6: true })).v6?.routes).toEqual([
      'fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
      'fd00:0:0:2::/64 via fd00:0:0:2:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
      'fd00:0:0:4::/64 via fd00:0:0:4:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
    ]);
    expect((await vx.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
    // then IPv4 only: the IPv6 device goes, the IPv4 one stays
    const v4 = reconciler(() => backendInput({ backend: 'vxlan', peers: PEERS }));
    expect((await v4.pass(AbortSignal.timeout(20_000))).failures).toEqual([]);
    expect((await kernelView(runner)).devices).toEqual(['twill.1']);
    expect((await v4.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
  });

  it("applies an IPv6 host-gw peer's new PublicIPv6 by replacing its routes in place (same device), and their events ask for nothing", async () => {
    let base6 = 'fd7b::';
    const peers = () =>
      [1, 5].map((n) => peerLease(n, { vxlan: false, ipv6: true, ipBase6: base6 }));
    const log = captureLog();
    const r = new Reconciler({
      runner,
      logger: log.logger,
      desired: () => desiredState(dual(peers(), 'host-gw')),
      ensureForwarding: nsForwarding(ns),
      resyncMs: 600_000,
      settleMs: 5,
    });
    const ctl = new AbortController();
    const loops = Promise.all([
      r.run(ctl.signal),
      runMonitors(
        {
          watch: nsWatch(ns),
          logger: log.logger,
          ctx: { underlay: 'eth0', ipv6: true },
          nft: false,
          onEvent: (s: string, t?: Touch) => (t ? r.touch(s, t) : r.trigger(s)),
        },
        ctl.signal,
      ),
    ]);
    onTestFinished(async () => {
      ctl.abort();
      await loops;
    });
    await waitFor(() => r.lastPass()?.converged === true, {
      timeoutMs: slowBound(2_000),
      what: 'converged',
    });
    // the passes the monitor's start asks for
    await new Promise((res) => setTimeout(res, 300));
    const mark = log.lines.length;
    base6 = 'fd7b::1';
    r.leasesChanged();
    await waitFor(
      async () =>
        (await runner('ip', ['-6', 'route', 'show', 'fd00:0:0:1::/64'])).stdout.includes(
          'via fd7b::11',
        ),
      { timeoutMs: slowBound(1_000), what: 'the new IPv6 route' },
    );
    // a gateway change on the same device is a replace (the kernel takes it in IPv6 too; only a
    // change of device needs delete + add), made by a pass that reads the kernel; its own events
    // ask for no repair and no further pass
    await new Promise((res) => setTimeout(res, 300));
    expect(
      log.lines
        .slice(mark)
        .filter((l) => l.msg !== 'dataplane ops' && l.msg !== 'pass triggered')
        .map((l) => [l.msg, l.kind, l.ops]),
    ).toEqual([['dataplane updated', 'entries', { 'route change': 2 }]]);
  });

  it("removes CNI gateways of an earlier lease of ours from a bridge in both families, so the routes to those subnets' new holder go in", async () => {
    // this node held 10.244.9.0/24 and fd00:0:0:9::/64 before: their gateways are still on cni0
    // beside the current ones. The IPv4 one's connected route makes the route add fail ("File
    // exists"); the IPv6 one's, the onlink route through twill-v6.1 ("Nexthop has invalid gateway
    // or device mismatch")
    await runner('ip', ['link', 'add', 'cni0', 'type', 'bridge']);
    onTestFinished(async () => {
      await runner('ip', ['link', 'del', 'cni0']).catch(() => undefined);
    });
    for (const a of ['10.244.9.1/24', '10.244.3.1/24', 'fd00:0:0:9::1/64', 'fd00:0:0:3::1/64'])
      await runner('ip', ['addr', 'add', a, 'dev', 'cni0', ...(a.includes(':') ? ['nodad'] : [])]);
    await runner('ip', ['link', 'set', 'cni0', 'up']);
    const log = captureLog();
    const r = new Reconciler({
      runner,
      logger: log.logger,
      desired: () => desiredState(dual([...PEERS, peerLease(9, { vxlan: true, ipv6: true })])),
      ensureForwarding: nsForwarding(ns),
      resyncMs: 60_000,
    });
    const first = await r.pass(AbortSignal.timeout(20_000));
    expect(first.failures).toEqual([]);
    const view = await kernelView(runner, { ipv6: true });
    expect(view.routes).toContain(
      '10.244.9.0/24 via 10.244.9.0 dev twill.1 proto 151 metric 717833 onlink',
    );
    expect(view.v6?.routes).toContain(
      'fd00:0:0:9::/64 via fd00:0:0:9:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
    );
    const [link] = JSON.parse(
      (await runner('ip', ['-json', 'addr', 'show', 'dev', 'cni0'])).stdout,
    ) as { addr_info: { local: string; prefixlen: number; scope: string }[] }[];
    const addrs = (link?.addr_info ?? []).map((a) => `${a.local}/${a.prefixlen}`);
    // the old gateways gone, the current ones kept, the kernel's link-local too
    expect(addrs.filter((a) => !a.startsWith('fe80:'))).toEqual([
      '10.244.3.1/24',
      'fd00:0:0:3::1/64',
    ]);
    expect(addrs.some((a) => a.startsWith('fe80:'))).toBe(true);
    expect(log.lines.find((l) => l.msg === 'dataplane updated')?.ops).toMatchObject({
      'stale address delete': 2,
    });
    expect((await r.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
  });

  it('a restart without IPv6 removes what dual-stack left on its first pass (IPv6 host-gw routes, ip6tables chains and jumps), and later passes read no IPv6', async () => {
    const hostPeers = [1, 5].map((n) => peerLease(n, { vxlan: false, ipv6: true }));
    const ds = await reconciler(() => dual(hostPeers, 'host-gw')).pass(AbortSignal.timeout(20_000));
    expect(ds.failures).toEqual([]);
    const before = await kernelView(runner, { ipv6: true });
    expect(before.v6?.routes).toHaveLength(2);
    expect(before.v6?.postrouting).toContain('-j TWILL-POSTRTG');
    expect(before.v6?.forward).toContain('-j TWILL-FWD');
    // what is not twill's stays: an IPv6 route of another protocol, another FORWARD rule
    await runner('ip', ['-6', 'route', 'add', 'fd00:99::/64', 'via', 'fd7b::1', 'dev', 'eth0']);
    await runner('ip6tables', ['-A', 'FORWARD', '-s', 'fd00:99::/64', '-j', 'ACCEPT']);
    onTestFinished(async () => {
      await runner('ip', ['-6', 'route', 'del', 'fd00:99::/64']).catch(() => undefined);
      await runner('ip6tables', ['-D', 'FORWARD', '-s', 'fd00:99::/64', '-j', 'ACCEPT']);
    });
    const calls: string[] = [];
    const counted: Runner = (file, args, opts) => {
      calls.push([file, ...args].join(' '));
      return runner(file, args, opts);
    };
    const v4 = reconciler(() => backendInput({ backend: 'host-gw', peers: hostPeers }), {
      r: counted,
    });
    const first = await v4.pass(AbortSignal.timeout(20_000));
    expect(first.failures).toEqual([]);
    const after = await kernelView(runner, { ipv6: true });
    expect(after.v6?.routes).toEqual([]);
    expect(after.v6?.postrtg).toBe('');
    expect(after.v6?.fwd).toBe('');
    expect(after.v6?.postrouting).not.toContain('TWILL');
    expect(after.v6?.forward).not.toContain('TWILL');
    expect(after.v6?.forward).toContain('-A FORWARD -s fd00:99::/64 -j ACCEPT');
    expect((await runner('ip', ['-6', 'route', 'show', 'fd00:99::/64'])).stdout).toContain(
      'via fd7b::1',
    );
    // the IPv4 side is an IPv4-only node's
    expect(after.routes).toEqual([
      '10.244.1.0/24 via 10.123.0.1 dev eth0 proto 151 metric 717825',
      '10.244.5.0/24 via 10.123.0.5 dev eth0 proto 151 metric 717829',
    ]);
    expect(after.fwd).toContain('-A TWILL-FWD');
    // converged, and the passes after the first spawn what an IPv4-only pass always did
    calls.length = 0;
    expect((await v4.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
    expect(calls.filter((c) => c.startsWith('ip6tables') || c.startsWith('ip -6'))).toEqual([]);
  });

  it('a node without ip6tables: the first pass without IPv6 treats the chains as not there, and does not fail', async () => {
    // ip6tables cannot be started (not installed): the runner fails to spawn it
    const noIp6tables: Runner = (file, args, opts) =>
      runner(file === 'ip6tables' ? '/nonexistent/ip6tables' : file, args, opts);
    const r = reconciler(() => backendInput({ backend: 'vxlan', peers: PEERS }), {
      r: noIp6tables,
    });
    const first = await r.pass(AbortSignal.timeout(20_000));
    expect(first.failures).toEqual([]);
    expect(first.ops.some((op) => 'ipv6' in op)).toBe(false);
    expect((await kernelView(runner)).routes).toHaveLength(3);
  });

  it('carries pod-to-pod IPv6 between two nodes through their twill-v6 devices', async () => {
    // this node is node 3 (fd00:0:0:3::/64 at fd7b::2); the peer namespace is node 1
    const here = dual([peerLease(1, { vxlan: true, ipv6: true })]);
    const base = backendInput({
      backend: 'vxlan',
      ipv6: true,
      peers: [here.self],
      ifaceIp6: 'fd7b::1',
    });
    const there: BackendInput = {
      ...base,
      self: peerLease(1, { vxlan: true, ipv6: true }),
      choice: {
        ...base.choice,
        iface: {
          ...base.choice.iface,
          addrs: ['10.123.0.1'],
          networks: ['10.123.0.1/24'],
          networks6: ['fd7b::1/64'],
        },
        ifaceIp: '10.123.0.1',
        publicIp: '10.123.0.1',
      },
    };
    for (const [input, r, nsName] of [
      [here, runner, ns],
      [there, peerRunner, peerNs],
    ] as const) {
      expect(
        (await reconciler(() => input, { ns: nsName, r }).pass(AbortSignal.timeout(20_000)))
          .failures,
      ).toEqual([]);
    }
    // a pod address on each node, in its IPv6 subnet
    const pods: [Runner, string][] = [
      [runner, 'fd00:0:0:3::5'],
      [peerRunner, 'fd00:0:0:1::5'],
    ];
    for (const [r, addr] of pods) {
      // a veth whose far end stays in the namespace: the pod's address, up with carrier
      await r('ip', ['link', 'add', 'pod0', 'type', 'veth', 'peer', 'name', 'pod0p']);
      await r('ip', ['addr', 'add', `${addr}/64`, 'dev', 'pod0', 'nodad']);
      await r('ip', ['link', 'set', 'pod0p', 'up']);
      await r('ip', ['link', 'set', 'pod0', 'up']);
    }
    onTestFinished(async () => {
      for (const [r] of pods) await r('ip', ['link', 'del', 'pod0']).catch(() => undefined);
    });
    const ping = await runner('ping', [
      '-6',
      '-c',
      '2',
      '-W',
      '2',
      '-I',
      'fd00:0:0:3::5',
      'fd00:0:0:1::5',
    ]);
    expect(ping.stdout).toContain('2 received');
    // and it went through the tunnel: the peer's twill-v6 device received it
    const stats = JSON.parse(
      (await peerRunner('ip', ['-s', '-j', 'link', 'show', 'dev', 'twill-v6.1'])).stdout,
    ) as { stats64: { rx: { packets: number } } }[];
    expect(stats[0]?.stats64.rx.packets).toBeGreaterThanOrEqual(2);
  });

  it('polls the ip6tables chains too: a deleted IPv6 rule is reported as drift of its table', async () => {
    const input = dual(PEERS);
    await reconciler(() => input).pass(AbortSignal.timeout(20_000));
    const drifts: Touch[] = [];
    const ctl = new AbortController();
    const poll = pollChains(
      {
        runner,
        logger: captureLog().logger,
        masq: () => desiredState(input).masq,
        masq6: () => desiredState(input).masq6,
        intervalMs: 100,
        onDrift: (_s, t) => void drifts.push(t),
      },
      ctl.signal,
    );
    onTestFinished(async () => {
      ctl.abort();
      await poll;
    });
    await new Promise((res) => setTimeout(res, 400));
    expect(drifts).toEqual([]);
    await runner('ip6tables', ['-t', 'filter', '-F', 'TWILL-FWD']);
    await waitFor(() => drifts.length > 0, { timeoutMs: slowBound(2_000), what: 'poll drift' });
    expect(drifts[0]).toEqual({ kind: 'chains', tables: ['filter'] });
  });
});
