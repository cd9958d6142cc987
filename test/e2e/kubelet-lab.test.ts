// End to end as clusters run twill: `npm run lab -- up --kubelet` (a
// control plane with controller-manager and scheduler; per node containerd,
// kubelet and kube-proxy in its own namespaces; deploy/ applied through its
// lab overlay, so twill is a DaemonSet pod and containerd calls twill-cni for
// every pod), then every kubelet drill, then `down`. Each node goes Ready
// only with twill's CNI config in place and NetworkUnavailable cleared, its
// podCIDR comes from the controller-manager, `kubectl exec` and `kubectl
// logs` work, twill runs locked down (capabilities, no new privileges,
// seccomp, read-only root) with jemalloc as its malloc, every drill passes
// (how fast is the table's `met`), and
// `down` leaves no namespace, process, mount, cgroup or file. Runs in the
// separate e2e pass (see package.json).
import { access, readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { NetnsCluster } from '../../lab/netns-cluster.ts';
import { allocatorIn } from '../../src/cli/allocator.ts';
import { run } from '../../src/exec/runner.ts';
import { nodeObjects } from '../../lab/store-view.ts';
import { labDrills, labLeftovers, labWith } from '../helpers/lab.ts';

const KUBELET_DRILLS = [
  'service',
  'twill-pod-deleted',
  'rolling-update',
  'kubelet-restart',
  'containerd-restart',
  'pods-while-twill-down',
  'node-reboot',
  'node-drain-delete',
  'node-join',
];

/**
 * The cgroup directories of every container the lab's nodes run now, from runc's state in each
 * node's runc root.
 */
async function containerCgroups(name: string): Promise<string[]> {
  const paths: string[] = [];
  const lab = join('/run/twill-lab', name);
  for (const node of (await readdir(lab)).filter((d) => /^n\d+$/.test(d))) {
    const root = join(lab, node, 'runc', 'k8s.io');
    for (const id of await readdir(root).catch(() => [])) {
      const state = JSON.parse(await readFile(join(root, id, 'state.json'), 'utf8')) as {
        cgroup_paths?: Record<string, string>;
      };
      paths.push(...Object.values(state.cgroup_paths ?? {}));
    }
  }
  return paths;
}

/** Of `cgroups`, those still there, and every mount of lab `name` still on the host. */
async function hostTraces(name: string, cgroups: readonly string[]): Promise<string[]> {
  const mounts = (await readFile('/proc/self/mountinfo', 'utf8'))
    .split('\n')
    .filter((l) => l.includes(`/run/twill-lab/${name}/`));
  const left = await Promise.all(
    cgroups.map((p) =>
      access(p).then(
        () => [p],
        () => [],
      ),
    ),
  );
  return [...mounts, ...left.flat()];
}

describe('the kubelet lab', () => {
  it(
    'runs deploy/ under real kubelets, passes every kubelet drill, and goes down without a trace',
    { timeout: 3_000_000 },
    async () => {
      const name = `twk${process.pid % 100000}`;
      onTestFinished(
        async () =>
          void (await labWith({ timeoutMs: 600_000 }, '--name', name, 'down').catch(() => '')),
      );
      const up = await labWith(
        { timeoutMs: 1_800_000 },
        '--name',
        name,
        'up',
        '--kubelet',
        '--nodes',
        '3',
        '--pods',
        '2',
      );
      expect(up).toContain('full connectivity: 6 pods, every pod reaches every pod and outside');

      const c = await NetnsCluster.open(name);
      if (!c) throw new Error(`lab ${name} is not up`);
      const nodes = await nodeObjects(c);
      expect(nodes.map((n) => n.metadata.name).sort()).toEqual(['n1', 'n2', 'n3']);
      const cidrs = new Set<string>();
      for (const n of nodes) {
        const cond = Object.fromEntries(
          (n.status?.conditions ?? []).map((x) => [x.type, x.status]),
        );
        expect(cond, n.metadata.name).toMatchObject({ Ready: 'True', NetworkUnavailable: 'False' });
        // the controller-manager's allocation, from --cluster-cidr 10.244.0.0/16
        expect(n.spec?.podCIDR, n.metadata.name).toMatch(/^10\.244\.\d+\.0\/24$/);
        cidrs.add(n.spec?.podCIDR ?? '');
        // what deploy/'s init containers installed on the node
        const dir = join('/run/twill-lab', name, n.metadata.name, 'fs');
        await access(join(dir, 'opt/cni/bin/twill'));
        expect(
          JSON.parse(await readFile(join(dir, 'etc/cni/net.d/10-twill.conflist'), 'utf8')),
        ).toMatchObject({ name: 'twill', plugins: [{ type: 'twill' }, { type: 'portmap' }] });
      }
      expect(cidrs.size).toBe(3);

      // twill runs as deploy/ locks it down: NET_ADMIN and NET_RAW only, no new privileges,
      // seccomp, read-only root
      const pids = (await run('ps', ['-eo', 'pid=,args='])).stdout
        .split('\n')
        .filter((l) => l.includes('/usr/local/bin/twill run --kube-subnet-mgr'))
        .map((l) => l.trim().split(' ')[0] ?? '');
      expect(pids.length).toBeGreaterThanOrEqual(3);
      for (const pid of pids) {
        const status = await readFile(`/proc/${pid}/status`, 'utf8');
        expect(status, pid).toMatch(/CapEff:\s+0000000000003000/);
        expect(status, pid).toMatch(/NoNewPrivs:\s+1/);
        expect(status, pid).toMatch(/Seccomp:\s+2/);
        const root = (await readFile(`/proc/${pid}/mountinfo`, 'utf8'))
          .split('\n')
          .find((l) => l.split(' ')[4] === '/');
        expect(root?.split(' ')[5], pid).toMatch(/^ro,/);
        // and with the image's malloc, jemalloc (src/cli/allocator.ts)
        expect(allocatorIn(await readFile(`/proc/${pid}/maps`, 'utf8')), pid).toBe('jemalloc');
      }

      // the apiserver reaches each kubelet: exec and logs
      expect(
        (await labWith({}, '--name', name, 'kubectl', 'exec', 'n2-p1', '--', 'hostname')).trim(),
      ).toBe('n2-p1');
      const twillPod =
        (
          await labWith(
            {},
            '--name',
            name,
            'kubectl',
            'get',
            'pods',
            '-n',
            'twill-system',
            '-o',
            'name',
          )
        ).split('\n')[0] ?? '';
      expect(
        await labWith({}, '--name', name, 'kubectl', 'logs', '-n', 'twill-system', twillPod),
      ).toContain('"msg":"dataplane updated"');
      const status = await labWith({}, '--name', name, 'status');
      expect(status).toMatch(/twill pods:[\s\S]*Running[\s\S]*test pods:/);

      const results = await labDrills(name, 'all', 2_400_000);
      expect(results.map((r) => r.name)).toEqual(KUBELET_DRILLS);
      for (const r of results)
        expect(r, `${r.name}: ${r.notes.join('; ')} ${r.leftovers.join('; ')}`).toMatchObject({
          pass: true,
          ipChanged: [],
          leftovers: [],
        });
      for (const r of results) expect(typeof r.met, r.name).toBe('boolean');

      // every pod's containers (pause and toolbox per pod, twill's per node) have cgroups now;
      // `down` kills them all
      const cgroups = await containerCgroups(name);
      expect(cgroups.length).toBeGreaterThanOrEqual(2 * 3 * 2);
      await labWith({ timeoutMs: 600_000 }, '--name', name, 'down');
      expect(await labLeftovers(name)).toEqual([]);
      expect(await hostTraces(name, cgroups)).toEqual([]);
    },
  );
});
