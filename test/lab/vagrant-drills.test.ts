// The drills are written once against the Cluster interface: run on the
// Vagrant implementation with a recording executor standing in for
// `vagrant ssh`, a drill sends its breakage and its checks to the right VMs.
// Each drill names its store modes; the Vagrant lab is etcd only.
import { describe, expect, it } from 'vitest';
import { DRILLS, drillsFor, runDrill } from '../../lab/drills.ts';
import { VagrantCluster } from '../../lab/vagrant-cluster.ts';

const LEASES = [
  '10.244.1.0-24',
  '192.168.56.11',
  '10.244.7.0-24',
  '192.168.56.12',
  '10.244.9.0-24',
  '192.168.56.13',
];

/** Canned VM answers for what the drills read; every call recorded as "vm: command". */
function recordingLab(): { cluster: VagrantCluster; sent: string[] } {
  const sent: string[] = [];
  const exec = async (_file: string, args: readonly string[]): Promise<{ stdout: string }> => {
    const vm = args[3] ?? '';
    const cmd = args[5] ?? '';
    sent.push(`${vm}: ${cmd}`);
    if (cmd.endsWith('twill-lab member')) return { stdout: 'yes\n' };
    if (cmd.endsWith('twill-lab pods')) return { stdout: `${vm}-pod1 10.244.${vm.slice(-1)}.2\n` };
    if (cmd.includes('get --print-value-only /coreos.com/network/config'))
      return { stdout: '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}\n' };
    if (cmd.includes('get --prefix /coreos.com/network/subnets/')) {
      const out: string[] = [];
      for (let i = 0; i < LEASES.length; i += 2)
        out.push(
          `/coreos.com/network/subnets/${LEASES[i]}`,
          JSON.stringify({ PublicIP: LEASES[i + 1] }),
        );
      return { stdout: `${out.join('\n')}\n` };
    }
    return { stdout: '' };
  };
  // a monitor answers with what shows it listens (kernel-watch.ts's probes), then streams nothing
  // until stopped
  const watcher = async (
    _file: string,
    args: readonly string[],
    o: { signal: AbortSignal; onLine: (line: string) => void },
  ): Promise<void> => {
    sent.push(`${args[3] ?? ''}: ${args[5] ?? ''} (streamed)`);
    o.onLine(
      `[${new Date().toISOString().slice(0, -1)}] 1: lo    inet 127.0.0.77/32 scope host lo`,
    );
    o.onLine('add table ip twlprobe');
    await new Promise((r) => o.signal.addEventListener('abort', r, { once: true }));
  };
  return { cluster: new VagrantCluster({ dir: '/lab', nodes: 3, exec, watcher }), sent };
}

describe('drills on the Vagrant cluster (recorded, no VMs)', () => {
  it("peer-route deletes the route to the second node's subnet on the first node, then pings from the pods", async () => {
    const { cluster, sent } = recordingLab();
    const drill = DRILLS.find((d) => d.name === 'peer-route');
    if (!drill) throw new Error('no peer-route drill');
    await runDrill(cluster, drill);
    expect(sent).toContain('node1: sudo -n -- ip -ts monitor link address route neigh (streamed)');
    expect(sent).toContain('node1: sudo -n -- nft monitor (streamed)');
    expect(sent).toContain('node1: sudo -n -- ip route del 10.244.7.0/24');
    expect(
      sent.some(
        (s) =>
          /^node\d: sudo -n -- ip netns exec twpod-node\d-pod1 ping /.test(s) ||
          /^node\d: .*ping .*10\.244\.\d\.2/.test(s),
      ),
    ).toBe(true);
  });

  it('etcd-wipe stops etcd, deletes its data directory and puts the config back, on the etcd VM', async () => {
    const { cluster, sent } = recordingLab();
    const drill = DRILLS.find((d) => d.name === 'etcd-wipe');
    if (!drill) throw new Error('no etcd-wipe drill');
    await runDrill(cluster, drill);
    const onEtcd = sent.filter((s) => s.startsWith('etcd: '));
    expect(onEtcd.some((s) => s.includes('/var/lib/etcd/twill-lab'))).toBe(true);
    expect(
      onEtcd.some((s) =>
        s.includes(
          'put /coreos.com/network/config \'{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}\'',
        ),
      ),
    ).toBe(true);
  });
});

describe('store modes', () => {
  it('drill all runs the etcd set on an etcd lab and the kube set on a kube lab, in that order', () => {
    expect(drillsFor('etcd').map((d) => d.name)).toEqual([
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
    expect(drillsFor('kube').map((d) => d.name)).toEqual([
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
      'apiserver-outage',
      'node-deleted',
      'node-added',
      'twenty-nodes',
    ]);
  });

  it('a kube drill on the Vagrant lab (etcd) is n/a and sends nothing', async () => {
    const { cluster, sent } = recordingLab();
    const drill = DRILLS.find((d) => d.name === 'node-deleted');
    if (!drill) throw new Error('no node-deleted drill');
    expect(await runDrill(cluster, drill)).toMatchObject({
      pass: true,
      notes: ['n/a: kube lab only'],
    });
    expect(sent).toEqual([]);
  });

  it('the Vagrant lab refuses kubectl and the apiserver: kube mode is netns-only for now', async () => {
    const { cluster } = recordingLab();
    expect(cluster.store).toBe('etcd');
    await expect(cluster.kubectl()).rejects.toThrow(/kube mode is netns-only for now/);
    await expect(cluster.stopApiServer()).rejects.toThrow(/kube mode is netns-only for now/);
    await expect(cluster.startApiServer()).rejects.toThrow(/kube mode is netns-only for now/);
  });
});
