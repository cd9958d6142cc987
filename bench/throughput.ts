// Pod-to-pod TCP throughput, host-gw and vxlan, against node-to-node over
// the underlay in the same lab: a 2-node netns lab per backend (the real
// daemon, pods wired by the real twill-cni), iperf3 from the pod on n1 to the
// pod on n2 and from node n1 to node n2, alternating, 4 rounds of 2 s each;
// the best round of each (the least disturbed by other work on the machine)
// and the median. Then the MTU: a ping with DF set and FLANNEL_MTU−28 bytes
// of payload (a full-size packet) must cross from pod to pod, and one byte
// more must be refused at the pod's interface; and no packet may have been
// fragmented or reassembled anywhere in the lab (the kernel's Ip
// FragCreates, FragFails and ReasmReqds counters of every node, pod and
// router namespace, before and after all of it).
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Target } from '../lab/cluster.ts';
import { ping } from '../lab/matrix.ts';
import { nsRun } from '../lab/kit/netns.ts';
import { NetnsCluster } from '../lab/netns-cluster.ts';
import { labDir } from '../lab/state.ts';
import { percentile, type BenchRow, type BenchSuite } from './table.ts';

const SECONDS = 2;
/** rounds, alternating underlay and pods; the best and the median of each are reported */
const ROUNDS = 4;
const PORT = '5201';
const FRAG_COUNTERS = ['FragCreates', 'FragFails', 'ReasmReqds'];

const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The sum of the fragmentation counters in /proc/net/snmp, as namespace `ns` sees it. */
async function fragCount(ns: string): Promise<number> {
  const snmp = (await nsRun(ns, ['cat', '/proc/net/snmp'])).stdout
    .split('\n')
    .filter((l) => l.startsWith('Ip:'));
  const names = (snmp[0] ?? '').split(/\s+/);
  const values = (snmp[1] ?? '').split(/\s+/);
  return FRAG_COUNTERS.reduce((sum, c) => sum + Number(values[names.indexOf(c)] ?? Number.NaN), 0);
}

async function fragTotal(namespaces: readonly string[]): Promise<number> {
  let total = 0;
  for (const ns of namespaces) total += await fragCount(ns);
  return total;
}

/** iperf3 for SECONDS from `client` to `server` (listening on `ip`); Gbit/s received. */
async function iperf(
  c: NetnsCluster,
  o: { server: Target; client: Target; ip: string },
): Promise<number> {
  const served = c.sh(o.server, ['iperf3', '-s', '-1', '-p', PORT], {
    timeoutMs: (SECONDS + 30) * 1000,
  });
  void served.catch(() => undefined); // awaited below; a failing client reports first
  for (let i = 0; (await c.sh(o.server, ['ss', '-Hltn', `sport = :${PORT}`])).trim() === ''; i++) {
    if (i > 100) throw new Error('bench: iperf3 server did not listen');
    await sleepMs(20);
  }
  const out = await c.sh(
    o.client,
    ['iperf3', '-c', o.ip, '-p', PORT, '-t', String(SECONDS), '-J'],
    { timeoutMs: (SECONDS + 20) * 1000 },
  );
  await served;
  const bps = (JSON.parse(out) as { end?: { sum_received?: { bits_per_second?: number } } }).end
    ?.sum_received?.bits_per_second;
  if (bps === undefined) throw new Error(`bench: iperf3 gave no result: ${out.slice(0, 300)}`);
  return Math.round(bps / 1e7) / 100;
}

/**
 * A ping with DF set and `size` bytes of payload: answered, refused locally as too long, or lost.
 */
async function pingDf(
  c: NetnsCluster,
  o: { from: string; ip: string; size: number },
): Promise<'ok' | 'too long' | 'lost'> {
  return c
    .sh({ pod: o.from }, ['ping', '-c', '1', '-W', '2', '-M', 'do', '-s', String(o.size), o.ip], {
      timeoutMs: 5_000,
    })
    .then(
      () => 'ok' as const,
      (err: unknown) =>
        /message too long/i.test(String(err)) ? ('too long' as const) : ('lost' as const),
    );
}

async function flannelMtu(lab: string): Promise<number> {
  const env = await readFile(join(labDir(lab), 'n1', 'subnet.env'), 'utf8');
  return Number(/FLANNEL_MTU=(\d+)/.exec(env)?.[1] ?? Number.NaN);
}

async function measure(c: NetnsCluster, lab: string): Promise<BenchRow[]> {
  const backend = c.backend;
  const [p1, p2] = await c.pods();
  const [n1, n2] = await c.nodes();
  if (!p1 || !p2 || !n1 || !n2) throw new Error('bench: the lab has no two nodes with a pod each');
  for (let i = 0; !(await ping(c, p1.name, p2.ip)); i++)
    if (i > 50) throw new Error(`bench: ${p1.name} never reached ${p2.ip}`);
  const namespaces = ['rt', 'n1', 'n2', p1.name, p2.name].map((s) => `${lab}-${s}`);
  const mtu = await flannelMtu(lab);
  const before = await fragTotal(namespaces);
  const runs = { underlay: [] as number[], pods: [] as number[] };
  for (let i = 0; i < ROUNDS; i++) {
    runs.underlay.push(
      await iperf(c, { server: { node: n2.name }, client: { node: n1.name }, ip: n2.ip }),
    );
    runs.pods.push(
      await iperf(c, { server: { pod: p2.name }, client: { pod: p1.name }, ip: p2.ip }),
    );
  }
  const full = await pingDf(c, { from: p1.name, ip: p2.ip, size: mtu - 28 });
  const over = await pingDf(c, { from: p1.name, ip: p2.ip, size: mtu - 27 });
  const fragments = (await fragTotal(namespaces)) - before;
  const largest = over === 'ok' ? mtu + 1 : full === 'ok' ? mtu : 0;
  return [
    {
      suite: 'throughput',
      figure: `pod-to-pod TCP (iperf3, 1 stream, best of ${ROUNDS}×${SECONDS} s), ${backend}`,
      value: Math.max(...runs.pods),
      unit: 'Gbit/s',
      yardstick: { name: 'node-to-node', value: Math.max(...runs.underlay) },
    },
    {
      suite: 'throughput',
      figure: `  the median of the ${ROUNDS} rounds, ${backend}`,
      value: percentile(runs.pods, 50),
      unit: 'Gbit/s',
      yardstick: { name: 'node-to-node', value: percentile(runs.underlay, 50) },
    },
    {
      suite: 'throughput',
      figure: `  largest pod-to-pod packet with DF set (probes ${mtu} and ${mtu + 1} bytes), ${backend}`,
      value: largest,
      unit: 'bytes',
      target: {
        text: `= FLANNEL_MTU ${mtu}, ${mtu + 1} refused`,
        met: full === 'ok' && over === 'too long',
      },
    },
    {
      suite: 'throughput',
      figure: `  packets fragmented or reassembled meanwhile (nodes, pods, router), ${backend}`,
      value: fragments,
      unit: 'packets',
      target: { text: '= 0', met: fragments === 0 },
    },
  ];
}

async function backendRows(backend: 'host-gw' | 'vxlan'): Promise<BenchRow[]> {
  const name = `twb${process.pid}${backend === 'vxlan' ? 'v' : 'h'}`;
  try {
    const c = await NetnsCluster.create({ name, backend });
    await c.addNodes(['n1', 'n2'], 1);
    return await measure(c, name);
  } finally {
    await NetnsCluster.destroy(name);
  }
}

export const throughputSuite: BenchSuite = {
  name: 'throughput',
  async run() {
    return [...(await backendRows('host-gw')), ...(await backendRows('vxlan'))];
  },
};
