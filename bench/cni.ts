// The CNI suite: ADD and DEL latency of the twill-cni executable and of the
// reference bridge + host-local plugins (/usr/lib/cni), side by side in the
// same run, with the same subnet and inputs, each in its own node namespace
// created here and removed afterwards. Latency is the whole call as a
// runtime sees it: process start to exit. Then the processes one ADD starts
// (counted from ADD's code path, which a unit test holds to the number) and
// the executable's size beside the reference plugins' two.
import { access, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { run } from '../src/exec/runner.ts';
import { callCni, REFERENCE_DIR, subnetEnvText } from '../lab/kit/call-cni.ts';
import { TWILL_CNI } from '../lab/kit/twill-command.ts';
import { NetnsLab, sweepStaleNetns } from '../lab/kit/netns.ts';
import { ADD_PROCESSES } from '../cni/verbs/add.ts';
import { percentile, type BenchRow, type BenchSuite } from './table.ts';

const RUNS = 40;
const WARMUP = 3;
const NETWORK = '10.244.0.0/16';
const SUBNET = '10.244.3.0/24';
const MTU = 1450;

interface Plugin {
  readonly name: string;
  readonly exe: string;
  readonly conf: Record<string, unknown>;
  readonly nodeNs: string;
  readonly podNs: string;
  readonly add: number[];
  readonly del: number[];
}

async function ensureBuilt(signal: AbortSignal): Promise<void> {
  const ok = await access(TWILL_CNI).then(
    () => true,
    () => false,
  );
  if (!ok)
    await run(process.execPath, [resolve(import.meta.dirname, '../scripts/build-cni.ts')], {
      signal,
      timeoutMs: 300_000,
    });
}

async function timed(p: Plugin, verb: 'ADD' | 'DEL', id: string): Promise<number> {
  const start = performance.now();
  const answer = await callCni({
    nodeNs: p.nodeNs,
    exe: p.exe,
    verb,
    conf: p.conf,
    containerId: id,
    netns: p.podNs,
  });
  const ms = performance.now() - start;
  if (answer.code !== 0)
    throw new Error(`${p.name} ${verb} failed (${answer.code}): ${answer.stdout}${answer.stderr}`);
  return ms;
}

async function plugins(lab: NetnsLab, dir: string): Promise<Plugin[]> {
  const subnetFile = join(dir, 'subnet.env');
  await writeFile(subnetFile, subnetEnvText({ network: NETWORK, subnet: SUBNET, mtu: MTU }));
  const base = { cniVersion: '1.0.0', name: 'benchnet' };
  const twill = { ...base, type: 'twill', subnetFile, dataDir: join(dir, 'twill-ipam') };
  const ipam = {
    type: 'host-local',
    dataDir: join(dir, 'ref-ipam'),
    ranges: [[{ subnet: SUBNET }]],
    routes: [{ dst: NETWORK }],
  };
  const ref = {
    ...base,
    type: 'bridge',
    bridge: 'cni0',
    isGateway: true,
    isDefaultGateway: true,
    hairpinMode: true,
    mtu: MTU,
    ipam,
  };
  return [
    {
      name: 'twill-cni',
      exe: TWILL_CNI,
      conf: twill,
      nodeNs: await lab.add('bt-node'),
      podNs: await lab.add('bt-pod'),
      add: [],
      del: [],
    },
    {
      name: 'bridge + host-local',
      exe: join(REFERENCE_DIR, 'bridge'),
      conf: ref,
      nodeNs: await lab.add('br-node'),
      podNs: await lab.add('br-pod'),
      add: [],
      del: [],
    },
  ];
}

const MIB = 1024 * 1024;

/** twill-cni's size, and the reference's (bridge and the host-local it runs), in MiB. */
async function sizeRow(): Promise<BenchRow> {
  const size = async (f: string): Promise<number> => (await stat(f)).size;
  const ref =
    (await size(join(REFERENCE_DIR, 'bridge'))) + (await size(join(REFERENCE_DIR, 'host-local')));
  return {
    suite: 'cni',
    figure: 'executable size (a Node SEA: node itself, stripped, and the plugin)',
    value: Math.round(((await size(TWILL_CNI)) / MIB) * 10) / 10,
    unit: 'MiB',
    yardstick: { name: 'bridge + host-local', value: Math.round((ref / MIB) * 10) / 10 },
  };
}

function rows(twill: Plugin, ref: Plugin): BenchRow[] {
  const row = (verb: 'ADD' | 'DEL', p: number): BenchRow => ({
    suite: 'cni',
    figure: `${verb} p${p}, ${RUNS} runs`,
    value: percentile(verb === 'ADD' ? twill.add : twill.del, p),
    unit: 'ms',
    yardstick: { name: ref.name, value: percentile(verb === 'ADD' ? ref.add : ref.del, p) },
  });
  const add50 = row('ADD', 50);
  const met = add50.value <= 4 * (add50.yardstick?.value ?? 0);
  return [
    { ...add50, target: { text: 'ADD p50 ≤ 4× reference', met } },
    row('ADD', 95),
    row('DEL', 50),
    row('DEL', 95),
    {
      suite: 'cni',
      figure: 'processes one ADD starts (ip; nsenter, which becomes ip), from the code path',
      value: ADD_PROCESSES,
      unit: 'processes',
    },
  ];
}

async function measure(signal: AbortSignal): Promise<BenchRow[]> {
  await sweepStaleNetns();
  await ensureBuilt(signal);
  const lab = new NetnsLab();
  const dir = await mkdtemp(join(tmpdir(), 'twill-bench-cni-'));
  try {
    const [twill, ref] = (await plugins(lab, dir)) as [Plugin, Plugin];
    for (let i = 0; i < WARMUP + RUNS && !signal.aborted; i++) {
      for (const p of [twill, ref]) {
        const add = await timed(p, 'ADD', `bench-${i}`);
        const del = await timed(p, 'DEL', `bench-${i}`);
        if (i >= WARMUP) {
          p.add.push(add);
          p.del.push(del);
        }
      }
    }
    return [...rows(twill, ref), await sizeRow()];
  } finally {
    await lab.destroy();
    await rm(dir, { recursive: true, force: true });
  }
}

export const cniSuite: BenchSuite = { name: 'cni', run: measure };
