// End to end, as a user runs it: `npm run lab -- up`, `drill all`, `down`,
// over vxlan and over host-gw. Every drill must pass (it healed within ten
// times its target, full matrix after, no pod IP changed, nothing left
// over) and report its time against its target (`met`, not asserted: the
// machine's speed is not the test's business), and `down` must leave no
// namespace, process or file behind. This file runs on its own after the
// other tests (see package.json), so the timings it reports are not taken
// on a machine busy with other test files.
import { describe, expect, it, onTestFinished } from 'vitest';
import { lab, labDrills, labLeftovers } from '../helpers/lab.ts';

for (const backend of ['vxlan', 'host-gw'] as const) {
  describe(`the netns lab over ${backend}`, () => {
    it(
      'comes up with a full matrix, passes every drill, and goes down without a trace',
      { timeout: 900_000 },
      async () => {
        const name = `twe${process.pid % 100000}${backend === 'vxlan' ? 'v' : 'h'}`;
        onTestFinished(async () => void (await lab('--name', name, 'down').catch(() => '')));
        const up = await lab(
          '--name',
          name,
          'up',
          '--nodes',
          '3',
          '--pods',
          '2',
          '--backend',
          backend,
        );
        expect(up).toContain('full connectivity: 6 pods, every pod reaches every pod and outside');
        const results = await labDrills(name);
        expect(results.map((r) => r.name)).toEqual([
          'masq-rule',
          'nat-flush',
          'peer-route',
          'peer-neigh',
          'peer-fdb',
          'vxlan-device',
          'kill-restart',
          'own-lease',
          'etcd-outage',
          'etcd-wipe',
          'hostile-lease',
          'node-removed',
          'node-added',
          'twenty-nodes',
          'etcd-leader-loss',
        ]);
        for (const r of results)
          expect(r, `${r.name}: ${r.notes.join('; ')} ${r.leftovers.join('; ')}`).toMatchObject({
            pass: true,
            ipChanged: [],
            leftovers: [],
          });
        for (const r of results)
          expect(r.met === null ? r.notes[0] : typeof r.met, r.name).toMatch(
            /^(boolean|n\/a: .*)$/,
          );
        const status = await lab('--name', name, 'status');
        expect(status).toContain('full connectivity');
        await lab('--name', name, 'down');
        expect(await labLeftovers(name)).toEqual([]);
      },
    );
  });
}
