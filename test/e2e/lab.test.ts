// End to end, as a user runs it: `npm run lab -- up`, `drill all`, `down`,
// over vxlan and over host-gw. Every drill must pass with its timings, and
// `down` must leave no namespace, process or file behind. This file runs on
// its own after the other tests (see package.json), so the timings are not
// measured on a machine busy with other test files.
import { access } from 'node:fs/promises';
import { resolve } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import type { DrillResult } from '../../lab/drills.ts';

const LAB = resolve(import.meta.dirname, '../../lab/main.ts');

async function lab(...args: string[]): Promise<string> {
  return (await run(process.execPath, [LAB, ...args], { timeoutMs: 600_000 })).stdout;
}

async function leftovers(name: string): Promise<string[]> {
  const nets = (await run('ip', ['netns', 'list'])).stdout.split('\n').filter((l) => l.startsWith(`${name}-`));
  const dir = await access(`/run/twill-lab/${name}`).then(() => [`/run/twill-lab/${name}`], () => []);
  const procs = (await run('ps', ['-eo', 'args'])).stdout.split('\n').filter((l) => l.includes(`/run/twill-lab/${name}/`));
  return [...nets, ...dir, ...procs];
}

for (const backend of ['vxlan', 'host-gw'] as const) {
  describe(`the netns lab over ${backend}`, () => {
    it('comes up with a full matrix, passes every drill, and goes down without a trace', { timeout: 900_000 }, async () => {
      const name = `twe${process.pid % 100000}${backend === 'vxlan' ? 'v' : 'h'}`;
      onTestFinished(async () => void (await lab('--name', name, 'down').catch(() => '')));
      const up = await lab('--name', name, 'up', '--nodes', '3', '--pods', '2', '--backend', backend);
      expect(up).toContain('full connectivity: 6 pods, every pod reaches every pod and outside');
      const results = JSON.parse(await lab('--name', name, 'drill', 'all', '--json').catch((err: { stdout?: string }) => err.stdout ?? '[]')) as DrillResult[];
      expect(results.map((r) => r.name)).toEqual(['masq-rule', 'nat-flush', 'peer-route', 'peer-neigh', 'peer-fdb', 'vxlan-device', 'kill-restart', 'own-lease', 'etcd-outage', 'etcd-wipe', 'node-removed', 'node-added', 'twenty-nodes']);
      for (const r of results) expect(r, `${r.name}: ${r.notes.join('; ')} ${r.leftovers.join('; ')}`).toMatchObject({ pass: true, ipChanged: [], leftovers: [] });
      const status = await lab('--name', name, 'status');
      expect(status).toContain('full connectivity');
      await lab('--name', name, 'down');
      expect(await leftovers(name)).toEqual([]);
    });
  });
}
