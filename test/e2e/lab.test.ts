// End to end, as a user runs it: `npm run lab -- up`, `drill all`, `down`,
// over vxlan and over host-gw, dual-stack over vxlan, and twill in nftables
// mode (`up --nftables`, dual-stack over vxlan: both of its tables). Every
// drill must pass (it healed within ten times its target, full matrix after,
// no pod IP changed, nothing left over) and report its time against its
// target (`met`, not asserted: the machine's speed is not the test's
// business), and `down` must leave no namespace, process or file behind.
// This file runs on its own after the other tests (see package.json), so the
// timings it reports are not taken on a machine busy with other test files.
import { describe, expect, it, onTestFinished } from 'vitest';
import { NetnsCluster } from '../../lab/netns-cluster.ts';
import { lab, labDrills, labLeftovers } from '../helpers/lab.ts';

const IPV6_DRILLS = ['masq6-rule', 'peer-route6', 'peer-neigh6', 'peer-fdb6', 'vxlan6-device'];

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
        // an IPv4 lab: the IPv6 drills say n/a (on host-gw the vxlan ones say so first)
        for (const r of results.filter((x) => IPV6_DRILLS.includes(x.name)))
          expect(r.notes[0], r.name).toMatch(/^n\/a: (dual-stack lab only|vxlan only)/);
        expect(results.map((r) => r.name)).toEqual([
          'masq-rule',
          'nat-flush',
          'masq-table',
          'peer-route',
          'peer-neigh',
          'peer-fdb',
          'vxlan-device',
          'masq6-rule',
          'peer-route6',
          'peer-neigh6',
          'peer-fdb6',
          'vxlan6-device',
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

describe('the netns lab, dual-stack over vxlan', () => {
  it(
    'comes up with a full matrix in both families, passes every drill with the IPv6 ones, and goes down',
    { timeout: 900_000 },
    async () => {
      const name = `twe${process.pid % 100000}d`;
      onTestFinished(async () => void (await lab('--name', name, 'down').catch(() => '')));
      const up = await lab('--name', name, 'up', '--nodes', '3', '--pods', '2', '--dual-stack');
      expect(up).toContain('full connectivity: 6 pods, every pod reaches every pod and outside');
      // every pod and the outside host by IPv6 too: 6 pods + outside, twice
      expect(up).toContain('14=outside/6');
      const results = await labDrills(name);
      for (const r of results)
        expect(r, `${r.name}: ${r.notes.join('; ')} ${r.leftovers.join('; ')}`).toMatchObject({
          pass: true,
          ipChanged: [],
          leftovers: [],
        });
      // the IPv6 breaks really ran and healed (timed), not n/a
      for (const r of results.filter((x) => IPV6_DRILLS.includes(x.name)))
        expect(typeof r.met, `${r.name}: ${r.notes.join('; ')}`).toBe('boolean');
      await lab('--name', name, 'down');
      expect(await labLeftovers(name)).toEqual([]);
    },
  );
});

/** The drills that break the masquerade: in nftables mode they break twill's tables. */
const MASQ_DRILLS = ['masq-rule', 'nat-flush', 'masq-table', 'masq6-rule'];

describe('the netns lab in nftables mode, dual-stack over vxlan', () => {
  it(
    "keeps twill's masquerade in its nftables tables alone, passes every drill breaking those, and goes down",
    { timeout: 900_000 },
    async () => {
      const name = `twe${process.pid % 100000}n`;
      onTestFinished(async () => void (await lab('--name', name, 'down').catch(() => '')));
      const up = await lab(
        '--name',
        name,
        'up',
        '--nodes',
        '3',
        '--pods',
        '2',
        '--dual-stack',
        '--nftables',
      );
      expect(up).toContain(`netns lab ${name} (vxlan, dual-stack, nftables)`);
      expect(up).toContain('full connectivity: 6 pods, every pod reaches every pod and outside');
      expect(up).toContain('14=outside/6');
      // seen apart from the drills' own checks: each node holds both of twill's tables and no
      // TWILL-* iptables chain in either family
      const c = await NetnsCluster.open(name);
      if (!c) throw new Error(`lab ${name} is not up`);
      for (const n of await c.nodes()) {
        const tables = await c.sh({ node: n.name }, ['nft', 'list', 'tables']);
        expect(tables, n.name).toContain('table ip twill-ipv4');
        expect(tables, n.name).toContain('table ip6 twill-ipv6');
        for (const save of ['iptables-save', 'ip6tables-save'])
          expect(await c.sh({ node: n.name }, [save]), `${n.name}: ${save}`).not.toContain(
            'TWILL-',
          );
      }
      const results = await labDrills(name);
      for (const r of results)
        expect(r, `${r.name}: ${r.notes.join('; ')} ${r.leftovers.join('; ')}`).toMatchObject({
          pass: true,
          ipChanged: [],
          leftovers: [],
        });
      // the masquerade breaks ran on twill's nftables tables, and healed (timed), not n/a
      for (const d of MASQ_DRILLS) {
        const r = results.find((x) => x.name === d);
        expect(typeof r?.met, `${d}: ${r?.notes.join('; ')}`).toBe('boolean');
        expect(r?.broke, d).toMatch(/nft table/);
        expect(r?.notes[0], d).toMatch(/^on n1: nft (delete|flush) /);
      }
      for (const r of results.filter((x) => IPV6_DRILLS.includes(x.name)))
        expect(typeof r.met, `${r.name}: ${r.notes.join('; ')}`).toBe('boolean');
      await lab('--name', name, 'down');
      expect(await labLeftovers(name)).toEqual([]);
    },
  );
});
