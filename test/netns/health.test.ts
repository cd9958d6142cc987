// The health endpoint and `twill status` on a real two-node cluster: /healthz,
// /readyz and /metrics answer; the underlay going down (which twill cannot
// repair) turns /readyz to 503 with the reason and back when it comes up;
// drift shows in the metrics; status lists every peer as ok, and with the
// daemon stopped and a route deleted by hand shows the route as missing.
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cluster, httpGetIn, ETCD_ENDPOINT, type ClusterNode } from '../helpers/cluster.ts';
import { metricOf } from '../helpers/dataplane.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { runToExit } from '../../lab/kit/process.ts';

const PORT = 9810;
const MAIN = resolve(import.meta.dirname, '../../src/cli/main.ts');
const c = new Cluster();
let n1: ClusterNode;
let n2: ClusterNode;

const get = (node: ClusterNode, path: string): Promise<{ status: number; body: string }> =>
  httpGetIn(c, node, PORT, path);

async function status(
  node: ClusterNode,
  ...extra: string[]
): Promise<{ code: number; out: string }> {
  const argv = [
    '--net=/run/netns/' + node.ns,
    process.execPath,
    MAIN,
    'status',
    '--etcd-endpoints',
    ETCD_ENDPOINT,
    '--iface',
    'eth0',
    '--subnet-file',
    node.subnetFile,
    ...extra,
  ];
  const done = await runToExit(['nsenter', ...argv], {
    input: '',
    env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' },
    timeoutMs: 30_000,
  });
  return { code: typeof done.code === 'number' ? done.code : -1, out: done.stdout };
}

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(name));
  return Number(line?.split(' ').at(-1));
}

beforeAll(async () => {
  await sweepStaleNetns();
  await c.start('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}');
  n1 = await c.addNode(1, ['--ip-masq', '--healthz-port', String(PORT)]);
  n2 = await c.addNode(2, ['--ip-masq', '--healthz-port', String(PORT)]);
  await waitFor(
    async () => (await get(n1, '/readyz').catch(() => ({ status: 0 }))).status === 200,
    { timeoutMs: 15_000, what: 'n1 ready' },
  );
});
afterAll(() => c.destroy());

describe('health endpoint', () => {
  it('answers /healthz, /readyz and /metrics', async () => {
    expect(await get(n1, '/healthz')).toEqual({ status: 200, body: 'ok\n' });
    expect(await get(n1, '/readyz')).toMatchObject({ status: 200 });
    const m = (await get(n1, '/metrics')).body;
    expect(m).toMatch(/^twill_build_info\{version="[^"]+",node_version="24\.[^"]+"\} 1$/m);
    expect(metric(m, 'twill_peers{backend="vxlan"}')).toBe(1);
    expect(metric(m, 'twill_lease_expiry_timestamp_seconds')).toBeGreaterThan(
      Date.now() / 1000 + 23 * 3600,
    );
    expect(metric(m, 'twill_reconcile_passes_total{result="changed"}')).toBeGreaterThanOrEqual(1);
    expect(metric(m, 'twill_store_connected')).toBe(1);
    expect(metric(m, 'twill_ready')).toBe(1);
    expect(m).toContain('twill_reconcile_pass_duration_seconds_bucket');
    expect(m).toContain('process_resident_memory_bytes');
    expect((await get(n1, '/nope')).status).toBe(404);
  });

  it('counts repaired drift by kind', async () => {
    const before = metric(
      (await get(n1, '/metrics')).body,
      'twill_drift_repaired_total{kind="route"}',
    );
    const peer = (await c.subnetOf(n2)).key.replace('-', '/');
    await c.sh(n1.ns, 'ip', 'route', 'del', peer);
    await waitFor(
      async () =>
        metric((await get(n1, '/metrics')).body, 'twill_drift_repaired_total{kind="route"}') >
        before,
      { timeoutMs: 5_000, what: 'route drift counted' },
    );
  });

  it('turns /readyz to 503 with the reason while the underlay is down, and back', async () => {
    await c.sh(n1.ns, 'ip', 'link', 'set', 'eth0', 'down');
    try {
      await waitFor(async () => (await get(n1, '/readyz')).status === 503, {
        timeoutMs: 5_000,
        what: '503',
      });
      expect((await get(n1, '/readyz')).body).toBe('underlay interface eth0 is down\n');
      expect(metric((await get(n1, '/metrics')).body, 'twill_ready')).toBe(0);
    } finally {
      await c.sh(n1.ns, 'ip', 'link', 'set', 'eth0', 'up');
      await c.sh(n1.ns, 'ip', 'route', 'replace', 'default', 'via', '10.123.0.254');
    }
    await waitFor(async () => (await get(n1, '/readyz')).status === 200, {
      timeoutMs: 10_000,
      what: 'ready again',
    });
  });
});

describe('twill status', () => {
  it('lists every peer as ok while the daemon runs, and shows a route deleted by hand as missing once it is stopped', async () => {
    const ok = await status(n1, '--healthz-port', String(PORT));
    expect(ok.code).toBe(0);
    expect(ok.out).toMatch(/daemon: +running \(pid \d+\); \/readyz 200: ok/);
    const peer = (await c.subnetOf(n2)).key.replace('-', '/');
    expect(ok.out).toMatch(
      new RegExp(
        `${peer.replace(/\./g, '\\.')} +${n2.ip.replace(/\./g, '\\.')} +[0-9a-f:]{17} +ok`,
      ),
    );
    expect(ok.out).toContain('dataplane:  in sync');
    await c.stopTwill(n1);
    await c.sh(n1.ns, 'ip', 'route', 'del', peer);
    const broken = await status(n1);
    expect(broken.code).toBe(1);
    expect(broken.out).toContain('daemon:     not running');
    const json = JSON.parse((await status(n1, '--json')).out) as {
      peers: { subnet: string; kernel: string }[];
      diff: { missing: string[] };
      inSync: boolean;
    };
    expect(json.inSync).toBe(false);
    expect(json.peers).toEqual([
      expect.objectContaining({ subnet: peer, kernel: 'missing route' }),
    ]);
    expect(json.diff.missing).toEqual([
      `route add ${peer} via ${peer.split('/')[0]} dev twill.1 onlink proto 151 ${metricOf(peer)}`,
    ]);
  });
});
