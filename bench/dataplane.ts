// Dataplane benchmarks, host-gw and vxlan: one node running `twill run` as a
// real process in its own namespace, with 5,000 peer leases in a real etcd.
// Cold convergence (process start → every entry in the kernel) against the
// raw `ip -batch` time for the same entries; drift repair latency for each
// kind of damage; the daemon's RSS at 5,000 peers.
import type { ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { run } from '../src/exec/runner.ts';
import { ROUTE_PROTOCOL } from '../src/dataplane/model.ts';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd, type EtcdServer } from '../test/helpers/etcd.ts';
import { NetnsLab, sweepStaleNetns } from '../test/helpers/netns.ts';
import { stopProcess } from '../test/helpers/process.ts';
import type { BenchRow, BenchSuite } from './table.ts';

const PEERS = 5_000;
/** extra node flags for the daemon, for memory experiments: TWILL_BENCH_NODE_FLAGS="--max-semi-space-size=1" */
const NODE_FLAGS = (process.env.TWILL_BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean);
const ROOT = resolve(import.meta.dirname, '..');

/** Peer i: subnet 10.(i>>8).(i&255).0/24 ... kept clear of ours by starting at 1; public IP on the /16 underlay. */
function peer(i: number): { key: string; subnet: string; ip: string; mac: string } {
  const a = 1 + (i >> 8);
  const b = i & 255;
  return { key: `10.${a}.${b}.0-24`, subnet: `10.${a}.${b}.0/24`, ip: `172.16.${a}.${b === 0 ? 1 : b}`, mac: `02:42:00:00:${a.toString(16).padStart(2, '0')}:${b.toString(16).padStart(2, '0')}` };
}

const PUT_SCRIPT = (endpoint: string, backend: string): string => `
import { Etcd3 } from 'etcd3';
const c = new Etcd3({ hosts: '${endpoint}' });
const put = (i) => {
  const a = 1 + (i >> 8), b = i & 255;
  const mac = '02:42:00:00:' + a.toString(16).padStart(2, '0') + ':' + b.toString(16).padStart(2, '0');
  const v = ${backend === 'vxlan'} ? { PublicIP: '172.16.' + a + '.' + (b === 0 ? 1 : b), PublicIPv6: null, BackendType: 'vxlan', BackendData: { VNI: 1, VtepMAC: mac } }
                                   : { PublicIP: '172.16.' + a + '.' + (b === 0 ? 1 : b), PublicIPv6: null, BackendType: 'host-gw' };
  return c.put('/coreos.com/network/subnets/10.' + a + '.' + b + '.0-24').value(JSON.stringify(v));
};
for (let i = 0; i < ${PEERS}; i += 250) await Promise.all(Array.from({ length: Math.min(250, ${PEERS} - i) }, (_, k) => put(i + k)));
c.close();
`;

interface LogLine {
  time: number;
  msg: string;
  ops?: Record<string, number>;
  durationMs?: number;
}

async function logLines(file: string): Promise<LogLine[]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text.split('\n').flatMap((l) => {
    try {
      return [JSON.parse(l) as LogLine];
    } catch {
      return [];
    }
  });
}

async function waitUntil(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`bench: timed out waiting for ${what}`);
}

/** Raw `ip -batch` (and `bridge -batch`) time for the same entries in a fresh namespace. */
async function rawBatchMs(lab: NetnsLab, backend: string): Promise<number> {
  const ns = await lab.add(`raw-${backend}`);
  await run('ip', ['-n', ns, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth1']);
  await run('ip', ['-n', ns, 'addr', 'add', '172.16.0.2/12', 'dev', 'eth0']);
  await run('ip', ['-n', ns, 'link', 'set', 'eth0', 'up']);
  await run('ip', ['-n', ns, 'link', 'set', 'eth1', 'up']);
  const peers = Array.from({ length: PEERS }, (_, i) => peer(i));
  const sh = (file: string, input: string): Promise<unknown> => run('nsenter', [`--net=/run/netns/${ns}`, file, '-batch', '-'], { input, timeoutMs: 60_000 });
  const started = performance.now();
  if (backend === 'vxlan') {
    await sh('ip', ['link add twill.1 mtu 1450 type vxlan id 1 local 172.16.0.2 dev eth0 dstport 8472 nolearning', 'link set twill.1 up', ...peers.map((p) => `neigh replace ${p.subnet.replace('/24', '')} lladdr ${p.mac} dev twill.1 nud permanent`), ''].join('\n'));
    await sh('bridge', `${peers.map((p) => `fdb append ${p.mac} dev twill.1 dst ${p.ip} self permanent`).join('\n')}\n`);
    await sh('ip', `${peers.map((p) => `route add ${p.subnet} via ${p.subnet.replace('/24', '')} dev twill.1 onlink proto ${ROUTE_PROTOCOL}`).join('\n')}\n`);
  } else {
    await sh('ip', `${peers.map((p) => `route add ${p.subnet} via ${p.ip} dev eth0 proto ${ROUTE_PROTOCOL}`).join('\n')}\n`);
  }
  return performance.now() - started;
}

interface Node {
  lab: NetnsLab;
  ns: string;
  etcdNs: string;
  etcd: EtcdServer;
  dir: string;
  child: ChildProcess | undefined;
  log: string;
  spawnedAt: number;
}

const sh = (ns: string, args: string[], input?: string): Promise<string> =>
  run('nsenter', [`--net=/run/netns/${ns}`, ...args], { timeoutMs: 60_000, ...(input === undefined ? {} : { input }) }).then((r) => r.stdout);

/** The node flags the `twill` command runs with: those on its shebang line. */
async function daemonNodeFlags(main: string): Promise<string[]> {
  const first = (await readFile(main, 'utf8')).split('\n')[0] ?? '';
  return first.replace(/^#!\/usr\/bin\/env (-S )?node ?/, '').split(' ').filter(Boolean);
}

/** etcd (with only the network config) and a node on one veth link. */
async function setupNode(backend: string): Promise<Node> {
  const lab = new NetnsLab();
  const dir = await mkdtemp(join(tmpdir(), 'twill-bench-'));
  const etcdNs = await lab.add(`bench-etcd-${backend}`);
  const ns = await lab.add(`bench-node-${backend}`);
  await lab.link({ ns: etcdNs, dev: 'eth0', cidr: '172.16.0.1/12' }, { ns, dev: 'eth0', cidr: '172.16.0.2/12' });
  const etcd = await startEtcd({ netns: etcdNs, host: '172.16.0.1', clientPort: 2379 });
  await sh(etcdNs, ['etcdctl', '--endpoints', etcd.endpoint, 'put', '/coreos.com/network/config', `{"Network":"10.0.0.0/8","SubnetLen":24,"Backend":{"Type":"${backend}"}}`]);
  return { lab, ns, etcdNs, etcd, dir, child: undefined, log: join(dir, 'twill.log'), spawnedAt: 0 };
}

async function putLeases(n: Node, backend: string): Promise<void> {
  // npm runs the bench from the project root, where 'etcd3' resolves
  await run('nsenter', [`--net=/run/netns/${n.etcdNs}`, process.execPath, '--input-type=module', '-e', PUT_SCRIPT(n.etcd.endpoint, backend)], { timeoutMs: 120_000 });
}

/** Starts the built daemon with the node flags of its shebang, as the `twill` command runs. */
async function startTwill(n: Node): Promise<void> {
  const main = join(ROOT, 'dist/src/cli/main.js');
  const flags = [...(await daemonNodeFlags(main)), ...NODE_FLAGS];
  await rm(n.log, { force: true });
  n.spawnedAt = Date.now();
  n.child = n.lab.spawn(n.ns, [process.execPath, ...flags, main, 'run', '--etcd-endpoints', n.etcd.endpoint, '--iface', 'eth0', '--ip-masq', '--subnet-file', join(n.dir, 'subnet.env'), '--node-name', 'bench'], n.log);
}

async function stopNode(n: Node): Promise<void> {
  await n.etcd.destroy();
  await n.lab.destroy();
  await rm(n.dir, { recursive: true, force: true });
}

async function ownedRoutes(ns: string): Promise<number> {
  return (await sh(ns, ['ip', 'route', 'show', 'table', 'main', 'proto', String(ROUTE_PROTOCOL)])).split('\n').filter(Boolean).length;
}

/** Process start → the pass that programmed every peer, from the daemon's own log (and checked in the kernel). */
async function coldConvergence(n: Node): Promise<{ fromStartMs: number; passMs: number }> {
  let done: LogLine | undefined;
  await waitUntil(async () => {
    done = (await logLines(n.log)).find((l) => (l.ops?.['route add'] ?? 0) >= PEERS);
    return done !== undefined;
  }, 120_000, 'cold convergence');
  await waitUntil(async () => (await ownedRoutes(n.ns)) === PEERS, 10_000, 'every route in the kernel');
  return { fromStartMs: (done?.time ?? 0) - n.spawnedAt, passMs: done?.durationMs ?? 0 };
}

async function rssMiB(pid: number | undefined): Promise<number> {
  const status = await readFile(`/proc/${pid ?? 0}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return kb / 1024;
}

interface Drift {
  readonly name: string;
  readonly backends: readonly string[];
  readonly breakIt: string[][];
  readonly healthy: (ns: string) => Promise<boolean>;
}

const P0 = peer(7);
const MASQ_OK = async (ns: string): Promise<boolean> => {
  const chain = await sh(ns, ['iptables', '-t', 'nat', '-S', 'TWILL-POSTRTG']).catch(() => '');
  const parent = await sh(ns, ['iptables', '-t', 'nat', '-S', 'POSTROUTING']).catch(() => '');
  return chain.split('\n').filter((l) => l.startsWith('-A')).length === 6 && parent.includes('-j TWILL-POSTRTG');
};
const DRIFTS: Drift[] = [
  { name: 'route deleted', backends: ['host-gw', 'vxlan'], breakIt: [['ip', 'route', 'del', P0.subnet]], healthy: async (ns) => (await sh(ns, ['ip', 'route', 'show', P0.subnet])).includes(`proto ${ROUTE_PROTOCOL}`) },
  { name: 'neighbour deleted', backends: ['vxlan'], breakIt: [['ip', 'neigh', 'del', P0.subnet.replace('/24', ''), 'dev', 'twill.1']], healthy: async (ns) => (await sh(ns, ['ip', 'neigh', 'show', P0.subnet.replace('/24', ''), 'dev', 'twill.1'])).includes('PERMANENT') },
  { name: 'FDB entry deleted', backends: ['vxlan'], breakIt: [['bridge', 'fdb', 'del', P0.mac, 'dev', 'twill.1', 'dst', P0.ip, 'self']], healthy: async (ns) => (await sh(ns, ['bridge', 'fdb', 'show', 'dev', 'twill.1'])).includes(`${P0.mac} dst ${P0.ip}`) },
  { name: 'vxlan device deleted', backends: ['vxlan'], breakIt: [['ip', 'link', 'del', 'twill.1']], healthy: async (ns) => (await ownedRoutes(ns)) === PEERS },
  { name: 'MASQUERADE rule deleted', backends: ['host-gw', 'vxlan'], breakIt: [['iptables', '-t', 'nat', '-D', 'TWILL-POSTRTG', '5']], healthy: MASQ_OK },
  { name: 'nat table flushed', backends: ['host-gw', 'vxlan'], breakIt: [['iptables', '-t', 'nat', '-F']], healthy: MASQ_OK },
];

async function repairMs(ns: string, d: Drift): Promise<number> {
  for (const cmd of d.breakIt) await sh(ns, cmd);
  const broken = performance.now();
  await waitUntil(() => d.healthy(ns), 10_000, `repair of ${d.name}`);
  return performance.now() - broken;
}

async function backendRows(backend: string): Promise<BenchRow[]> {
  const rawLab = new NetnsLab();
  const rows: BenchRow[] = [];
  const n = await setupNode(backend);
  try {
    // the floor: the same daemon with no peers at all
    await startTwill(n);
    await waitUntil(async () => (await logLines(n.log)).some((l) => l.msg === 'dataplane updated'), 30_000, 'the daemon with no peers');
    await new Promise((r) => setTimeout(r, 1000));
    const floor = await rssMiB(n.child?.pid);
    if (n.child) await stopProcess(n.child);
    await sh(n.ns, ['ip', 'link', 'del', `twill.1`]).catch(() => undefined);
    await putLeases(n, backend);
    await startTwill(n);
    const cold = await coldConvergence(n);
    const raw = await rawBatchMs(rawLab, backend);
    rows.push({ suite: 'dataplane', figure: `cold convergence, ${PEERS} peers, ${backend} (process start → all entries)`, value: Math.round(cold.fromStartMs), unit: 'ms', yardstick: { name: 'raw ip -batch', value: Math.round(raw) }, target: { text: '≤ 1000 ms, ≤ 10× raw', met: cold.fromStartMs <= 1000 && cold.fromStartMs <= 10 * raw } });
    rows.push({ suite: 'dataplane', figure: `  the programming pass alone (observe, diff, apply), ${backend}`, value: Math.round(cold.passMs), unit: 'ms', yardstick: { name: 'raw ip -batch', value: Math.round(raw) } });
    await new Promise((r) => setTimeout(r, 1000));
    const rss = await rssMiB(n.child?.pid);
    rows.push({ suite: 'dataplane', figure: `daemon RSS at ${PEERS} peers, ${backend}`, value: Math.round(rss), unit: 'MiB', target: { text: '≤ 80 MiB', met: rss <= 80 } });
    rows.push({ suite: 'dataplane', figure: `  the same daemon with no peers (Node + libraries floor), ${backend}`, value: Math.round(floor), unit: 'MiB' });
    for (const d of DRIFTS.filter((x) => x.backends.includes(backend))) {
      const ms = await repairMs(n.ns, d);
      rows.push({ suite: 'dataplane', figure: `drift repair: ${d.name}, ${backend}, ${PEERS} peers`, value: Math.round(ms), unit: 'ms', target: { text: '≤ 1000 ms', met: ms <= 1000 } });
      await new Promise((r) => setTimeout(r, 300));
    }
  } finally {
    if (process.env.TWILL_BENCH_KEEP_LOG) await run('cp', [n.log, `/tmp/bench-${backend}.log`]);
    await stopNode(n);
    await rawLab.destroy();
  }
  return rows;
}

export const dataplaneSuite: BenchSuite = {
  name: 'dataplane',
  async run() {
    await sweepStaleNetns();
    return [...(await backendRows('host-gw')), ...(await backendRows('vxlan'))];
  },
};
