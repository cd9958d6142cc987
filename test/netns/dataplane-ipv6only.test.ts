// The programmer on an IPv6-only node ("EnableIPv4": false) on a real kernel,
// in namespaces the test makes, joined by an underlay with IPv6 addresses
// only: vxlan gives exactly the expected twill-v6.<VNI>, neighbours, FDB
// entries, onlink routes and ip6tables chains, and nothing IPv4 (no
// twill.<VNI>, no IPv4 route of twill's, no iptables chain or jump, IPv4
// forwarding left as it was); host-gw routes via PublicIPv6; pods on two
// IPv6-only nodes reach each other over both backends; and a restart with
// IPv4 off removes on its first pass what a dual-stack run left (twill.<VNI>,
// IPv4 routes, iptables chains and jumps), foreign objects untouched, later
// passes reading no IPv4; an IPv6 CNI gateway of an earlier lease on a bridge
// is removed, an IPv4 one left alone.
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { desiredState, type BackendInput } from '../../src/dataplane/desired.ts';
import { forwardRules6, masqRules6 } from '../../src/dataplane/masq.ts';
import { Reconciler } from '../../src/dataplane/reconciler.ts';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelView, masq6Of, peerLease, SELF_MAC6 } from '../helpers/dataplane.ts';
import { captureLog } from '../helpers/log.ts';
import { nsFamilyForwarding } from '../helpers/sysctl.ts';
import { addVeth, NetnsLab, nsRunner, sweepStaleNetns } from '../../lab/kit/netns.ts';

const lab = new NetnsLab();
let ns: string;
let peerNs: string;
let runner: Runner;
let peerRunner: Runner;

/** A reconciler as the daemon makes one for `input`: forwarding of the families it runs. */
function reconciler(input: () => BackendInput, o: { ns?: string; r?: Runner } = {}): Reconciler {
  const forwarding = nsFamilyForwarding(o.ns ?? ns);
  const families = () => {
    const config = input().config;
    return { ipv4: config.ipv4 !== null, ipv6: config.ipv6 !== null };
  };
  return new Reconciler({
    runner: o.r ?? runner,
    logger: captureLog().logger,
    desired: () => desiredState(input()),
    ensureForwarding: () => forwarding(families()),
    resyncMs: 60_000,
  });
}

const only6 = (peers: BackendInput['peers'], backend: 'vxlan' | 'host-gw' = 'vxlan') =>
  backendInput({ backend, ipv6: true, ipv4: false, peers });
const peers6 = (vxlan: boolean, ns = [1, 2, 4]) =>
  ns.map((n) => peerLease(n, { vxlan, ipv6: true, ipv4: false }));

beforeAll(async () => {
  await sweepStaleNetns();
  ns = await lab.add('v6o');
  peerNs = await lab.add('v6o-peer');
  runner = nsRunner(ns);
  peerRunner = nsRunner(peerNs);
  // the underlay: IPv6 only (no duplicate address detection: usable at once)
  await addVeth({ ns, dev: 'eth0', peerNs, peerDev: 'eth0' });
  for (const [r, addr] of [
    [runner, 'fd7b::2/64'],
    [peerRunner, 'fd7b::1/64'],
  ] as const) {
    await r('ip', ['addr', 'add', addr, 'dev', 'eth0', 'nodad']);
    await r('ip', ['link', 'set', 'eth0', 'up']);
  }
});
afterAll(() => lab.destroy());

/** Removes twill's objects of both families from a namespace (the forward chains too). */
async function clean(r: Runner, nsName: string): Promise<void> {
  await reconciler(() => only6([], 'host-gw'), { ns: nsName, r }).pass(AbortSignal.timeout(20_000));
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

/** What the namespace holds of twill's IPv4 objects: it must hold none. */
async function ipv4Objects(r: Runner): Promise<string[]> {
  const view = await kernelView(r);
  return [
    ...view.routes,
    ...view.devices.filter((d) => d.startsWith('twill.')),
    ...(view.postrtg === '' ? [] : [view.postrtg]),
    ...(view.fwd === '' ? [] : [view.fwd]),
    ...[view.postrouting, view.forward].filter((c) => c.includes('TWILL')),
  ];
}

describe('IPv6-only dataplane on a real kernel', () => {
  it('programs vxlan in IPv6 alone, exactly, flannel-shaped, nothing IPv4, and a second pass does nothing', async () => {
    await runner('sysctl', ['-qw', 'net.ipv4.ip_forward=0', 'net.ipv6.conf.all.forwarding=0']);
    const input = only6(peers6(true));
    const r = reconciler(() => input);
    const first = await r.pass(AbortSignal.timeout(20_000));
    expect(first.failures).toEqual([]);
    const view = await kernelView(runner, { ipv6: true });
    expect(view.devices).toEqual(['twill-v6.1']);
    expect(await ipv4Objects(runner)).toEqual([]);
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
    expect(link).toMatchObject({
      mtu: 1430,
      address: SELF_MAC6,
      linkinfo: {
        info_kind: 'vxlan',
        info_data: { id: 1, local6: 'fd7b::2', link: 'eth0', port: 8472, learning: false },
      },
    });
    expect(link?.flags.includes('UP')).toBe(true);
    expect(link?.addr_info).toMatchObject([
      { family: 'inet6', local: 'fd00:0:0:3::', prefixlen: 128, nodad: true },
    ]);
    const masq6 = masq6Of(desiredState(input));
    expect(view.v6?.postrtg).toBe(['-N TWILL-POSTRTG', ...masqRules6(masq6), ''].join('\n'));
    expect(view.v6?.fwd).toBe(['-N TWILL-FWD', ...forwardRules6(masq6), ''].join('\n'));
    expect(view.v6?.postrouting.match(/-j TWILL-POSTRTG/g)).toHaveLength(1);
    expect(view.v6?.forward.match(/-j TWILL-FWD/g)).toHaveLength(1);
    // IPv6 forwarding on; IPv4's is not twill's business on this node
    const sysctl = async (name: string) => (await runner('sysctl', ['-n', name])).stdout.trim();
    expect(await sysctl('net.ipv6.conf.all.forwarding')).toBe('1');
    expect(await sysctl('net.ipv4.ip_forward')).toBe('0');
    const second = await r.pass(AbortSignal.timeout(20_000));
    expect(second.ops).toEqual([]);
    expect(second.converged).toBe(true);
  });

  it('removes an IPv6 CNI gateway of an earlier lease of ours from a bridge, and no IPv4 address (our IPv4 subnet is unknown)', async () => {
    await runner('ip', ['link', 'add', 'cni0', 'type', 'bridge']);
    onTestFinished(async () => {
      await runner('ip', ['link', 'del', 'cni0']).catch(() => undefined);
    });
    // an IPv4 gateway an earlier IPv4 run's CNI plugin left is not this node's to judge
    for (const a of ['10.244.9.1/24', 'fd00:0:0:9::1/64', 'fd00:0:0:3::1/64'])
      await runner('ip', ['addr', 'add', a, 'dev', 'cni0', ...(a.includes(':') ? ['nodad'] : [])]);
    await runner('ip', ['link', 'set', 'cni0', 'up']);
    const r = reconciler(() => only6(peers6(true, [1, 9])));
    const first = await r.pass(AbortSignal.timeout(20_000));
    expect(first.failures).toEqual([]);
    expect((await kernelView(runner, { ipv6: true })).v6?.routes).toContain(
      'fd00:0:0:9::/64 via fd00:0:0:9:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
    );
    const [link] = JSON.parse(
      (await runner('ip', ['-json', 'addr', 'show', 'dev', 'cni0'])).stdout,
    ) as { addr_info: { local: string; prefixlen: number }[] }[];
    expect(
      (link?.addr_info ?? [])
        .map((a) => `${a.local}/${a.prefixlen}`)
        .filter((a) => !a.startsWith('fe80:')),
    ).toEqual(['10.244.9.1/24', 'fd00:0:0:3::1/64']);
    expect((await r.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
  });

  it('programs host-gw routes via PublicIPv6, no device, nothing IPv4', async () => {
    const hg = reconciler(() => only6(peers6(false, [1, 5]), 'host-gw'));
    expect((await hg.pass(AbortSignal.timeout(20_000))).failures).toEqual([]);
    const view = await kernelView(runner, { ipv6: true });
    expect(view.devices).toEqual([]);
    expect(view.v6?.routes).toEqual([
      'fd00:0:0:1::/64 via fd7b::1 dev eth0 proto 151 metric 1024 pref medium',
      'fd00:0:0:5::/64 via fd7b::5 dev eth0 proto 151 metric 1024 pref medium',
    ]);
    expect(view.v6?.fwd).toContain('-A TWILL-FWD -s fd00::/48');
    expect(await ipv4Objects(runner)).toEqual([]);
    expect((await hg.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
  });

  for (const backend of ['vxlan', 'host-gw'] as const) {
    it(`carries pod-to-pod IPv6 between two IPv6-only nodes (${backend})`, async () => {
      // this node is node 3 (fd00:0:0:3::/64 at fd7b::2); the peer namespace is node 1 (fd7b::1)
      const vx = backend === 'vxlan';
      const here = only6([peerLease(1, { vxlan: vx, ipv6: true, ipv4: false })], backend);
      const base = backendInput({
        backend,
        ipv6: true,
        ipv4: false,
        peers: [here.self],
        ifaceIp6: 'fd7b::1',
      });
      const there: BackendInput = {
        ...base,
        self: peerLease(1, { vxlan: vx, ipv6: true, ipv4: false }),
      };
      for (const [input, r, nsName] of [
        [here, runner, ns],
        [there, peerRunner, peerNs],
      ] as const) {
        const pass = await reconciler(() => input, { ns: nsName, r }).pass(
          AbortSignal.timeout(20_000),
        );
        expect(pass.failures).toEqual([]);
        expect(await ipv4Objects(r)).toEqual([]);
      }
      // a pod address on each node, in its IPv6 subnet
      const pods: [Runner, string][] = [
        [runner, 'fd00:0:0:3::5'],
        [peerRunner, 'fd00:0:0:1::5'],
      ];
      for (const [r, addr] of pods) {
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
      if (vx) {
        // through the tunnel: the peer's twill-v6 device received it
        const stats = JSON.parse(
          (await peerRunner('ip', ['-s', '-j', 'link', 'show', 'dev', 'twill-v6.1'])).stdout,
        ) as { stats64: { rx: { packets: number } } }[];
        expect(stats[0]?.stats64.rx.packets).toBeGreaterThanOrEqual(2);
      } else {
        expect((await runner('ip', ['-6', 'route', 'get', 'fd00:0:0:1::5'])).stdout).toContain(
          'via fd7b::1 dev eth0',
        );
      }
    });
  }

  it('a restart with IPv4 off removes what a dual-stack run left on its first pass, foreign objects kept, and later passes read no IPv4', async () => {
    // a dual-stack node before: the underlay has an IPv4 address too
    await runner('ip', ['addr', 'add', '10.123.0.2/24', 'dev', 'eth0']);
    onTestFinished(async () => {
      await runner('ip', ['addr', 'del', '10.123.0.2/24', 'dev', 'eth0']).catch(() => undefined);
    });
    // what a dual-stack vxlan run leaves: twill.1 with its entries and routes, the iptables
    // chains and jumps (and twill-v6.1, which stays); and a host-gw IPv4 route via the underlay,
    // as an earlier host-gw run leaves it, which no device deletion takes away
    const dual = backendInput({
      backend: 'vxlan',
      ipv6: true,
      peers: [1, 5].map((n) => peerLease(n, { vxlan: true, ipv6: true })),
    });
    expect((await reconciler(() => dual).pass(AbortSignal.timeout(20_000))).failures).toEqual([]);
    await runner('ip', ['route', 'add', '10.244.9.0/24', 'via', '10.123.0.9', 'proto', '151']);
    const before = await kernelView(runner, { ipv6: true });
    expect(before.devices).toEqual(['twill-v6.1', 'twill.1']);
    expect(before.routes).toHaveLength(3);
    expect(before.postrouting).toContain('-j TWILL-POSTRTG');
    expect(before.forward).toContain('-j TWILL-FWD');
    // what is not twill's stays: an IPv4 route of another protocol, another FORWARD rule
    await runner('ip', ['route', 'add', '10.99.0.0/24', 'via', '10.123.0.1', 'dev', 'eth0']);
    await runner('iptables', ['-A', 'FORWARD', '-s', '10.99.0.0/24', '-j', 'ACCEPT']);
    onTestFinished(async () => {
      await runner('ip', ['route', 'del', '10.99.0.0/24']).catch(() => undefined);
      await runner('iptables', ['-D', 'FORWARD', '-s', '10.99.0.0/24', '-j', 'ACCEPT']);
    });
    const calls: string[] = [];
    const counted: Runner = (file, args, opts) => {
      calls.push([file, ...args].join(' '));
      return runner(file, args, opts);
    };
    const v6 = reconciler(() => only6(peers6(true, [1, 5])), { r: counted });
    const first = await v6.pass(AbortSignal.timeout(20_000));
    expect(first.failures).toEqual([]);
    expect(await ipv4Objects(runner)).toEqual([]);
    const after = await kernelView(runner, { ipv6: true });
    expect(after.forward).toContain('-A FORWARD -s 10.99.0.0/24 -j ACCEPT');
    expect((await runner('ip', ['route', 'show', '10.99.0.0/24'])).stdout).toContain(
      'via 10.123.0.1',
    );
    // the IPv6 half is an IPv6-only node's
    expect(after.devices).toEqual(['twill-v6.1']);
    expect(after.v6?.routes).toEqual([
      'fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
      'fd00:0:0:5::/64 via fd00:0:0:5:: dev twill-v6.1 proto 151 metric 1024 onlink pref medium',
    ]);
    expect(after.v6?.fwd).toContain('-A TWILL-FWD');
    // the first pass read IPv4's routes and chains; the converged passes after it, nothing IPv4
    const ipv4Reads = (): string[] =>
      calls.filter((c) => c.startsWith('iptables ') || c.startsWith('ip -N -json route'));
    expect(ipv4Reads()).toHaveLength(5);
    calls.length = 0;
    expect((await v6.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
    expect(calls.length).toBeGreaterThan(0);
    expect(ipv4Reads()).toEqual([]);
  });
});
