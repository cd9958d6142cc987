// A host-gw cold start's early routes (src/dataplane/early.ts) on a real kernel, watched by an `ip
// monitor route` that runs from before the daemon starts: the routes of peers nothing can refuse
// are written while the listing is decoded; a lease admission refuses (a subnet wider than
// SubnetLen, a PublicIP off the link, an unreadable value, our own old lease) never becomes a
// route, not even for a moment; a /24 under a refused /23 is routed early (IPv4: the listing is
// taken in key order), one subnet in two keys waits for the first pass, which routes the claim
// admission keeps; nothing
// written early is taken back; a warm restart writes nothing early and changes no route; and a
// dual-stack node writes both families early.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeLeaseValue } from '../../src/lease/codec.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import type { LeaseAttrs } from '../../src/lease/types.ts';
import { startTestDaemon, type TestNode } from '../helpers/daemon.ts';
import { NetnsLab, nsRunner, nsWatch, sweepStaleNetns } from '../../lab/kit/netns.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const lab = new NetnsLab();
let dir: string;
let ns: string;
const monitor = new AbortController();
/** every line `ip monitor route` printed in the node's namespace */
const seen: string[] = [];
const GOOD = Array.from({ length: 30 }, (_, i) => 10 + i);

const attrs = (publicIp: string): LeaseAttrs => ({
  publicIp,
  publicIpv6: null,
  backendType: 'host-gw',
  backendData: null,
});

beforeAll(async () => {
  await sweepStaleNetns();
  dir = await mkdtemp(join(tmpdir(), 'twill-early-'));
  ns = await lab.add('early');
  const r = nsRunner(ns);
  await r('ip', ['link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth1']);
  await r('ip', ['addr', 'add', '192.168.50.1/24', 'dev', 'eth0']);
  await r('ip', ['addr', 'add', 'fd00:192::1/64', 'dev', 'eth0', 'nodad']);
  await r('ip', ['link', 'set', 'eth0', 'up']);
  await r('ip', ['link', 'set', 'eth1', 'up']);
  void nsWatch(ns)('ip', ['monitor', 'route'], {
    signal: monitor.signal,
    onLine: (line) => seen.push(line),
  }).catch(() => undefined);
  await monitorCaughtUp();
}, 30_000);
afterAll(async () => {
  monitor.abort();
  await lab.destroy();
  await rm(dir, { recursive: true, force: true });
});

let marks = 0;
/**
 * Settles once the monitor has printed every route change made before the call: it reports a
 * marker route added after them (the monitor's lines come in the kernel's order). The first call
 * also waits for the monitor to start.
 */
async function monitorCaughtUp(): Promise<void> {
  const r = nsRunner(ns);
  const mark = `10.99.${++marks}.0/24`;
  await waitFor(
    async () => {
      await r('ip', ['route', 'replace', mark, 'via', '192.168.50.99', 'proto', '99']);
      await r('ip', ['route', 'del', mark]);
      return seen.some((l) => l.startsWith('Deleted ') && l.includes(mark));
    },
    { timeoutMs: 10_000, what: `ip monitor reported ${mark}` },
  );
}

/** The peer routes the monitor saw added (`Deleted` false) or deleted, by destination. */
function peerRoutes(lines: readonly string[], deleted: boolean): string[] {
  return lines.flatMap((l) => {
    const m = /^(Deleted )?((?:10\.50\.|fd00:50:)\S+)/.exec(l);
    return m && (m[1] !== undefined) === deleted ? [m[2] as string] : [];
  });
}

describe('a host-gw cold start with routes written early', () => {
  let node: TestNode;
  const kv = new MemoryKv();
  /** The daemon of the node, on eth0, its subnet.env kept across its starts. */
  const start = (): Promise<TestNode> =>
    startTestDaemon({
      store: new KvLeaseStore({ kv, prefix: '/n' }),
      nodeName: 'early',
      publicIp: '192.168.50.1',
      iface: ['eth0'],
      subnetFile: join(dir, 'subnet.env'),
      ns,
    });

  it('routes the clear peers early, never a refused one, and the overlapping ones in the first pass', async () => {
    kv.putRaw('/n/config', '{"Network":"10.50.0.0/16","Backend":{"Type":"host-gw"}}');
    for (const n of GOOD)
      kv.putRaw(`/n/subnets/10.50.${n}.0-24`, encodeLeaseValue(attrs(`192.168.50.${n}`)));
    // refused by admission: wider than SubnetLen, off-link, unreadable, and our own old lease
    kv.putRaw('/n/subnets/10.50.40.0-23', encodeLeaseValue(attrs('192.168.50.40')));
    kv.putRaw('/n/subnets/10.50.50.0-24', encodeLeaseValue(attrs('10.99.0.1')));
    kv.putRaw('/n/subnets/10.50.51.0-24', '{"PublicIP":"192.168.50.51",');
    kv.putRaw('/n/subnets/10.50.52.0-24', encodeLeaseValue(attrs('192.168.50.1')));
    // admitted once the lease is ours: under the /23 (early too: taken in key order, the listing
    // admits it as admission does), and one subnet in two keys (not early: the first claim, the
    // IPv4-only key, keeps it)
    kv.putRaw('/n/subnets/10.50.41.0-24', encodeLeaseValue(attrs('192.168.50.41')));
    kv.putRaw('/n/subnets/10.50.60.0-24', encodeLeaseValue(attrs('192.168.50.60')));
    kv.putRaw(
      '/n/subnets/10.50.60.0-24&fd00:50::-64',
      encodeLeaseValue({ ...attrs('192.168.50.61'), publicIpv6: 'fd00::61' }),
    );
    const from = seen.length;
    node = await start();
    await waitFor(() => node.state()?.pass?.converged === true, {
      timeoutMs: 20_000,
      what: 'converged',
    });
    const routed = [...GOOD.map((n) => `10.50.${n}.0/24`), '10.50.41.0/24', '10.50.60.0/24'];
    await waitFor(async () => peerRoutes(seen.slice(from), false).length >= routed.length, {
      timeoutMs: 5_000,
      what: 'the monitor saw every route',
    });
    const early = node.log.lines.filter((l) => l.msg === 'dataplane written early');
    expect(early).toHaveLength(1);
    expect(early[0]?.ops).toEqual({ 'route add': GOOD.length + 1 });
    // its two times: from the listing's request, and from the first route sent
    expect(early[0]?.writeMs).toBeGreaterThanOrEqual(0);
    expect(early[0]?.writeMs).toBeLessThanOrEqual(early[0]?.durationMs as number);
    // the first pass wrote the one the early writer left
    const passes = node.log.lines.filter((l) => l.msg === 'dataplane updated');
    expect(passes[0]?.ops).toMatchObject({ 'route add': 1 });
    expect(peerRoutes(seen.slice(from), false).sort()).toEqual(routed.sort());
    expect(peerRoutes(seen.slice(from), true)).toEqual([]);
    // our own lease is the one with our PublicIP, renewed
    expect(node.state()?.lease.key).toBe('10.50.52.0-24');
  }, 40_000);

  it('writes nothing early on a warm restart, and changes no route', async () => {
    await node.stop();
    const from = seen.length;
    const again = await start();
    await waitFor(() => again.state()?.pass?.converged === true, {
      timeoutMs: 20_000,
      what: 'converged again',
    });
    expect(again.log.lines.filter((l) => l.msg === 'dataplane written early')).toEqual([]);
    expect(peerRoutes(seen.slice(from), false)).toEqual([]);
    expect(peerRoutes(seen.slice(from), true)).toEqual([]);
    await again.stop();
    await kv.close();
  }, 40_000);
});

describe('a dual-stack host-gw cold start with routes written early', () => {
  it('writes both families early, and the first pass adds no route', async () => {
    const r = nsRunner(ns);
    // cold again: the IPv4 runs above left their routes
    await r('ip', ['-4', 'route', 'flush', 'proto', '151']);
    // the flush's deletions are reported before the lines this test reads
    await monitorCaughtUp();
    const kv = new MemoryKv();
    kv.putRaw(
      '/n/config',
      '{"Network":"10.50.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:50::/48","Backend":{"Type":"host-gw"}}',
    );
    for (const n of GOOD)
      kv.putRaw(
        `/n/subnets/10.50.${n}.0-24&fd00:50:0:${n.toString(16)}::-64`,
        encodeLeaseValue({
          ...attrs(`192.168.50.${n}`),
          publicIpv6: `fd00:192::${n.toString(16)}`,
        }),
      );
    const from = seen.length;
    const node = await startTestDaemon({
      store: new KvLeaseStore({ kv, prefix: '/n' }),
      nodeName: 'early6',
      publicIp: '192.168.50.1',
      publicIpv6: 'fd00:192::1',
      iface: ['eth0'],
      subnetFile: join(dir, 'subnet6.env'),
      ns,
    });
    await waitFor(() => node.state()?.pass?.converged === true, {
      timeoutMs: 20_000,
      what: 'converged',
    });
    const want = GOOD.flatMap((n) => [`10.50.${n}.0/24`, `fd00:50:0:${n.toString(16)}::/64`]);
    await waitFor(async () => peerRoutes(seen.slice(from), false).length >= want.length, {
      timeoutMs: 5_000,
      what: 'the monitor saw every route',
    });
    const early = node.log.lines.filter((l) => l.msg === 'dataplane written early');
    expect(early.map((l) => l.ops)).toEqual([{ 'route add': want.length }]);
    for (const l of node.log.lines.filter((x) => x.msg === 'dataplane updated'))
      expect(Object.keys(l.ops as object).filter((k) => k.startsWith('route'))).toEqual([]);
    expect(peerRoutes(seen.slice(from), false).sort()).toEqual(want.sort());
    expect(peerRoutes(seen.slice(from), true)).toEqual([]);
    await node.stop();
    await kv.close();
  }, 40_000);
});
