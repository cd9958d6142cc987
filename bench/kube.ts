// The daemon's memory in Kubernetes mode (issue 17: ≤ 80 MiB at 5,000 peers): the bench node of
// the other suites (a real etcd in its own namespace, the built daemon in a node namespace on one
// veth link to it), with a real kube-apiserver (the cached build of scripts/kubernetes.sh, as the
// tests and the lab run it) in the etcd namespace on that etcd, deploy/'s RBAC, and
// `twill run --kube-subnet-mgr` as the static user `twill` bound only to twill's ClusterRole. The
// node's own Node object has a podCIDR; peer i is a Node `peer-<i>` with peer i's subnet as its
// podCIDR and flannel's annotations (kube-subnet-manager, public-ip, backend-type,
// backend-data), created over one HTTP/2 connection with IN_FLIGHT requests in flight. The
// floor (no peer Nodes) for both backends first, then the 5,000 peers as vxlan Nodes, then the
// same Nodes patched to host-gw; each RSS read SETTLE_MS after convergence, as the etcd rows.
// Its own suite, not rows in `memory`: it needs the Kubernetes binaries (built once, 3 to 20
// minutes, when none is cached) and an apiserver, which `--only memory` should not wait for.
import type { ChildProcess } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { ROUTE_PROTOCOL } from '../src/dataplane/model.ts';
import {
  apiServerArgs,
  apiServerFiles,
  kubeconfigText,
  writeCredentials,
} from '../lab/kube-apiserver.ts';
import {
  adminKubectl,
  applyRbac,
  KUBE_API_PORT,
  kubeLab,
  labApiServerBinary,
  nodeObject,
  twillKubeFlags,
  untilLabApiServerReady,
  type ControlPlaneExec,
  type KubeLab,
} from '../lab/netns-kube.ts';
import { nsRun, sweepStaleNetns } from '../lab/kit/netns.ts';
import { stopProcess } from '../lab/kit/process.ts';
import { waitFor } from '../lab/kit/wait.ts';
import {
  logLines,
  ownedRoutes,
  POLL_MS,
  SETTLE_MS,
  setupNode,
  sh,
  startTwill,
  statusMiB,
  stopNode,
  type Node,
} from './node.ts';
import type { BenchRow, BenchSuite } from './table.ts';

const PEERS = 5_000;
/** The issue's bound for the daemon in Kubernetes mode at 5,000 peers. */
const KUBE_RSS_TARGET_MIB = 80;
/** Requests in flight while the Node objects are written (the apiserver's default limit: 200). */
const IN_FLIGHT = 150;
const HOST = '172.16.0.1';
const NODE_NAME = 'bench-node';
/** Our Node's podCIDR: inside the network, clear of the peers' 10.1.0.0 and up. */
const OWN_POD_CIDR = '10.0.1.0/24';
const BACKENDS = ['vxlan', 'host-gw'] as const;
type Backend = (typeof BACKENDS)[number];

/**
 * Creates the peer Nodes 0 … count-1 (`create`), or merge-patches their backend annotations to
 * `backend` (`patch`), from the etcd namespace over one HTTP/2 connection, `inFlight` requests at
 * a time, retrying a 429 or 5xx; prints {"ms", "retries"}.
 */
const NODES_SCRIPT = (o: {
  url: string;
  caFile: string;
  token: string;
  count: number;
  backend: Backend;
  mode: 'create' | 'patch';
  inFlight: number;
}): string => `
import { connect } from 'node:http2';
import { readFileSync } from 'node:fs';
import { peer } from './bench/node.ts';
const o = ${JSON.stringify(o)};
const P = 'flannel.alpha.coreos.com/';
const backendAnnotations = (p) => ({
  [P + 'backend-type']: o.backend,
  // flannel's host-gw lease has no backend data: the annotation reads "null"
  [P + 'backend-data']: o.backend === 'vxlan' ? JSON.stringify({ VNI: 1, VtepMAC: p.mac }) : 'null',
});
const body = (i) => {
  const p = peer(i);
  if (o.mode === 'patch') return { metadata: { annotations: backendAnnotations(p) } };
  const annotations = { [P + 'kube-subnet-manager']: 'true', [P + 'public-ip']: p.ip, ...backendAnnotations(p) };
  return { apiVersion: 'v1', kind: 'Node', metadata: { name: 'peer-' + i, annotations }, spec: { podCIDR: p.subnet, podCIDRs: [p.subnet] } };
};
const session = connect(o.url, { ca: readFileSync(o.caFile) });
session.on('error', (err) => { console.error(err); process.exit(1); });
const send = (i) => new Promise((resolve, reject) => {
  const req = session.request({
    ':method': o.mode === 'create' ? 'POST' : 'PATCH',
    ':path': o.mode === 'create' ? '/api/v1/nodes' : '/api/v1/nodes/peer-' + i,
    authorization: 'Bearer ' + o.token,
    'content-type': o.mode === 'create' ? 'application/json' : 'application/merge-patch+json',
  });
  let status = 0;
  let text = '';
  req.on('response', (h) => { status = Number(h[':status']); });
  req.setEncoding('utf8');
  req.on('data', (d) => { text += d; });
  req.on('end', () => resolve({ status, text }));
  req.on('error', reject);
  req.end(JSON.stringify(body(i)));
});
let next = 0;
let retries = 0;
const worker = async () => {
  for (let i = next++; i < o.count; i = next++)
    for (let attempt = 1; ; attempt++) {
      const r = await send(i);
      if (r.status === 200 || r.status === 201) break;
      if ((r.status === 429 || r.status >= 500) && attempt < 10) {
        retries++;
        await new Promise((done) => setTimeout(done, 100 * attempt));
        continue;
      }
      throw new Error(o.mode + ' peer-' + i + ': HTTP ' + r.status + ' ' + r.text.slice(0, 300));
    }
};
const t0 = performance.now();
await Promise.all(Array.from({ length: o.inFlight }, worker));
process.stdout.write(JSON.stringify({ ms: performance.now() - t0, retries }) + '\\n');
session.close();
`;

interface KubeBench {
  readonly n: Node;
  readonly k: KubeLab;
  readonly exec: ControlPlaneExec;
  readonly adminToken: string;
  readonly apiserver: ChildProcess;
}

/**
 * The bench node with a kube-apiserver on its etcd, RBAC applied, our Node object created; the
 * apiserver is one of the node lab's processes (stopNode ends it).
 */
async function setupKube(): Promise<KubeBench> {
  const n = await setupNode({ backend: 'vxlan', name: 'bench-kube' });
  try {
    const k = kubeLab(n.dir, HOST);
    const exec: ControlPlaneExec = async (argv, opts) =>
      (
        await nsRun(n.etcdNs, argv, {
          timeoutMs: opts?.timeoutMs ?? 60_000,
          ...(opts?.input === undefined ? {} : { input: opts.input }),
        })
      ).stdout;
    await mkdir(k.admin.cacheDir, { recursive: true });
    const creds = await writeCredentials(k.dir);
    const { caFile } = apiServerFiles(k.dir);
    const config = (token: string): string => kubeconfigText({ url: k.url, caFile, token });
    await writeFile(k.admin.kubeconfig, config(creds.adminToken), { mode: 0o600 });
    await writeFile(k.twillKubeconfig, config(creds.twillToken), { mode: 0o600 });
    const binary = await labApiServerBinary();
    const args = apiServerArgs({
      dir: k.dir,
      host: HOST,
      port: KUBE_API_PORT,
      etcd: n.etcd.endpoint,
    });
    const apiserver = n.lab.spawn(n.etcdNs, [binary, ...args], k.log);
    await untilLabApiServerReady(k, exec, apiserver.pid ?? 0);
    await applyRbac(k, exec);
    await adminKubectl(k, exec, ['create', '-f', '-'], {
      input: nodeObject(NODE_NAME, [OWN_POD_CIDR]),
    });
    return { n, k, exec, adminToken: creds.adminToken, apiserver };
  } catch (err) {
    await stopNode(n);
    throw err;
  }
}

/** Creates the peer Nodes, or patches them to `backend`; how long it took. */
async function writeNodes(
  b: KubeBench,
  mode: 'create' | 'patch',
  backend: Backend,
): Promise<{ ms: number; retries: number }> {
  const script = NODES_SCRIPT({
    url: b.k.url,
    caFile: apiServerFiles(b.k.dir).caFile,
    token: b.adminToken,
    count: PEERS,
    backend,
    mode,
    inFlight: IN_FLIGHT,
  });
  // npm runs the bench from the project root, where './bench/node.ts' resolves
  const { stdout } = await nsRun(
    b.n.etcdNs,
    [process.execPath, '--input-type=module', '-e', script],
    {
      timeoutMs: 300_000,
    },
  );
  return JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as { ms: number; retries: number };
}

interface Reading {
  readonly rss: number;
  readonly peak: number;
}

/**
 * Starts the daemon in Kubernetes mode under `backend`, waits until it has routed `peers` (none:
 * its first pass), settles; its RSS and peak. Stops it and clears its kernel state after.
 */
async function settledKubeRss(b: KubeBench, backend: Backend, peers: number): Promise<Reading> {
  const { n, k } = b;
  await writeFile(
    k.netConf,
    `${JSON.stringify({ Network: '10.0.0.0/8', Backend: { Type: backend } })}\n`,
  );
  await startTwill(n, [], twillKubeFlags(k, NODE_NAME));
  try {
    // its first converged pass marks our Node's network available (an earlier run's chains may
    // leave that pass nothing to do, so no "dataplane updated" line to wait for)
    if (peers === 0)
      await waitFor(
        async () => (await logLines(n.log)).some((l) => l.msg.startsWith('dataplane up')),
        { timeoutMs: 60_000, what: 'the daemon with no peers (kube mode)', everyMs: POLL_MS },
      );
    else
      await waitFor(async () => (await ownedRoutes(n.ns)) === peers, {
        timeoutMs: 300_000,
        what: `every route of ${peers} peer Nodes`,
        everyMs: 250,
      });
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    return {
      rss: await statusMiB(n.child?.pid),
      peak: await statusMiB(n.child?.pid, 'VmHWM'),
    };
  } catch (err) {
    const log = (await readFile(n.log, 'utf8').catch(() => '')).slice(-2000);
    throw new Error(`${(err as Error).message}; the daemon's log ends:\n${log}`, { cause: err });
  } finally {
    if (n.child) await stopProcess(n.child);
    // the next start programs everything afresh, under its own backend
    await sh(n.ns, ['ip', 'route', 'flush', 'proto', String(ROUTE_PROTOCOL)]);
    await sh(n.ns, ['ip', 'link', 'del', 'twill.1']).catch(() => undefined);
  }
}

export const kubeSuite: BenchSuite = {
  name: 'kube',
  async run() {
    await sweepStaleNetns();
    const b = await setupKube();
    const rows: BenchRow[] = [];
    try {
      const floor = new Map<Backend, Reading>();
      for (const backend of BACKENDS) floor.set(backend, await settledKubeRss(b, backend, 0));
      const full = new Map<Backend, Reading>();
      for (const [i, backend] of BACKENDS.entries()) {
        const w = await writeNodes(b, i === 0 ? 'create' : 'patch', backend);
        process.stderr.write(
          `bench: kube: ${PEERS} peer Nodes ${i === 0 ? 'created' : `patched to ${backend}`} in ${(w.ms / 1000).toFixed(1)} s (${IN_FLIGHT} requests in flight, ${w.retries} retried)\n`,
        );
        full.set(backend, await settledKubeRss(b, backend, PEERS));
      }
      for (const backend of BACKENDS) {
        const at = full.get(backend) ?? { rss: Infinity, peak: Infinity };
        const none = floor.get(backend) ?? { rss: 0, peak: 0 };
        const label = `kube mode, ${backend}`;
        rows.push(
          {
            suite: 'kube',
            figure: `daemon RSS at ${PEERS} peer Nodes, ${label} (settled: ${SETTLE_MS / 1000} s after convergence)`,
            value: Math.round(at.rss),
            unit: 'MiB',
            target: { text: `≤ ${KUBE_RSS_TARGET_MIB} MiB`, met: at.rss <= KUBE_RSS_TARGET_MIB },
          },
          {
            suite: 'kube',
            figure: `  the same, peak (VmHWM, what a memory limit must allow), ${label}`,
            value: Math.round(at.peak),
            unit: 'MiB',
          },
          {
            suite: 'kube',
            figure: `  the same daemon with no peer Nodes (Node + libraries floor), ${label}`,
            value: Math.round(none.rss),
            unit: 'MiB',
          },
          {
            suite: 'kube',
            figure: `  growth per peer (settled RSS - floor) / ${PEERS}, ${label}`,
            value: Number((((at.rss - none.rss) * 1024) / PEERS).toFixed(1)),
            unit: 'KiB',
          },
        );
      }
    } finally {
      if (b.n.child) await stopProcess(b.n.child).catch(() => undefined);
      // before its etcd goes
      await stopProcess(b.apiserver).catch(() => undefined);
      await stopNode(b.n);
    }
    return rows;
  },
};
