// End to end on Vagrant, as a user runs it: `npm run lab -- up --vagrant
// --spares 20` (VirtualBox or libvirt where a hypervisor is usable; here and
// in CI lxc, with its box built from the Debian mirror), `drill all
// --vagrant` (twenty-nodes included, on the spares), `status --vagrant`,
// `down --vagrant`. Every drill must pass (healed within ten times its
// target, full matrix after, no pod IP changed, nothing left over), the
// machine restart included, and `down` must leave no container, container
// directory, cgroup folder, bridge or settings file behind. The lab's Vagrant
// state (the dotfile directory) is a temporary directory, so a developer's
// .vagrant stays untouched; the machines' names, bridge and addresses are the
// Vagrantfile's, so the test refuses to start while a Vagrant lab is up on
// this host. Each step's time is printed for the CI log.
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { DrillResult } from '../../lab/drills.ts';
import { drillsFor } from '../../lab/drills.ts';
import { VAGRANT_DRILLS } from '../../lab/drills-vagrant.ts';
import { vagrantLeftovers } from '../../lab/vagrant-lab.ts';
import { run } from '../../src/exec/runner.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const LAB = join(ROOT, 'lab', 'main.ts');

/** `npm run lab -- ARGS…` with the lab's Vagrant state in `dot`; its output and exit code. */
async function labIn(
  dot: string,
  args: readonly string[],
  timeoutMs: number,
): Promise<{ stdout: string; stderr: string; code: number; ms: number }> {
  const t0 = performance.now();
  // arguments pass as "$@", never parsed by the shell; the exit code is printed last on stderr
  const { stdout, stderr } = await run(
    'sh',
    [
      '-c',
      '"$@"; echo "exit $?" >&2',
      'sh',
      'env',
      `VAGRANT_DOTFILE_PATH=${dot}`,
      process.execPath,
      LAB,
      ...args,
    ],
    { timeoutMs },
  );
  const code = Number(/exit (\d+)\n$/.exec(stderr)?.[1] ?? 'NaN');
  return { stdout, stderr, code, ms: performance.now() - t0 };
}

const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

describe('the Vagrant lab', () => {
  it(
    'comes up with a full matrix, passes every drill and the machine restart, and goes down without a trace',
    { timeout: 3_600_000 },
    async () => {
      const dot = await mkdtemp(join(tmpdir(), 'twill-vagrant-e2e-'));
      expect(await vagrantLeftovers(ROOT), 'a Vagrant lab is already up on this host').toEqual([]);
      onTestFinished(async () => {
        await labIn(dot, ['down', '--vagrant'], 1_800_000).catch(() => undefined);
        await rm(dot, { recursive: true, force: true });
      });

      // 20 spare node machines: twenty-nodes starts 20 nodes at once, and machines are not made
      // on the fly
      const up = await labIn(
        dot,
        ['up', '--vagrant', '--nodes', '3', '--pods', '2', '--spares', '20'],
        2_400_000,
      );
      expect(up.code, up.stderr.slice(-4000)).toBe(0);
      expect(up.stderr).toMatch(/lab: Vagrant provider (lxc|virtualbox|libvirt) \(/);
      expect(up.stdout).toContain(
        'full connectivity: 6 pods, every pod reaches every pod and outside',
      );
      console.log(`vagrant lab up: ${s(up.ms)}\n${up.stderr.trim()}`);

      const drills = await labIn(dot, ['drill', 'all', '--vagrant', '--json'], 3_000_000);
      if (drills.stdout.trim() === '')
        throw new Error(`drill all printed nothing; stderr: ${drills.stderr.slice(-4000)}`);
      const results = JSON.parse(drills.stdout) as DrillResult[];
      console.log(
        `vagrant lab drill all: ${s(drills.ms)}\n${drills.stderr.trim()}\n${results
          .map(
            (r) =>
              `${r.name}: ${r.healedMs === null ? '-' : `${Math.round(r.healedMs)} ms`} (target ${r.targetMs} ms) ${r.notes.join('; ')}`,
          )
          .join('\n')}`,
      );
      expect(results.map((r) => r.name)).toEqual([
        ...drillsFor('etcd').map((d) => d.name),
        ...VAGRANT_DRILLS.map((d) => d.name),
      ]);
      expect(results.at(-1)?.name).toBe('machine-restart');
      for (const r of results)
        expect(r, `${r.name}: ${r.notes.join('; ')} ${r.leftovers.join('; ')}`).toMatchObject({
          pass: true,
          ipChanged: [],
          leftovers: [],
        });
      // the Vagrant lab is IPv4: the IPv6 drills say so
      const dualOnly = new Set(
        drillsFor('etcd')
          .filter((d) => d.dualStackOnly === true)
          .map((d) => d.name),
      );
      for (const r of results.filter((x) => dualOnly.has(x.name)))
        expect(r.notes[0], r.name).toMatch(/^n\/a: dual-stack lab only/);
      // everything else but what needs a three-member etcd ran for real
      for (const r of results.filter((x) => x.name !== 'etcd-leader-loss' && !dualOnly.has(x.name)))
        expect(r.healedMs, `${r.name}: ${r.notes.join('; ')}`).toBeTypeOf('number');

      const status = await labIn(dot, ['status', '--vagrant'], 300_000);
      expect(status.code, status.stderr.slice(-2000)).toBe(0);
      expect(status.stdout).toContain('full connectivity');

      const down = await labIn(dot, ['down', '--vagrant'], 1_800_000);
      expect(down.code, down.stderr.slice(-2000)).toBe(0);
      console.log(`vagrant lab down: ${s(down.ms)}\n${down.stdout.trim()}`);
      expect(await vagrantLeftovers(ROOT)).toEqual([]);
      expect(existsSync(dot), `${dot}: the lab's Vagrant state, after down`).toBe(false);
    },
  );
});
