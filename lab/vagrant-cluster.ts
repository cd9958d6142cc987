// The Vagrant implementation of the lab's Cluster (cluster.ts): the machines
// of the repository's Vagrantfile (etcd, outside, node1…nodeN). Every command
// goes out as `env VAGRANT_CWD=<dir> vagrant ssh <vm> -c '<command>' -- -T`
// through an injected executor (production: the project's runner), as root
// through `sudo -n`, each argument shell-quoted for the remote shell. With
// the `ssh` transport (what `npm run lab` uses) the same command goes out
// over plain ssh with the config `vagrant ssh-config` prints, through one
// shared connection per machine: a `vagrant ssh` costs a Ruby start-up (a
// second or more of CPU), which the drills' polling and the matrix's dozens
// of pings a round cannot afford on a small machine. The node side of pods
// and membership is lab/vagrant/twill-lab on every node: a node is in the
// lab while its twill.service is enabled. Machines cannot be made on the fly,
// so addNodes only takes machines the Vagrantfile defines that are not in the
// lab (e.g. after removeNode, or spares). Its twill uses etcd: kube mode (the
// Kubernetes API as the lease store) is netns-only for now.
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { TwillError } from '../src/errors.ts';
import { run, watchLines, type LineWatcher, type RunOptions } from '../src/exec/runner.ts';
import type { Cluster, LabNode, LabPod, ShOptions, Target } from './cluster.ts';
import { sudoChain } from './shell-quote.ts';
import { cpuMsOfStat } from './throttle.ts';

/** Runs one local program; production passes `run` (src/exec/runner.ts), tests a recorder. */
export type VagrantExec = (
  file: string,
  args: readonly string[],
  opts?: RunOptions,
) => Promise<{ readonly stdout: string }>;

/** The addresses and paths the Vagrantfile and lab/vagrant/*.sh set up. */
export const VAGRANT_LAB = {
  underlay: '192.168.56',
  etcdIp: '192.168.56.10',
  outsideIp: '203.0.113.1',
  etcdDataDir: '/var/lib/etcd/twill-lab',
  twillLog: '/var/log/twill/twill.log',
  podNetnsPrefix: 'twpod-',
  maxNodes: 200,
} as const;

export interface VagrantClusterOptions {
  /** the directory holding the Vagrantfile (passed as VAGRANT_CWD); default the repository root */
  readonly dir?: string;
  /** node machines the Vagrantfile defines (TWILL_LAB_NODES + TWILL_LAB_SPARES); default 3 */
  readonly nodes?: number;
  /**
   * `vagrant-ssh` (default): one `vagrant ssh` per command; `ssh`: plain ssh with `vagrant
   * ssh-config`'s settings, connections shared, its files in `sshDir`
   */
  readonly transport?: 'vagrant-ssh' | 'ssh';
  /** the `ssh` transport's config and sockets; default <dir>/.vagrant/twill-lab-ssh */
  readonly sshDir?: string;
  /** the provider the machines run on, for the description (virtualbox, libvirt, lxc) */
  readonly provider?: string;
  readonly exec?: VagrantExec;
  /**
   * streams a long-lived local program's lines; production passes `watchLines`, tests a recorder
   */
  readonly watcher?: LineWatcher;
}

/**
 * What `vagrant ssh` itself costs per call (Ruby start-up, ssh handshake), added to every timeout.
 */
export const VAGRANT_OVERHEAD_MS = 15_000;
/** What a plain ssh command costs at most on top (a new shared connection's handshake). */
export const SSH_OVERHEAD_MS = 10_000;
const SH_TIMEOUT_MS = 20_000;

/** A connection of its own. */
const SSH_OWN = ['-o', 'ControlMaster=no', '-o', 'ControlPath=none', '-o', 'LogLevel=ERROR'];

/**
 * One ssh connection per machine shared by every command (the first one opens it; it lingers a
 * minute after the last), its socket in `dir`.
 */
const SSH_SHARED = (dir: string): string[] => [
  '-o',
  'ControlMaster=auto',
  '-o',
  `ControlPath=${dir}/%C`,
  '-o',
  'ControlPersist=60',
  '-o',
  'LogLevel=ERROR',
];
const JOIN_TIMEOUT_MS = 180_000;

/**
 * Commands in flight to one machine at most. sshd lets one connection carry 10 sessions
 * (MaxSessions): past that, ssh falls back to a connection of its own, and past 10 unauthenticated
 * connections at once (MaxStartups 10:30:100) sshd drops new ones at random. On a slow day the
 * handshakes overlap and a 24-ping matrix round lost a few pings to that every time: the matrix
 * never came out full though every pod reached every pod. Two sessions stay spare.
 */
export const MAX_COMMANDS_PER_MACHINE = 8;

/** At most `limit` of the calls given to it run at once; the rest wait their turn, in order. */
export class Limiter {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  private readonly limit: number;

  constructor(limit: number) {
    this.limit = limit;
  }

  async run<T>(job: () => Promise<T>): Promise<T> {
    if (this.running >= this.limit)
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.running++;
    try {
      return await job();
    } finally {
      const next = this.waiting.shift();
      // the slot passes straight to the next in line, so `running` never counts it twice
      if (next) next();
      else this.running--;
    }
  }
}
const REPO_ROOT = resolve(import.meta.dirname, '..');

/**
 * TWILL_LAB_NODES as the Vagrantfile reads it (default 3); for the entry point to pass as `nodes`.
 */
export function labNodeCount(env: Readonly<Record<string, string | undefined>>): number {
  const text = env.TWILL_LAB_NODES ?? '3';
  const n = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > VAGRANT_LAB.maxNodes) {
    throw new TwillError(
      'CONFIG_INVALID',
      `TWILL_LAB_NODES=${JSON.stringify(text)}: must be a whole number 1..${VAGRANT_LAB.maxNodes}`,
    );
  }
  return n;
}

/** Parses `twill-lab pods` output ("<name> <ip>" lines) of one node. */
export function parsePodList(node: string, text: string): LabPod[] {
  const pods: LabPod[] = [];
  for (const line of text.split('\n')) {
    const [name, ip, extra] = line.trim().split(/\s+/);
    if (!name) continue;
    if (!ip || ip === '-' || extra !== undefined || !/^\d+\.\d+\.\d+\.\d+$/.test(ip)) {
      throw new TwillError(
        'CONFIG_INVALID',
        `vagrant lab: pod ${name} on ${node} has no IPv4 address on eth0 (twill-lab pods said ${JSON.stringify(line)})`,
      );
    }
    pods.push({ name, node, ip });
  }
  return pods;
}

function kubeNetnsOnly(what: string): TwillError {
  return new TwillError(
    'CONFIG_UNSUPPORTED',
    `vagrant lab: ${what}: kube mode is netns-only for now (npm run lab -- up --store kube); the Vagrant lab's twill uses etcd`,
  );
}

export class VagrantCluster implements Cluster {
  readonly description: string;
  readonly outsideIp = VAGRANT_LAB.outsideIp;
  readonly etcdEndpoint = `http://${VAGRANT_LAB.etcdIp}:2379`;
  readonly etcdPrefix = '/coreos.com/network';
  readonly store = 'etcd' as const;
  readonly mode = 'etcd' as const;
  private readonly dir: string;
  private readonly exec: VagrantExec;
  private readonly watcher: LineWatcher;
  private readonly machines: readonly LabNode[];
  private readonly podNode = new Map<string, string>();
  private readonly transport: 'vagrant-ssh' | 'ssh';
  private readonly sshDir: string;
  private sshConfig: Promise<string> | undefined;
  /** one Limiter per machine: see MAX_COMMANDS_PER_MACHINE */
  private readonly perMachine = new Map<string, Limiter>();

  constructor(opts: VagrantClusterOptions = {}) {
    const count = opts.nodes ?? 3;
    if (!Number.isInteger(count) || count < 1 || count > VAGRANT_LAB.maxNodes) {
      throw new TwillError(
        'CONFIG_INVALID',
        `vagrant lab: nodes=${count}: must be a whole number 1..${VAGRANT_LAB.maxNodes}`,
      );
    }
    this.dir = opts.dir ?? REPO_ROOT;
    this.transport = opts.transport ?? 'vagrant-ssh';
    this.sshDir = opts.sshDir ?? join(this.dir, '.vagrant', 'twill-lab-ssh');
    this.exec = opts.exec ?? run;
    this.watcher = opts.watcher ?? watchLines;
    this.machines = Array.from({ length: count }, (_, i) => ({
      name: `node${i + 1}`,
      ip: `${VAGRANT_LAB.underlay}.${11 + i}`,
    }));
    const on = opts.provider === undefined ? '' : ` on ${opts.provider}`;
    this.description = `vagrant lab${on} (${count} node machines, ${this.dir}/Vagrantfile)`;
  }

  /** Nodes in the lab: machines of the Vagrantfile whose twill.service is enabled. */
  async nodes(): Promise<LabNode[]> {
    const answers = await Promise.all(
      this.machines.map((m) => this.onVm(m.name, [['twill-lab', 'member']])),
    );
    return this.machines.filter((_, i) => answers[i]?.trim() === 'yes');
  }

  /** Machines of the Vagrantfile not in the lab: the only names addNodes accepts. */
  async spareNodes(): Promise<string[]> {
    const members = new Set((await this.nodes()).map((n) => n.name));
    return this.machines.filter((m) => !members.has(m.name)).map((m) => m.name);
  }

  async pods(): Promise<LabPod[]> {
    const nodes = await this.nodes();
    const lists = await Promise.all(nodes.map((n) => this.onVm(n.name, [['twill-lab', 'pods']])));
    const pods = nodes.flatMap((n, i) => parsePodList(n.name, lists[i] ?? ''));
    this.podNode.clear();
    for (const p of pods) this.podNode.set(p.name, p.node);
    return pods;
  }

  async sh(target: Target, argv: readonly string[], opts: ShOptions = {}): Promise<string> {
    if (target === 'etcd' || target === 'outside') return this.onVm(target, [argv], opts);
    if ('node' in target) return this.onVm(this.machine(target.node).name, [argv], opts);
    const node = await this.podHome(target.pod);
    return this.onVm(
      node,
      [['ip', 'netns', 'exec', `${VAGRANT_LAB.podNetnsPrefix}${target.pod}`, ...argv]],
      opts,
    );
  }

  /** The VM a target lives on. */
  private async vmOf(target: Target): Promise<string> {
    if (target === 'etcd' || target === 'outside') return target;
    if ('node' in target) return this.machine(target.node).name;
    return this.podHome(target.pod);
  }

  async watch(
    target: Target,
    argv: readonly string[],
    opts: { signal: AbortSignal; onLine: (line: string) => void },
  ): Promise<void> {
    const inPod =
      typeof target === 'object' && 'pod' in target
        ? ['ip', 'netns', 'exec', `${VAGRANT_LAB.podNetnsPrefix}${target.pod}`]
        : [];
    const [file, ...args] = await this.commandLine(await this.vmOf(target), [[...inPod, ...argv]], {
      shared: false,
    });
    await this.watcher(file ?? 'env', args, opts);
  }

  /**
   * Restarts a node machine as a power cycle does (`vagrant halt`, then `vagrant up` without
   * provisioning): what ran on it and its pods' namespaces are gone; twill.service starts again
   * and twill-lab-pods.service wires the recorded pods again. The ms each step took.
   */
  async restartMachine(node: string): Promise<{ haltMs: number; upMs: number }> {
    const vm = this.machine(node).name;
    const t0 = performance.now();
    await this.vagrant(['halt', vm], 300_000);
    const t1 = performance.now();
    await this.vagrant(['up', vm, '--no-provision'], 600_000);
    return { haltMs: t1 - t0, upMs: performance.now() - t1 };
  }

  /** Runs `vagrant ARGS…` next to the Vagrantfile; its stdout. */
  async vagrant(args: readonly string[], timeoutMs: number): Promise<string> {
    const { stdout } = await this.exec('env', [`VAGRANT_CWD=${this.dir}`, 'vagrant', ...args], {
      timeoutMs,
    });
    return stdout;
  }

  async startTwill(node: string): Promise<void> {
    await this.onVm(this.machine(node).name, [['systemctl', 'start', 'twill']]);
  }

  async stopTwill(node: string, how: 'term' | 'kill'): Promise<void> {
    const cmd = how === 'term' ? ['systemctl', 'stop', 'twill'] : ['twill-lab', 'kill'];
    await this.onVm(this.machine(node).name, [cmd], { timeoutMs: 45_000 });
  }

  async twillCpuMs(node: string): Promise<number | undefined> {
    const vm = this.machine(node).name;
    const pid = (
      await this.onVm(vm, [
        ['systemctl', 'show', '--property', 'MainPID', '--value', 'twill'],
      ]).catch(() => '')
    ).trim();
    if (!/^[1-9]\d*$/.test(pid)) return undefined;
    const stat = await this.onVm(vm, [['cat', '--', `/proc/${pid}/stat`]]).catch(() => '');
    return stat.trim() === '' ? undefined : cpuMsOfStat(stat);
  }

  logPath(node: string): string {
    return `${this.machine(node).name}:${VAGRANT_LAB.twillLog} (vagrant ssh ${node})`;
  }

  async twillLog(node: string): Promise<string> {
    return this.onVm(this.machine(node).name, [['cat', '--', VAGRANT_LAB.twillLog]]);
  }

  kubectl(): Promise<string> {
    return Promise.reject(kubeNetnsOnly('kubectl'));
  }

  stopApiServer(): Promise<void> {
    return Promise.reject(kubeNetnsOnly('stopping the kube-apiserver'));
  }

  startApiServer(): Promise<void> {
    return Promise.reject(kubeNetnsOnly('starting the kube-apiserver'));
  }

  async stopEtcd(): Promise<void> {
    await this.onVm('etcd', [['systemctl', 'stop', 'etcd']], { timeoutMs: 60_000 });
  }

  async startEtcd(opts: { wipe: boolean }): Promise<void> {
    const start = ['systemctl', 'start', 'etcd'];
    await this.onVm(
      'etcd',
      opts.wipe ? [['rm', '-rf', '--', VAGRANT_LAB.etcdDataDir], start] : [start],
      { timeoutMs: 60_000 },
    );
  }

  async addNodes(names: readonly string[], pods: number): Promise<void> {
    if (!Number.isInteger(pods) || pods < 0)
      throw new TwillError(
        'CONFIG_INVALID',
        `vagrant lab: pods=${pods}: must be a whole number ≥ 0`,
      );
    const members = new Set((await this.nodes()).map((n) => n.name));
    const seen = new Set<string>();
    for (const name of names) {
      this.machine(name);
      if (members.has(name) || seen.has(name))
        throw new TwillError(
          'CONFIG_INVALID',
          `vagrant lab: ${name} is already in the lab (or named twice)`,
        );
      seen.add(name);
    }
    const podNames = (node: string): string[] =>
      Array.from({ length: pods }, (_, i) => `${node}-pod${i + 1}`);
    await Promise.all(
      names.map((name) =>
        this.onVm(name, [['twill-lab', 'join', ...podNames(name)]], { timeoutMs: JOIN_TIMEOUT_MS }),
      ),
    );
  }

  async removeNode(node: string): Promise<void> {
    await this.onVm(this.machine(node).name, [['twill-lab', 'leave']], { timeoutMs: 60_000 });
    for (const [pod, home] of this.podNode) if (home === node) this.podNode.delete(pod);
  }

  /** A node machine of the Vagrantfile, or a clear error: VMs are not made on the fly. */
  private machine(name: string): LabNode {
    const m = this.machines.find((x) => x.name === name);
    if (m) return m;
    const last = this.machines.length;
    throw new TwillError(
      'CONFIG_INVALID',
      `vagrant lab: no node VM ${JSON.stringify(name)}: the Vagrantfile defines node1..node${last} (TWILL_LAB_NODES=${last}); ` +
        'VMs cannot be made on the fly: raise TWILL_LAB_NODES and `vagrant up`, or add a node that removeNode took out',
    );
  }

  private async podHome(pod: string): Promise<string> {
    if (!this.podNode.has(pod)) await this.pods();
    const node = this.podNode.get(pod);
    if (node === undefined)
      throw new TwillError(
        'CONFIG_INVALID',
        `vagrant lab: no pod ${JSON.stringify(pod)} on any node in the lab`,
      );
    return node;
  }

  /**
   * The local command line that runs commands as root on a machine, one after the other. A
   * long-lived one (`shared: false`, what `watch` runs) gets its own ssh connection: through a
   * shared one, stopping the local ssh would leave the remote program, and the output pipe the
   * shared connection holds for it, open until that program next writes.
   */
  private async commandLine(
    vm: string,
    commands: readonly (readonly string[])[],
    o: { shared: boolean } = { shared: true },
  ): Promise<string[]> {
    const remote = sudoChain(commands);
    if (this.transport === 'vagrant-ssh')
      return ['env', `VAGRANT_CWD=${this.dir}`, 'vagrant', 'ssh', vm, '-c', remote, '--', '-T'];
    const connection = o.shared ? SSH_SHARED(this.sshDir) : SSH_OWN;
    return ['ssh', '-F', await this.sshConfigFile(), ...connection, '-T', vm, remote];
  }

  /**
   * `vagrant ssh-config` of every machine, written once per cluster object (the addresses and keys
   * are fixed once the machines exist).
   */
  private sshConfigFile(): Promise<string> {
    this.sshConfig ??= (async () => {
      const text = await this.vagrant(['ssh-config'], 120_000);
      await mkdir(this.sshDir, { recursive: true, mode: 0o700 });
      const file = join(this.sshDir, 'config');
      await writeFile(file, text, { mode: 0o600 });
      return file;
    })();
    // a failure (machines not up yet) is not kept: the next command asks again
    this.sshConfig.catch(() => (this.sshConfig = undefined));
    return this.sshConfig;
  }

  /** Runs commands as root on a VM, one after the other (`&&`), and resolves with their stdout. */
  private async onVm(
    vm: string,
    commands: readonly (readonly string[])[],
    opts: ShOptions = {},
  ): Promise<string> {
    const [file = 'env', ...args] = await this.commandLine(vm, commands);
    const overhead = this.transport === 'ssh' ? SSH_OVERHEAD_MS : VAGRANT_OVERHEAD_MS;
    const timeoutMs = (opts.timeoutMs ?? SH_TIMEOUT_MS) + overhead;
    let limiter = this.perMachine.get(vm);
    if (!limiter) this.perMachine.set(vm, (limiter = new Limiter(MAX_COMMANDS_PER_MACHINE)));
    // the timeout starts when the command does, not while it waits for a slot
    const { stdout } = await limiter.run(() =>
      this.exec(file, args, { timeoutMs, input: opts.input ?? '' }),
    );
    return stdout;
  }
}
