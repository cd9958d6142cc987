// The programmer on a real kernel, in a namespace the test makes: a desired
// state gives exactly the expected routes, neighbours, FDB entries, device
// and chains; a second pass does nothing; owned leftovers are swept and an
// incompatible device is replaced; foreign routes and rules are never
// touched; every pass spawns the same few processes whatever the peer count;
// an ip_forward that cannot be set (a read-only sysctl directory) costs the
// pass nothing else and stands in every report until it can be set; a CNI
// gateway of an earlier lease left on a bridge is removed, so the route to
// its subnet's new holder goes in.
import { admitPeers } from '../../src/lease/admit.ts';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { desiredState, type BackendInput } from '../../src/dataplane/desired.ts';
import { masqRules, forwardRules } from '../../src/dataplane/masq.ts';
import { Reconciler } from '../../src/dataplane/reconciler.ts';
import { SPREAD_WAYS } from '../../src/dataplane/apply.ts';
import { SPREAD_MIN_OPS } from '../../src/dataplane/render.ts';
import { ensureIpForward } from '../../src/dataplane/sysctl.ts';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelView, masqOf, peerLease, SELF_MAC } from '../helpers/dataplane.ts';
import { captureLog } from '../helpers/log.ts';
import {
  namespacePids,
  NetnsLab,
  nsFeeder,
  nsForwarding,
  nsRunner,
  sweepStaleNetns,
} from '../../lab/kit/netns.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';
import { fakeProcSysNet } from '../helpers/sysctl.ts';

const lab = new NetnsLab();
let ns: string;
let runner: Runner;

function reconciler(input: () => BackendInput, r: Runner = runner): Reconciler {
  return new Reconciler({
    runner: r,
    logger: captureLog().logger,
    desired: () => desiredState(input()),
    ensureForwarding: nsForwarding(ns),
    resyncMs: 60_000,
  });
}

const VXLAN_PEERS = [1, 2, 4].map((n) => peerLease(n, { vxlan: true }));

/**
 * A reconciler running its loop over vxlan peers (read on every pass) until the test ends, with its
 * log.
 */
function running(
  peers: () => BackendInput['peers'],
  o: { kept?: boolean } = {},
): {
  r: Reconciler;
  log: ReturnType<typeof captureLog>;
  stop: () => Promise<void>;
} {
  const log = captureLog();
  const r = new Reconciler({
    runner,
    ...(o.kept === true ? { feed: nsFeeder(ns) } : {}),
    logger: log.logger,
    desired: () => desiredState(backendInput({ backend: 'vxlan', peers: peers() })),
    ensureForwarding: nsForwarding(ns),
    resyncMs: 600_000,
  });
  const ctl = new AbortController();
  const loop = r.run(ctl.signal);
  const stop = async (): Promise<void> => {
    ctl.abort();
    await loop;
  };
  onTestFinished(stop);
  return { r, log, stop };
}

beforeAll(async () => {
  await sweepStaleNetns();
  ns = await lab.add('dp');
  const other = await lab.add('dp-peer');
  await lab.link(
    { ns, dev: 'eth0', cidr: '10.123.0.2/24' },
    { ns: other, dev: 'eth0', cidr: '10.123.0.1/24' },
  );
  runner = nsRunner(ns);
});
afterAll(() => lab.destroy());
beforeEach(async () => {
  // start every test from a namespace without twill's objects
  await reconciler(() => backendInput({ backend: 'host-gw', peers: [], ipMasq: false })).pass(
    AbortSignal.timeout(20_000),
  );
  await runner('iptables', [
    '-t',
    'filter',
    '-D',
    'FORWARD',
    '-m',
    'comment',
    '--comment',
    'twill forward',
    '-j',
    'TWILL-FWD',
  ]).catch(() => undefined);
});

describe('dataplane programmer on a real kernel', () => {
  it('programs vxlan exactly, flannel-shaped, and a second pass does nothing', async () => {
    const input = backendInput({ backend: 'vxlan', peers: VXLAN_PEERS });
    const r = reconciler(() => input);
    const first = await r.pass(AbortSignal.timeout(20_000));
    expect(first.failures).toEqual([]);
    expect(first.ops.length).toBeGreaterThan(0);
    const view = await kernelView(runner);
    expect(view.routes).toEqual([
      '10.244.1.0/24 via 10.244.1.0 dev twill.1 proto 151 metric 717825 onlink',
      '10.244.2.0/24 via 10.244.2.0 dev twill.1 proto 151 metric 717826 onlink',
      '10.244.4.0/24 via 10.244.4.0 dev twill.1 proto 151 metric 717828 onlink',
    ]);
    expect(view.neighs).toEqual([
      '10.244.1.0 lladdr 02:00:00:00:00:01 PERMANENT',
      '10.244.2.0 lladdr 02:00:00:00:00:02 PERMANENT',
      '10.244.4.0 lladdr 02:00:00:00:00:04 PERMANENT',
    ]);
    expect(view.fdb).toEqual([
      '02:00:00:00:00:01 dst 10.123.0.1 self permanent',
      '02:00:00:00:00:02 dst 10.123.0.2 self permanent',
      '02:00:00:00:00:04 dst 10.123.0.4 self permanent',
    ]);
    const [link] = JSON.parse(
      (await runner('ip', ['-d', '-j', 'addr', 'show', 'dev', 'twill.1'])).stdout,
    ) as { flags: string[]; addr_info: { family: string; local: string; prefixlen: number }[] }[];
    expect(link).toMatchObject({
      mtu: 1450,
      address: SELF_MAC,
      linkinfo: {
        info_kind: 'vxlan',
        info_data: { id: 1, local: '10.123.0.2', link: 'eth0', port: 8472, learning: false },
      },
    });
    expect(link?.flags.includes('UP')).toBe(true);
    expect(link?.addr_info.filter((a) => a.family === 'inet')).toMatchObject([
      { local: '10.244.3.0', prefixlen: 32 },
    ]);
    const masq = masqOf(desiredState(input));
    expect(view.postrtg).toBe(['-N TWILL-POSTRTG', ...masqRules(masq), ''].join('\n'));
    expect(view.fwd).toBe(['-N TWILL-FWD', ...forwardRules(masq), ''].join('\n'));
    expect(view.postrouting.match(/-j TWILL-POSTRTG/g)).toHaveLength(1);
    expect(view.forward.match(/-j TWILL-FWD/g)).toHaveLength(1);
    expect((await runner('sysctl', ['-n', 'net.ipv4.ip_forward'])).stdout.trim()).toBe('1');
    const second = await r.pass(AbortSignal.timeout(20_000));
    expect(second.ops).toEqual([]);
    expect(second.converged).toBe(true);
  });

  it('programs host-gw routes for on-link peers, reports the others, and removes the vxlan device', async () => {
    await reconciler(() => backendInput({ backend: 'vxlan', peers: VXLAN_PEERS })).pass(
      AbortSignal.timeout(20_000),
    );
    const peers = [
      peerLease(1, { vxlan: false }),
      peerLease(5, { vxlan: false }),
      peerLease(6, { vxlan: false, ipBase: '198.51.100' }),
    ];
    // admission (as the daemon's tracker runs it) refuses the peer that is not on-link
    const input = backendInput({ backend: 'host-gw', peers });
    const admission = admitPeers(peers, {
      config: input.config,
      self: input.self.subnet,
      underlay: input.choice.iface,
    });
    expect(admission.refused).toMatchObject([
      {
        lease: { key: '10.244.6.0-24' },
        refusal: { reason: 'not-on-link', detail: expect.stringContaining('not on-link') },
      },
    ]);
    const r = reconciler(() => ({ ...input, peers: admission.admitted }));
    const report = await r.pass(AbortSignal.timeout(20_000));
    expect(report.failures).toEqual([]);
    const view = await kernelView(runner);
    expect(view.routes).toEqual([
      '10.244.1.0/24 via 10.123.0.1 dev eth0 proto 151 metric 717825',
      '10.244.5.0/24 via 10.123.0.5 dev eth0 proto 151 metric 717829',
    ]);
    expect(view.devices).toEqual([]);
    expect((await r.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
  });

  it("takes over an older twill's metric-0 routes: its own metric's route added, then the old one deleted by the next pass", async () => {
    // what an older twill (routes at metric 0) left
    for (const n of [1, 5])
      await runner('ip', [
        'route',
        'add',
        `10.244.${n}.0/24`,
        'via',
        `10.123.0.${n}`,
        'dev',
        'eth0',
        'proto',
        '151',
      ]);
    const peers = [peerLease(1, { vxlan: false }), peerLease(5, { vxlan: false })];
    const r = reconciler(() => backendInput({ backend: 'host-gw', peers }));
    const report = await r.pass(AbortSignal.timeout(20_000));
    expect(report.failures).toEqual([]);
    // the new routes first, beside the old ones, which still route
    expect(report.ops.filter((op) => op.kind === 'route').map((op) => op.action)).toEqual([
      'add',
      'add',
    ]);
    expect((await kernelView(runner)).routes).toHaveLength(4);
    // the next pass sees them in, and deletes the old ones
    const next = await r.pass(AbortSignal.timeout(20_000));
    expect(next.failures).toEqual([]);
    expect(next.ops.map((op) => [op.kind, op.action])).toEqual([
      ['route', 'delete'],
      ['route', 'delete'],
    ]);
    expect((await kernelView(runner)).routes).toEqual([
      '10.244.1.0/24 via 10.123.0.1 dev eth0 proto 151 metric 717825',
      '10.244.5.0/24 via 10.123.0.5 dev eth0 proto 151 metric 717829',
    ]);
    expect((await r.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
  });

  it('sweeps owned leftovers, replaces an incompatible device, and leaves foreign state alone', async () => {
    const run = (...args: string[]): Promise<unknown> => runner(args[0] as string, args.slice(1));
    await run(
      'ip',
      'link',
      'add',
      'twill.1',
      'type',
      'vxlan',
      'id',
      '1',
      'local',
      '10.123.0.2',
      'dev',
      'eth0',
      'dstport',
      '4789',
    );
    await run(
      'ip',
      'link',
      'add',
      'twill.9',
      'type',
      'vxlan',
      'id',
      '9',
      'dstport',
      '8472',
      'dev',
      'eth0',
    );
    await run(
      'ip',
      'route',
      'add',
      '10.244.77.0/24',
      'via',
      '10.123.0.77',
      'dev',
      'eth0',
      'proto',
      '151',
    ); // ours, no lease explains it
    await run('ip', 'route', 'add', '10.99.0.0/24', 'via', '10.123.0.7', 'dev', 'eth0'); // foreign
    await run(
      'ip',
      'route',
      'add',
      '10.244.88.0/24',
      'via',
      '10.123.0.8',
      'dev',
      'eth0',
      'proto',
      'static',
    ); // foreign, inside the network
    await run(
      'iptables',
      '-t',
      'nat',
      '-A',
      'POSTROUTING',
      '-s',
      '10.99.0.0/24',
      '-j',
      'MASQUERADE',
    );
    await run('iptables', '-t', 'filter', '-A', 'FORWARD', '-s', '10.99.0.0/24', '-j', 'ACCEPT');
    onTestFinished(async () => {
      for (const c of [
        ['ip', 'route', 'del', '10.99.0.0/24'],
        ['ip', 'route', 'del', '10.244.88.0/24'],
        ['iptables', '-t', 'nat', '-D', 'POSTROUTING', '-s', '10.99.0.0/24', '-j', 'MASQUERADE'],
        ['iptables', '-t', 'filter', '-D', 'FORWARD', '-s', '10.99.0.0/24', '-j', 'ACCEPT'],
      ]) {
        await run(...c).catch(() => undefined);
      }
    });
    const r = reconciler(() => backendInput({ backend: 'vxlan', peers: VXLAN_PEERS }));
    expect((await r.pass(AbortSignal.timeout(20_000))).failures).toEqual([]);
    const view = await kernelView(runner);
    expect(view.devices).toEqual(['twill.1']);
    const [link] = JSON.parse(
      (await runner('ip', ['-d', '-j', 'link', 'show', 'dev', 'twill.1'])).stdout,
    ) as { linkinfo: { info_data: { port: number } } }[];
    expect(link?.linkinfo.info_data.port).toBe(8472);
    expect(view.routes).not.toContain('10.244.77.0/24 via 10.123.0.77 dev eth0 proto 151');
    expect(view.routes).toHaveLength(3);
    const main = (await runner('ip', ['route', 'show'])).stdout;
    expect(main).toContain('10.99.0.0/24 via 10.123.0.7 dev eth0');
    expect(main).toContain('10.244.88.0/24 via 10.123.0.8 dev eth0 proto static');
    expect(view.postrouting).toContain('-A POSTROUTING -s 10.99.0.0/24 -j MASQUERADE');
    expect(view.forward).toContain('-A FORWARD -s 10.99.0.0/24 -j ACCEPT');
    expect((await r.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
  });

  it('keeps failing on a foreign route without holding back a new peer', async () => {
    await runner('ip', [
      'route',
      'add',
      '10.244.4.0/24',
      'via',
      '10.123.0.44',
      'dev',
      'eth0',
      'proto',
      'static',
    ]);
    onTestFinished(() =>
      runner('ip', ['route', 'del', '10.244.4.0/24', 'proto', 'static']).then(
        () => undefined,
        () => undefined,
      ),
    );
    let peers = VXLAN_PEERS;
    const { r, log } = running(() => peers);
    // the foreign route makes every pass fail, and the back-off grow
    await waitFor(
      () =>
        log.lines.filter((l) => l.msg === 'dataplane pass could not apply every change').length >=
        4,
      { timeoutMs: 10_000, what: 'failing passes' },
    );
    expect(
      JSON.stringify(
        log.lines.find((l) => l.msg === 'dataplane pass could not apply every change'),
      ),
    ).toContain('route add 10.244.4.0/24 via 10.244.4.0 dev twill.1 onlink proto 151: ');
    // twill wrote no route of its own metric there, which the foreign one would have hidden
    expect((await runner('ip', ['route', 'show', '10.244.4.0/24'])).stdout.trim()).toBe(
      '10.244.4.0/24 via 10.123.0.44 dev eth0 proto static',
    );
    peers = [...VXLAN_PEERS, peerLease(5, { vxlan: true })];
    r.leasesChanged();
    const took = await waitFor(
      async () =>
        (await runner('ip', ['route', 'show', '10.244.5.0/24'])).stdout.includes('proto 151'),
      { timeoutMs: slowBound(1_000), what: 'the new peer route' },
    );
    expect(took).toBeLessThan(slowBound(1_000));
    // the foreign route gone: the next pass (after its back-off, at most 5 s) writes twill's
    await runner('ip', ['route', 'del', '10.244.4.0/24', 'proto', 'static']);
    await waitFor(
      async () =>
        (await runner('ip', ['route', 'show', '10.244.4.0/24'])).stdout.trim() ===
        '10.244.4.0/24 via 10.244.4.0 dev twill.1 proto 151 metric 717828 onlink',
      { timeoutMs: slowBound(10_000), what: "twill's route once the foreign one is gone" },
    );
  });

  it('programs everything when ip_forward cannot be written, reports it on every pass until it can, and logs it once', async () => {
    // a sysctl directory whose ip_forward reads 0 and is read-only, as a container's /proc/sys is
    const sys = await fakeProcSysNet({ ipForward: '0', ro: true });
    onTestFinished(() => sys.remove());
    let peers = VXLAN_PEERS;
    const log = captureLog();
    const r = new Reconciler({
      runner,
      logger: log.logger,
      desired: () => desiredState(backendInput({ backend: 'vxlan', peers })),
      ensureForwarding: () => ensureIpForward(sys.dir),
      resyncMs: 600_000,
    });
    const erofs = `sysctl: net.ipv4.ip_forward is 0, cannot set it to 1: EROFS: read-only file system, open '${sys.dir}/ipv4/ip_forward' (read-only: in a container that is not privileged, mount the host's /proc/sys/net and pass its path as --proc-sys-net)`;
    const first = await r.pass(AbortSignal.timeout(20_000));
    expect(first.failures).toEqual([erofs]);
    expect(first.ops.length).toBeGreaterThan(0);
    const view = await kernelView(runner);
    expect(view.routes).toHaveLength(3);
    expect(view.neighs).toHaveLength(3);
    expect(view.fdb).toHaveLength(3);
    expect(view.fwd).toContain('-A TWILL-FWD');
    // nothing left to do but the sysctl: converged entries, still a failed pass
    const second = await r.pass(AbortSignal.timeout(20_000));
    expect(second).toMatchObject({ ops: [], converged: true, failures: [erofs] });
    // passes that do not check the sysctl (a lease change applied as a delta) still carry it
    const ctl = new AbortController();
    const loop = r.run(ctl.signal);
    onTestFinished(async () => {
      ctl.abort();
      await loop;
    });
    await waitFor(() => r.lastPass() !== second, {
      timeoutMs: slowBound(2_000),
      what: "the loop's first pass",
    });
    peers = [...VXLAN_PEERS, peerLease(5, { vxlan: true })];
    r.leasesChanged();
    await waitFor(() => r.lastPass()?.kind === 'delta', {
      timeoutMs: slowBound(2_000),
      what: 'a delta pass',
    });
    expect(r.lastPass()?.failures).toEqual([erofs]);
    expect((await runner('ip', ['route', 'show', '10.244.5.0/24'])).stdout).toContain('proto 151');
    expect(
      log.lines.filter((l) => l.msg.startsWith('cannot keep net.ipv4.ip_forward at 1')),
    ).toHaveLength(1);
    // writable again: the next observed pass sets it, and the failure is gone
    await sys.readOnly(false);
    r.trigger('test');
    await waitFor(() => r.lastPass()?.failures.length === 0, {
      timeoutMs: slowBound(2_000),
      what: 'a clean pass',
    });
    expect((await readFile(join(sys.dir, 'ipv4/ip_forward'), 'utf8')).trim()).toBe('1');
    expect(log.lines.map((l) => l.msg)).toEqual(
      expect.arrayContaining([
        'net.ipv4.ip_forward was 0; set it to 1',
        'net.ipv4.ip_forward is 1 again',
      ]),
    );
  });

  it('spawns the same few processes per pass whatever the number of peers', async () => {
    const spawned = async (peers: number): Promise<string[]> => {
      const calls: string[] = [];
      let counting = false;
      const counted: Runner = (file, args, opts) => {
        if (counting) calls.push(file);
        return runner(file, args, opts);
      };
      const list = Array.from({ length: peers }, (_, i) =>
        peerLease(i < 2 ? i + 1 : i + 2, { vxlan: true }),
      );
      let input = backendInput({ backend: 'host-gw', peers: [], ipMasq: false });
      const r = reconciler(() => input, counted);
      // not counted: the first pass after a start also reads what a dual-stack run may have left
      await r.pass(AbortSignal.timeout(20_000));
      input = backendInput({ backend: 'vxlan', peers: list });
      counting = true;
      const report = await r.pass(AbortSignal.timeout(30_000));
      expect(report.failures).toEqual([]);
      expect((await kernelView(runner)).routes).toHaveLength(peers);
      return calls.sort();
    };
    const few = await spawned(3);
    const many = await spawned(240);
    expect(many).toEqual(few);
    expect(
      many.filter((f) => f === 'ip' || f === 'bridge' || f === 'iptables-restore'),
    ).toHaveLength(
      few.filter((f) => f === 'ip' || f === 'bridge' || f === 'iptables-restore').length,
    );
    expect(many.length).toBeLessThanOrEqual(12);
  });

  it('spreads a big cold start over processes at once and leaves every entry, which a second pass finds matching', async () => {
    const batches: { file: string; first: string; lines: number }[] = [];
    const counted: Runner = (file, args, opts) => {
      if (opts?.input !== undefined && (file === 'ip' || file === 'bridge')) {
        const lines = opts.input.trimEnd().split('\n');
        batches.push({ file, first: lines[0]?.split(' ')[0] ?? '', lines: lines.length });
      }
      return runner(file, args, opts);
    };
    // 600 peers: 1,200 neighbours and routes in the ip (post) batch, past SPREAD_MIN_OPS
    const list = Array.from({ length: 600 }, (_, i) => peerLease(i + 4, { vxlan: true }));
    expect(2 * list.length).toBeGreaterThanOrEqual(SPREAD_MIN_OPS);
    const input = backendInput({ backend: 'vxlan', peers: list, network: '10.240.0.0/12' });
    const r = reconciler(() => input, counted);
    const report = await r.pass(AbortSignal.timeout(60_000));
    expect(report.failures).toEqual([]);
    const view = await kernelView(runner);
    expect([view.routes.length, view.neighs.length, view.fdb.length]).toEqual([600, 600, 600]);
    const want = desiredState(input);
    expect(view.routes.map((l) => l.split(' ')[0]).sort()).toEqual(
      want.routes.map((x) => x.dst).sort(),
    );
    // one ip batch of neighbours, the routes in SPREAD_WAYS parts of equal size (± 1); on a
    // one-core machine, neighbours and routes in one batch
    const neighBatches = batches.filter((b) => b.file === 'ip' && b.first === 'neigh');
    const routeParts = batches.filter((b) => b.file === 'ip' && b.first === 'route');
    if (SPREAD_WAYS === 1) {
      expect(neighBatches).toEqual([{ file: 'ip', first: 'neigh', lines: 1200 }]);
      expect(routeParts).toEqual([]);
    } else {
      expect(neighBatches).toEqual([{ file: 'ip', first: 'neigh', lines: 600 }]);
      expect(routeParts).toHaveLength(SPREAD_WAYS);
      for (const b of routeParts)
        expect(Math.abs(b.lines - 600 / SPREAD_WAYS)).toBeLessThanOrEqual(1);
    }
    const again = await r.pass(AbortSignal.timeout(60_000));
    expect([again.ops.length, again.failures]).toEqual([0, []]);
  });

  it('applies a lease change without reading the kernel when the last pass left it matching', async () => {
    let peers = VXLAN_PEERS;
    const { r, log } = running(() => peers);
    await waitFor(() => r.lastPass()?.converged === true, {
      timeoutMs: slowBound(2_000),
      what: 'converged',
    });
    const passes = (): { kind: string; spawns: number }[] =>
      log.lines
        .filter((l) => l.msg === 'dataplane updated')
        .map((l) => ({ kind: String(l.kind), spawns: Number(l.spawns) }));
    const before = passes().length;
    // a new peer: its FDB entry, then its neighbour and route, in two batches, nothing read
    peers = [...VXLAN_PEERS, peerLease(5, { vxlan: true })];
    r.leasesChanged();
    // the kernel has the change before the pass that made it is logged
    await waitFor(
      async () =>
        (await runner('ip', ['route', 'show', '10.244.5.0/24'])).stdout.includes('proto 151') &&
        passes().length > before,
      { timeoutMs: slowBound(1_000), what: 'the new peer route' },
    );
    expect(passes().slice(before)).toEqual([{ kind: 'delta', spawns: 2 }]);
    const view = await kernelView(runner);
    expect(view.routes).toHaveLength(4);
    // a peer gone: its route and neighbour, then its FDB entry, in two batches
    peers = VXLAN_PEERS;
    r.leasesChanged();
    await waitFor(
      async () =>
        (await runner('ip', ['route', 'show', '10.244.5.0/24'])).stdout.trim() === '' &&
        passes().length > before + 1,
      { timeoutMs: slowBound(1_000), what: 'the peer route gone' },
    );
    expect(passes().slice(before + 1)).toEqual([{ kind: 'delta', spawns: 2 }]);
    await waitFor(
      async () =>
        (await kernelView(runner)).neighs.length === 3 &&
        (await kernelView(runner)).fdb.length === 3,
      { timeoutMs: slowBound(1_000), what: 'its neighbour and FDB entry gone' },
    );
  });

  it('feeds lease changes to kept ip and bridge processes, started again after the device is made again', async () => {
    let peers = VXLAN_PEERS;
    const { r, log, stop } = running(() => peers, { kept: true });
    await waitFor(() => r.lastPass()?.converged === true, {
      timeoutMs: slowBound(2_000),
      what: 'converged',
    });
    const passes = (): { kind: string; spawns: number }[] =>
      log.lines
        .filter((l) => l.msg === 'dataplane updated' || l.msg === 'repaired dataplane drift')
        .map((l) => ({ kind: String(l.kind), spawns: Number(l.spawns) }));
    const route = async (n: number): Promise<string> =>
      (await runner('ip', ['route', 'show', `10.244.${n}.0/24`])).stdout;
    /** peers 1, 2, 4 and `more`; resolves when `n`'s route is there (or gone, with `gone`) */
    const change = async (more: number[], n: number, gone = false): Promise<void> => {
      const logged = passes().length;
      peers = [...VXLAN_PEERS, ...more.map((m) => peerLease(m, { vxlan: true }))];
      r.leasesChanged();
      // the kernel has the change before the pass that made it is logged
      await waitFor(
        async () => (await route(n)).includes('proto 151') !== gone && passes().length > logged,
        { timeoutMs: slowBound(1_000), what: `peer ${n}'s route ${gone ? 'gone' : 'there'}` },
      );
    };
    const before = passes().length;
    // the converged pass started the kept bridge and ip: no change starts a process
    await change([5], 5);
    await change([5, 6], 6);
    await change([5], 6, true);
    expect(passes().slice(before)).toEqual([
      { kind: 'delta', spawns: 0 },
      { kind: 'delta', spawns: 0 },
      { kind: 'delta', spawns: 0 },
    ]);
    const view = await kernelView(runner);
    expect([view.routes.length, view.neighs.length, view.fdb.length]).toEqual([4, 4, 4]);
    // the device deleted and made again by a full pass: the kept processes knew its old index, so
    // they are ended and started again, and the next change is still a delta that applies
    await runner('ip', ['link', 'del', 'twill.1']);
    const full = passes().length;
    r.trigger('test');
    await waitFor(async () => (await route(5)).includes('proto 151'), {
      timeoutMs: slowBound(2_000),
      what: 'the device and its entries back',
    });
    // the kernel has the entries back before the pass that made them is logged, and until then
    // the last pass is the converged one before the delete
    await waitFor(() => passes().length > full && r.lastPass()?.converged === true, {
      timeoutMs: slowBound(2_000),
      what: 'converged again',
    });
    const after = passes().length;
    await change([5, 6], 6);
    expect(passes().slice(after)).toEqual([{ kind: 'delta', spawns: 0 }]);
    // stopped: no kept process is left in the namespace
    await stop();
    await waitFor(async () => (await namespacePids(ns)).length === 0, {
      timeoutMs: slowBound(2_000),
      what: 'the kept processes gone',
    });
  });

  it("removes a CNI gateway of an earlier lease of ours from a bridge, so the route to that subnet's new holder goes in", async () => {
    // this node held 10.244.216.0/24 before 10.244.3.0/24: the CNI plugin put a gateway for each on
    // cni0 and removed neither; the old one's connected route would make twill's route to the
    // peer that holds 10.244.216.0/24 now fail ("File exists") on every pass
    await runner('ip', ['link', 'add', 'cni0', 'type', 'bridge']);
    // a device that is not a bridge, with an address in the pod network outside our subnet
    await runner('ip', ['link', 'add', 'podx', 'type', 'veth', 'peer', 'name', 'podxp']);
    onTestFinished(async () => {
      for (const dev of ['cni0', 'podx'])
        await runner('ip', ['link', 'del', dev]).catch(() => undefined);
    });
    for (const a of ['10.244.216.1/24', '10.244.3.1/24'])
      await runner('ip', ['addr', 'add', a, 'dev', 'cni0']);
    await runner('ip', ['addr', 'add', '10.244.217.5/24', 'dev', 'podx']);
    for (const dev of ['cni0', 'podx', 'podxp']) await runner('ip', ['link', 'set', dev, 'up']);
    expect((await runner('ip', ['route', 'show', '10.244.216.0/24'])).stdout).toContain(
      'dev cni0 proto kernel',
    );
    const log = captureLog();
    const r = new Reconciler({
      runner,
      logger: log.logger,
      desired: () =>
        desiredState(
          backendInput({
            backend: 'vxlan',
            peers: [...VXLAN_PEERS, peerLease(216, { vxlan: true })],
          }),
        ),
      ensureForwarding: nsForwarding(ns),
      resyncMs: 60_000,
    });
    const first = await r.pass(AbortSignal.timeout(20_000));
    expect(first.failures).toEqual([]);
    expect((await kernelView(runner)).routes).toContain(
      '10.244.216.0/24 via 10.244.216.0 dev twill.1 proto 151 metric 718040 onlink',
    );
    const inet = async (dev: string): Promise<string[]> => {
      const [link] = JSON.parse(
        (await runner('ip', ['-4', '-json', 'addr', 'show', 'dev', dev])).stdout,
      ) as { addr_info: { local: string; prefixlen: number }[] }[];
      return (link?.addr_info ?? []).map((a) => `${a.local}/${a.prefixlen}`);
    };
    // the old gateway is gone, the current one kept; the veth's address is not twill's business
    expect(await inet('cni0')).toEqual(['10.244.3.1/24']);
    expect(await inet('podx')).toEqual(['10.244.217.5/24']);
    // the pass log names what it removed
    expect(log.lines.find((l) => l.msg === 'dataplane updated')?.ops).toMatchObject({
      'stale address delete': 1,
    });
    expect((await r.pass(AbortSignal.timeout(20_000))).ops).toEqual([]);
  });
});
