// VagrantCluster against a recording executor: the exact local argv (always
// `env VAGRANT_CWD=… vagrant ssh <vm> -c <command> -- -T`, or with the ssh
// transport `ssh -F <vagrant ssh-config> … <vm> <command>`, never a local
// shell string) and remote command sent for each Cluster operation, answers
// parsed from canned VM output, and clear refusals where VMs cannot follow.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { run, type RunOptions } from '../../src/exec/runner.ts';
import {
  labNodeCount,
  Limiter,
  MAX_COMMANDS_PER_MACHINE,
  parsePodList,
  VagrantCluster,
} from '../../lab/vagrant-cluster.ts';

interface Call {
  readonly file: string;
  readonly args: readonly string[];
  readonly opts: RunOptions | undefined;
}

const DIR = '/home/me/twill';

/** A fake lab: answers `twill-lab member` / `twill-lab pods` per VM, records every call. */
function fakeLab(state: { members?: string[]; pods?: Record<string, string> } = {}) {
  const calls: Call[] = [];
  const members = state.members ?? ['node1', 'node2', 'node3'];
  const exec = async (
    file: string,
    args: readonly string[],
    opts?: RunOptions,
  ): Promise<{ stdout: string }> => {
    calls.push({ file, args, opts });
    const vm = args[3] ?? '';
    const command = args[5] ?? '';
    if (command === 'sudo -n -- twill-lab member')
      return { stdout: members.includes(vm) ? 'yes\n' : 'no\n' };
    if (command === 'sudo -n -- twill-lab pods') return { stdout: state.pods?.[vm] ?? '' };
    return { stdout: `ran on ${vm}\n` };
  };
  const cluster = new VagrantCluster({ dir: DIR, nodes: 3, exec });
  /** The remote commands sent, as "vm: command". */
  const sent = (): string[] => calls.map((c) => `${c.args[3]}: ${c.args[5]}`);
  return { cluster, calls, sent };
}

const PODS = {
  node1: 'node1-pod1 10.244.1.2\nnode1-pod2 10.244.1.3\n',
  node2: 'node2-pod1 10.244.7.2\n',
  node3: '',
};

describe('VagrantCluster commands', () => {
  it('sends sh on a node as one argv: env VAGRANT_CWD, vagrant ssh, the quoted command under sudo, ssh -T', async () => {
    const { cluster, calls } = fakeLab();
    expect(
      await cluster.sh({ node: 'node2' }, ['ip', 'route', 'del', '10.244.7.0/24', 'proto', '151']),
    ).toBe('ran on node2\n');
    expect(calls).toEqual([
      {
        file: 'env',
        args: [
          `VAGRANT_CWD=${DIR}`,
          'vagrant',
          'ssh',
          'node2',
          '-c',
          'sudo -n -- ip route del 10.244.7.0/24 proto 151',
          '--',
          '-T',
        ],
        opts: { timeoutMs: 35_000, input: '' },
      },
    ]);
  });

  it('sends sh on etcd and outside to those VMs, passing input and timeout (plus vagrant overhead)', async () => {
    const { cluster, calls, sent } = fakeLab();
    await cluster.sh('etcd', [
      'etcdctl',
      '--endpoints',
      cluster.etcdEndpoint,
      'put',
      '/coreos.com/network/config',
      '{"Network":"10.244.0.0/16"}',
    ]);
    await cluster.sh('outside', ['ping', '-c1', '-W1', '10.244.1.2'], {
      timeoutMs: 2000,
      input: 'x\n',
    });
    expect(sent()).toEqual([
      `etcd: sudo -n -- etcdctl --endpoints http://192.168.56.10:2379 put /coreos.com/network/config '{"Network":"10.244.0.0/16"}'`,
      'outside: sudo -n -- ping -c1 -W1 10.244.1.2',
    ]);
    expect(calls[1]?.opts).toEqual({ timeoutMs: 17_000, input: 'x\n' });
  });

  it('sends sh on a pod to its node, inside the pod namespace, after looking the pod up once', async () => {
    const { cluster, sent } = fakeLab({ pods: PODS });
    await cluster.sh({ pod: 'node2-pod1' }, ['ping', '-c', '1', '203.0.113.1']);
    await cluster.sh({ pod: 'node1-pod2' }, ['sh', '-c', 'echo $HOSTNAME; cat /etc/hosts']);
    expect(sent()).toEqual([
      'node1: sudo -n -- twill-lab member',
      'node2: sudo -n -- twill-lab member',
      'node3: sudo -n -- twill-lab member',
      'node1: sudo -n -- twill-lab pods',
      'node2: sudo -n -- twill-lab pods',
      'node3: sudo -n -- twill-lab pods',
      'node2: sudo -n -- ip netns exec twpod-node2-pod1 ping -c 1 203.0.113.1',
      "node1: sudo -n -- ip netns exec twpod-node1-pod2 sh -c 'echo $HOSTNAME; cat /etc/hosts'",
    ]);
  });

  it('delivers a hostile pod argv byte for byte to the remote program', async () => {
    const { cluster, calls } = fakeLab({ pods: PODS });
    const argv = ['sh', '-c', `echo "it's $(id -u)"; echo x # ; \`true\``, '', '\n', "'"];
    await cluster.sh({ pod: 'node1-pod1' }, argv);
    const remote = calls.at(-1)?.args[5] ?? '';
    const { stdout } = await run('bash', ['-c', `sudo() { printf '%s\\0' "$@"; }; ${remote}`]);
    expect(stdout.split('\0').slice(0, -1)).toEqual([
      '-n',
      '--',
      'ip',
      'netns',
      'exec',
      'twpod-node1-pod1',
      ...argv,
    ]);
  });

  it('starts and stops twill with systemctl, and SIGKILLs it through twill-lab', async () => {
    const { cluster, sent, calls } = fakeLab();
    await cluster.startTwill('node1');
    await cluster.stopTwill('node2', 'term');
    await cluster.stopTwill('node3', 'kill');
    expect(sent()).toEqual([
      'node1: sudo -n -- systemctl start twill',
      'node2: sudo -n -- systemctl stop twill',
      'node3: sudo -n -- twill-lab kill',
    ]);
    expect(calls[1]?.opts?.timeoutMs).toBe(60_000);
  });

  it('reads the twill log file on the node', async () => {
    const { cluster, sent } = fakeLab();
    expect(await cluster.twillLog('node3')).toBe('ran on node3\n');
    expect(sent()).toEqual(['node3: sudo -n -- cat -- /var/log/twill/twill.log']);
    expect(cluster.logPath('node3')).toContain('node3:/var/log/twill/twill.log');
  });

  it('stops etcd, starts it, and wipes its data directory before a start', async () => {
    const { cluster, sent } = fakeLab();
    await cluster.stopEtcd();
    await cluster.startEtcd({ wipe: false });
    await cluster.stopEtcd();
    await cluster.startEtcd({ wipe: true });
    expect(sent()).toEqual([
      'etcd: sudo -n -- systemctl stop etcd',
      'etcd: sudo -n -- systemctl start etcd',
      'etcd: sudo -n -- systemctl stop etcd',
      'etcd: sudo -n -- rm -rf -- /var/lib/etcd/twill-lab && sudo -n -- systemctl start etcd',
    ]);
  });
});

describe('VagrantCluster state', () => {
  it('lists the nodes whose twill is enabled, with their underlay addresses', async () => {
    const { cluster } = fakeLab({ members: ['node1', 'node3'] });
    expect(await cluster.nodes()).toEqual([
      { name: 'node1', ip: '192.168.56.11' },
      { name: 'node3', ip: '192.168.56.13' },
    ]);
    expect(await cluster.spareNodes()).toEqual(['node2']);
  });

  it('lists pods from every node in the lab', async () => {
    const { cluster, sent } = fakeLab({ members: ['node1', 'node2'], pods: PODS });
    expect(await cluster.pods()).toEqual([
      { name: 'node1-pod1', node: 'node1', ip: '10.244.1.2' },
      { name: 'node1-pod2', node: 'node1', ip: '10.244.1.3' },
      { name: 'node2-pod1', node: 'node2', ip: '10.244.7.2' },
    ]);
    expect(sent().filter((s) => s.endsWith('pods'))).toEqual([
      'node1: sudo -n -- twill-lab pods',
      'node2: sudo -n -- twill-lab pods',
    ]);
  });

  it('refuses a pod line without an address, and an unknown pod', async () => {
    expect(() => parsePodList('node1', 'node1-pod1 -\n')).toThrow(
      /node1-pod1 on node1 has no IPv4 address/,
    );
    expect(() => parsePodList('node1', 'node1-pod1 10.244.1\n')).toThrow(/no IPv4 address/);
    const { cluster } = fakeLab({ pods: PODS });
    await expect(cluster.sh({ pod: 'nope' }, ['true'])).rejects.toThrow(/no pod "nope"/);
  });

  it('adds a spare node with its pods in one call, and removes a node through twill-lab leave', async () => {
    const { cluster, sent, calls } = fakeLab({ members: ['node1', 'node2'] });
    await cluster.addNodes(['node3'], 2);
    await cluster.removeNode('node1');
    expect(sent().filter((s) => !s.endsWith('member'))).toEqual([
      'node3: sudo -n -- twill-lab join node3-pod1 node3-pod2',
      'node1: sudo -n -- twill-lab leave',
    ]);
    expect(calls.find((c) => c.args[5]?.includes('join'))?.opts?.timeoutMs).toBe(195_000);
  });

  it('refuses to add a node the Vagrantfile does not define, or one already in the lab', async () => {
    const { cluster, sent } = fakeLab({ members: ['node1', 'node2'] });
    await expect(cluster.addNodes(['node4'], 2)).rejects.toThrow(
      /no node VM "node4": the Vagrantfile defines node1..node3 .*cannot be made on the fly/,
    );
    await expect(cluster.addNodes(['node2'], 2)).rejects.toThrow(/node2 is already in the lab/);
    await expect(cluster.addNodes(['node3', 'node3'], 2)).rejects.toThrow(/named twice/);
    expect(sent().filter((s) => s.includes('join'))).toEqual([]);
  });

  it('refuses commands on machines that do not exist', async () => {
    const { cluster, calls } = fakeLab();
    await expect(cluster.sh({ node: 'node9' }, ['true'])).rejects.toThrow(/no node VM "node9"/);
    await expect(cluster.startTwill('etcd')).rejects.toThrow(/no node VM "etcd"/);
    await expect(cluster.sh({ node: 'node1' }, [])).rejects.toThrow(/empty/);
    expect(calls).toEqual([]);
  });

  it('reads TWILL_LAB_NODES as the Vagrantfile does', () => {
    expect(labNodeCount({})).toBe(3);
    expect(labNodeCount({ TWILL_LAB_NODES: '5' })).toBe(5);
    for (const bad of ['0', '-1', '2.5', 'x', '', '201'])
      expect(() => labNodeCount({ TWILL_LAB_NODES: bad })).toThrow(/TWILL_LAB_NODES/);
    expect(() => new VagrantCluster({ nodes: 0 })).toThrow(/nodes=0/);
  });
});

describe('VagrantCluster twill CPU', () => {
  it("reads twill.service's main process from /proc, each command an argv, and nothing when twill does not run", async () => {
    const sent: string[] = [];
    const exec = async (_file: string, args: readonly string[]): Promise<{ stdout: string }> => {
      const command = args[5] ?? '';
      sent.push(`${args[3] ?? ''}: ${command}`);
      if (command.includes('systemctl show'))
        return { stdout: args[3] === 'node1' ? '4242\n' : '0\n' };
      if (command.includes('/proc/4242/stat'))
        return {
          stdout:
            '4242 (node) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 30 20 20 0 11 0 100 0 0\n',
        };
      return { stdout: '' };
    };
    const cluster = new VagrantCluster({ dir: DIR, nodes: 3, exec });
    expect(await cluster.twillCpuMs('node1')).toBe(2_500);
    expect(await cluster.twillCpuMs('node2')).toBeUndefined();
    expect(sent).toEqual([
      'node1: sudo -n -- systemctl show --property MainPID --value twill',
      'node1: sudo -n -- cat -- /proc/4242/stat',
      'node2: sudo -n -- systemctl show --property MainPID --value twill',
    ]);
  });
});

describe('VagrantCluster over plain ssh', () => {
  it('asks `vagrant ssh-config` once, writes it to its directory, then sends each command over ssh with one shared connection per machine', async () => {
    const sshDir = join(await mkdtemp(join(tmpdir(), 'twill-vc-')), 'ssh');
    try {
      const calls: { file: string; args: readonly string[] }[] = [];
      const exec = async (file: string, args: readonly string[]): Promise<{ stdout: string }> => {
        calls.push({ file, args });
        if (args.includes('ssh-config'))
          return { stdout: 'Host node1\n  HostName 192.168.56.11\n' };
        return { stdout: 'ok\n' };
      };
      const cluster = new VagrantCluster({ dir: DIR, nodes: 3, exec, transport: 'ssh', sshDir });
      await cluster.sh({ node: 'node1' }, ['ip', 'route']);
      await cluster.sh('etcd', ['true']);
      expect(calls.map((c) => [c.file, ...c.args])).toEqual([
        ['env', `VAGRANT_CWD=${DIR}`, 'vagrant', 'ssh-config'],
        [
          'ssh',
          '-F',
          join(sshDir, 'config'),
          '-o',
          'ControlMaster=auto',
          '-o',
          `ControlPath=${sshDir}/%C`,
          '-o',
          'ControlPersist=60',
          '-o',
          'LogLevel=ERROR',
          '-T',
          'node1',
          'sudo -n -- ip route',
        ],
        expect.arrayContaining(['ssh', 'etcd', 'sudo -n -- true']),
      ]);
      expect(await readFile(join(sshDir, 'config'), 'utf8')).toContain('HostName 192.168.56.11');
    } finally {
      await rm(join(sshDir, '..'), { recursive: true, force: true });
    }
  });

  it('asks `vagrant ssh-config` again after it failed (the machines were not up yet)', async () => {
    let fail = true;
    const exec = async (_file: string, args: readonly string[]): Promise<{ stdout: string }> => {
      if (args.includes('ssh-config') && fail) {
        fail = false;
        throw new Error('The machine is not running');
      }
      return { stdout: '' };
    };
    const sshDir = await mkdtemp(join(tmpdir(), 'twill-vc-'));
    try {
      const cluster = new VagrantCluster({ dir: DIR, nodes: 1, exec, transport: 'ssh', sshDir });
      await expect(cluster.sh({ node: 'node1' }, ['true'])).rejects.toThrow(/not running/);
      await expect(cluster.sh({ node: 'node1' }, ['true'])).resolves.toBe('');
    } finally {
      await rm(sshDir, { recursive: true, force: true });
    }
  });

  it('restarts a node machine with vagrant halt, then vagrant up without provisioning', async () => {
    const { cluster, calls } = fakeLab();
    const t = await cluster.restartMachine('node2');
    expect(calls.map((c) => c.args)).toEqual([
      [`VAGRANT_CWD=${DIR}`, 'vagrant', 'halt', 'node2'],
      [`VAGRANT_CWD=${DIR}`, 'vagrant', 'up', 'node2', '--no-provision'],
    ]);
    expect(t.haltMs).toBeGreaterThanOrEqual(0);
    await expect(cluster.restartMachine('etcd')).rejects.toThrow(/no node VM "etcd"/);
  });

  it('names its provider in its description', () => {
    expect(new VagrantCluster({ dir: DIR, nodes: 2, provider: 'lxc' }).description).toBe(
      `vagrant lab on lxc (2 node machines, ${DIR}/Vagrantfile)`,
    );
  });
});

describe('VagrantCluster commands in flight', () => {
  it(`sends at most ${MAX_COMMANDS_PER_MACHINE} commands at once to one machine (sshd's MaxSessions is 10), and one machine's queue does not hold up another`, async () => {
    const inFlight = new Map<string, number>();
    const most = new Map<string, number>();
    const release: (() => void)[] = [];
    const exec = async (_file: string, args: readonly string[]): Promise<{ stdout: string }> => {
      const vm = args[3] ?? '';
      inFlight.set(vm, (inFlight.get(vm) ?? 0) + 1);
      most.set(vm, Math.max(most.get(vm) ?? 0, inFlight.get(vm) ?? 0));
      await new Promise<void>((r) => release.push(r));
      inFlight.set(vm, (inFlight.get(vm) ?? 0) - 1);
      return { stdout: `${vm}\n` };
    };
    const cluster = new VagrantCluster({ dir: DIR, nodes: 3, exec });
    const many = Array.from({ length: 20 }, () => cluster.sh({ node: 'node1' }, ['true']));
    const other = cluster.sh({ node: 'node2' }, ['true']);
    await new Promise((r) => setTimeout(r, 10));
    expect(inFlight.get('node1')).toBe(MAX_COMMANDS_PER_MACHINE);
    expect(inFlight.get('node2')).toBe(1);
    // let every command finish, each releasing the next in line
    for (let i = 0; i < 100 && release.length > 0; i++) {
      release.splice(0).forEach((r) => r());
      await new Promise((r) => setTimeout(r, 1));
    }
    expect(await Promise.all(many)).toEqual(Array.from({ length: 20 }, () => 'node1\n'));
    expect(await other).toBe('node2\n');
    expect(most.get('node1')).toBe(MAX_COMMANDS_PER_MACHINE);
  });

  it('Limiter: a failed job frees its slot', async () => {
    const l = new Limiter(1);
    await expect(l.run(() => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(await l.run(async () => 'next')).toBe('next');
  });
});
