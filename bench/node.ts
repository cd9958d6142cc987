// One benchmark node: a real etcd in its own namespace and the built daemon
// (`twill run`, as the `twill` command runs it) as a real process in a node
// namespace on one veth link to it. Shared by the dataplane, events and idle
// suites; peer leases are synthetic, peer i at a fixed subnet, public IP and
// VtepMAC on the /12 underlay, put straight into etcd from its namespace. A
// dual-stack node (`dualStack`) adds an IPv6 underlay (fd00:172:16::/64) and
// network (fd00:10::/48), and every peer an IPv6 subnet, PublicIPv6 and
// IPv6 VtepMAC in flannel's dual-stack key and value.
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROUTE_PROTOCOL } from '../src/dataplane/model.ts';
import { startEtcd, type EtcdServer } from '../lab/kit/etcd.ts';
import { NetnsLab, nsRun } from '../lab/kit/netns.ts';
import { etcdStoreFlags, twillCommand, twillRunArgv } from '../lab/kit/twill-command.ts';

/**
 * extra node flags for the daemon, for memory experiments:
 * TWILL_BENCH_NODE_FLAGS="--max-semi-space-size=1"
 */
const NODE_FLAGS = (process.env.TWILL_BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean);
export const ETCD_PREFIX = '/coreos.com/network';

export interface PeerSpec {
  /** the key in an IPv4 network; a dual-stack one is `dualKey` */
  readonly key: string;
  readonly subnet: string;
  readonly ip: string;
  readonly mac: string;
  /** the same peer in a dual-stack network */
  readonly dualKey: string;
  readonly subnet6: string;
  readonly ip6: string;
  readonly mac6: string;
}

/** the dual-stack bench node's IPv6 pod network and underlay */
export const BENCH_IPV6_NETWORK = 'fd00:10::/48';
const UNDERLAY6 = 'fd00:172:16::';

/**
 * Peer i: subnet 10.(1+(i>>8)).(i&255).0/24 (clear of 10.0.x), public IP on the /12 underlay; in
 * a dual-stack network also fd00:10:0:<i+1>::/64 via fd00:172:16::<0x1000+i>.
 */
export function peer(i: number): PeerSpec {
  const a = 1 + (i >> 8);
  const b = i & 255;
  const hex = (i + 1).toString(16);
  const byte = (n: number): string => n.toString(16).padStart(2, '0');
  return {
    key: `10.${a}.${b}.0-24`,
    subnet: `10.${a}.${b}.0/24`,
    ip: `172.16.${a}.${b === 0 ? 1 : b}`,
    mac: `02:42:00:00:${byte(a)}:${byte(b)}`,
    dualKey: `10.${a}.${b}.0-24&fd00:10:0:${hex}::-64`,
    subnet6: `fd00:10:0:${hex}::/64`,
    ip6: `${UNDERLAY6}${(0x1000 + i).toString(16)}`,
    mac6: `02:43:00:00:${byte(a)}:${byte(b)}`,
  };
}

/** The lease value flannel writes for peer `p` under `backend` (dual-stack: both families). */
export function leaseValue(p: PeerSpec, backend: string, dualStack = false): string {
  const base = {
    PublicIP: p.ip,
    PublicIPv6: dualStack ? p.ip6 : null,
    BackendType: backend,
  };
  if (backend !== 'vxlan') return JSON.stringify(base);
  const v6 = dualStack ? { BackendV6Data: { VNI: 1, VtepMAC: p.mac6 } } : {};
  return JSON.stringify({ ...base, BackendData: { VNI: 1, VtepMAC: p.mac }, ...v6 });
}

const PUT_SCRIPT = (o: {
  endpoint: string;
  backend: string;
  count: number;
  dualStack: boolean;
}): string => `
import { Etcd3 } from 'etcd3';
import { leaseValue, peer } from './bench/node.ts';
const c = new Etcd3({ hosts: '${o.endpoint}' });
const put = (i) => {
  const p = peer(i);
  const key = ${o.dualStack} ? p.dualKey : p.key;
  return c.put('${ETCD_PREFIX}/subnets/' + key).value(leaseValue(p, '${o.backend}', ${o.dualStack}));
};
for (let i = 0; i < ${o.count}; i += 250) await Promise.all(Array.from({ length: Math.min(250, ${o.count} - i) }, (_, k) => put(i + k)));
c.close();
`;

export interface LogLine {
  time: number;
  msg: string;
  ops?: Record<string, number>;
  durationMs?: number;
  /** the routes written early: from the first route sent to every route in */
  writeMs?: number;
  source?: string;
}

export async function logLines(file: string): Promise<LogLine[]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text.split('\n').flatMap((l) => {
    try {
      return [JSON.parse(l) as LogLine];
    } catch {
      return [];
    }
  });
}

/** How often the bench polls what it waits for: the resolution of the times it measures so. */
export const POLL_MS = 20;

export interface Node {
  lab: NetnsLab;
  ns: string;
  etcdNs: string;
  etcd: EtcdServer;
  dir: string;
  backend: string;
  /** IPv4 + IPv6 (setupNode's `dualStack`) */
  dualStack: boolean;
  child: ChildProcess | undefined;
  log: string;
  spawnedAt: number;
}

/** Runs argv inside namespace `ns`; its stdout. */
export const sh = (ns: string, args: string[], input?: string): Promise<string> =>
  nsRun(ns, args, { timeoutMs: 60_000, ...(input === undefined ? {} : { input }) }).then(
    (r) => r.stdout,
  );

/**
 * etcd (with only the network config) and a node on one veth link; namespaces named after `name`.
 */
export async function setupNode(o: {
  backend: string;
  name: string;
  dualStack?: boolean;
  /** where etcd keeps its data (default the OS's temp directory) */
  etcdDataParent?: string;
}): Promise<Node> {
  const dualStack = o.dualStack === true;
  const lab = new NetnsLab();
  const dir = await mkdtemp(join(tmpdir(), 'twill-bench-'));
  const etcdNs = await lab.add(`${o.name}-etcd`);
  const ns = await lab.add(`${o.name}-node`);
  await lab.link(
    { ns: etcdNs, dev: 'eth0', cidr: '172.16.0.1/12' },
    { ns, dev: 'eth0', cidr: '172.16.0.2/12' },
  );
  if (dualStack) {
    await sh(etcdNs, ['ip', 'addr', 'add', `${UNDERLAY6}1/64`, 'dev', 'eth0', 'nodad']);
    await sh(ns, ['ip', 'addr', 'add', `${UNDERLAY6}2/64`, 'dev', 'eth0', 'nodad']);
  }
  const etcd = await startEtcd({
    netns: etcdNs,
    host: '172.16.0.1',
    clientPort: 2379,
    ...(o.etcdDataParent ? { dataParent: o.etcdDataParent } : {}),
  });
  const v6 = dualStack ? { EnableIPv6: true, IPv6Network: BENCH_IPV6_NETWORK } : {};
  const config = { Network: '10.0.0.0/8', SubnetLen: 24, ...v6, Backend: { Type: o.backend } };
  await sh(etcdNs, [
    'etcdctl',
    '--endpoints',
    etcd.endpoint,
    'put',
    `${ETCD_PREFIX}/config`,
    JSON.stringify(config),
  ]);
  // the node's own subnets, outside the peers' (peer()): a lease the node takes before the peers
  // are put (the floor rows start it with none) is then never one a peer's put collides with. A
  // random pick collided with one of the 5,000 about once in 13 starts; a dual-stack peer's key
  // then differs from ours and both stay, so the peer was refused as overlapping our subnet.
  const own6 = dualStack
    ? `FLANNEL_IPV6_NETWORK=${BENCH_IPV6_NETWORK}\nFLANNEL_IPV6_SUBNET=fd00:10:0:ffff::1/64\n`
    : '';
  await writeFile(
    join(dir, 'subnet.env'),
    `FLANNEL_NETWORK=10.0.0.0/8\nFLANNEL_SUBNET=10.200.0.1/24\n${own6}FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n`,
  );
  return {
    lab,
    ns,
    etcdNs,
    etcd,
    dir,
    backend: o.backend,
    dualStack,
    child: undefined,
    log: join(dir, 'twill.log'),
    spawnedAt: 0,
  };
}

/** Peers 0 … count-1 into etcd, 250 at a time, from the etcd namespace. */
export async function putLeases(n: Node, count: number): Promise<void> {
  // npm runs the bench from the project root, where 'etcd3' resolves
  const script = PUT_SCRIPT({
    endpoint: n.etcd.endpoint,
    backend: n.backend,
    count,
    dualStack: n.dualStack,
  });
  await nsRun(n.etcdNs, [process.execPath, '--input-type=module', '-e', script], {
    timeoutMs: 120_000,
  });
}

/** deploy/base/daemonset.yaml's health endpoint flags (its liveness and readiness probes) */
export const DAEMONSET_HEALTH_FLAGS = ['--healthz-ip', '127.0.0.1', '--healthz-port', '9810'];

/**
 * Starts the built daemon with the node flags of its shebang, as the `twill` command runs; its
 * leases from the node's etcd unless `store` gives other store flags (Kubernetes mode: kube.ts).
 */
export async function startTwill(
  n: Node,
  extraArgs: readonly string[] = [],
  store: readonly string[] = etcdStoreFlags(n.etcd.endpoint, 'bench'),
): Promise<void> {
  const command = await twillCommand(NODE_FLAGS);
  await rm(n.log, { force: true });
  n.spawnedAt = Date.now();
  const argv = twillRunArgv(command, {
    store,
    subnetFile: join(n.dir, 'subnet.env'),
    // its health endpoint on, as deploy/'s DaemonSet runs it (what it costs is in every row)
    flags: ['--ip-masq', ...DAEMONSET_HEALTH_FLAGS, ...extraArgs],
  });
  n.child = n.lab.spawn(n.ns, argv, n.log);
}

/** Our own subnet's lease key (from subnet.env), e.g. "10.7.12.0-24". */
export async function ownLeaseKey(n: Node): Promise<string> {
  const env = await readFile(join(n.dir, 'subnet.env'), 'utf8');
  const subnet = /FLANNEL_SUBNET=(\d+\.\d+\.\d+)\.\d+\/(\d+)/.exec(env);
  if (!subnet) throw new Error(`bench: no FLANNEL_SUBNET in ${join(n.dir, 'subnet.env')}`);
  return `${subnet[1]}.0-${subnet[2]}`;
}

export async function stopNode(n: Node): Promise<void> {
  await n.etcd.destroy();
  await n.lab.destroy();
  await rm(n.dir, { recursive: true, force: true });
}

/** The routes with twill's protocol in `ns`, IPv4 (or, `family` '-6', IPv6). */
export async function ownedRoutes(ns: string, family: '-4' | '-6' = '-4'): Promise<number> {
  const argv = ['ip', family, 'route', 'show', 'table', 'main', 'proto', String(ROUTE_PROTOCOL)];
  return (await sh(ns, argv)).split('\n').filter(Boolean).length;
}

/** A /proc/<pid>/status figure in MiB: VmRSS (resident now) or VmHWM (the most it ever was). */
export async function statusMiB(
  pid: number | undefined,
  field: 'VmRSS' | 'VmHWM' = 'VmRSS',
): Promise<number> {
  const status = await readFile(`/proc/${pid ?? 0}/status`, 'utf8');
  const kb = Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
  return kb / 1024;
}

/** The memory targets for the daemon in etcd mode (issue 17). */
export const RSS_TARGET_MIB = 64;
export const GROWTH_TARGET_KIB = 4;
/**
 * How long after convergence the settled RSS is read. V8's memory reducer returns the heap the
 * start-up burst left behind (the listing, the rendered batches, the kernel dumps) about 8 s after
 * the last full GC (--gc-memory-reducer-start-delay-ms, 8000 by default); 15 s leaves room.
 */
export const SETTLE_MS = 15_000;
