// `npm run lab -- <command>`: the netns lab (as root).
//   up [--nodes 3] [--pods 2] [--backend vxlan|host-gw] [--store etcd|kube] [--slow F]
// [--etcd-members N] [--dual-stack | --ipv6-only] [--nftables]
//                                                         bring it up, print the matrix
//                                                         (--slow: as on a machine F times slower;
//                                                         --etcd-members 3: an etcd cluster, twill
// given every member; --dual-stack: IPv4 + IPv6 underlay, pods and matrix; --ipv6-only, with
// --store kube: twill with EnableIPv4 false, pods and matrix IPv6 alone; --nftables: twill
// with EnableNFTables, its masquerade in its own nftables tables, the drills break those)
//   up --kubelet [--nodes 3] [--pods 2]                   a real cluster: kubelet, containerd and
//                                                         kube-proxy per node, deploy/ as shipped
//   status                                                print the matrix and where the logs are
//                                                         (kubelet mode: nodes, twill pods, test
// pods)
//   kubectl ARGS…                                         kubectl as the lab's admin (kube and
// kubelet modes)
//   kubeconfig                                            print the admin kubeconfig's path
//   down                                                  remove everything the lab made
//   drill <name>|all [--json] [--vagrant]                 break things, measure the healing
//   up --vagrant [--nodes 3] [--pods 2] [--backend B] [--spares 0]
//                                                         the Vagrant lab (vagrant-lab.ts):
//                                                         VirtualBox or libvirt, else lxc; then
//                                                         `status|down|drill … --vagrant`
// `--store kube` runs a kube-apiserver next to etcd and twill with
// --kube-subnet-mgr (Node objects instead of etcd leases; see netns-kube.ts).
// `--kubelet` (kubelet-cluster.ts) runs a control plane (apiserver,
// controller-manager, scheduler) and real nodes, and twill as deploy/'s
// DaemonSet. `up` first installs the Debian packages the lab needs
// (scripts/host-deps.sh) and builds what is missing.
// `--name` (default twlab) names the lab: its namespaces are <name>-*, its
// files /run/twill-lab/<name>; two labs with different names coexist.
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import { run } from '../src/exec/runner.ts';
import type { Cluster, LabNode, StoreMode } from './cluster.ts';
import type { Drill } from './drill-kit.ts';
import {
  DRILLS,
  drillsFor,
  notApplicableResult,
  renderDrills,
  runDrill,
  runDrills,
  type DrillResult,
} from './drills.ts';
import { connectivity, renderMatrix, untilFull } from './matrix.ts';
import { MAX_ETCD_MEMBERS, NetnsCluster } from './netns-cluster.ts';
import { upConflict, type UpOptions } from './up-options.ts';
import { VAGRANT_DRILLS } from './drills-vagrant.ts';
import type { VagrantCluster } from './vagrant-cluster.ts';
import {
  chooseProvider,
  openVagrantLab,
  readSettings,
  vagrantDown,
  vagrantUp,
  type VagrantLabSettings,
} from './vagrant-lab.ts';

function positive(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 200)
    throw new InvalidArgumentError(`${value} is not a whole number from 1 to 200`);
  return n;
}

function backendOf(value: string): 'vxlan' | 'host-gw' {
  if (value !== 'vxlan' && value !== 'host-gw')
    throw new InvalidArgumentError(`${value} is not vxlan or host-gw`);
  return value;
}

function storeOf(value: string): StoreMode {
  if (value !== 'etcd' && value !== 'kube')
    throw new InvalidArgumentError(`${value} is not etcd or kube`);
  return value;
}

const HOST_DEPS = resolve(import.meta.dirname, '../scripts/host-deps.sh');

/**
 * The Debian packages the lab needs (etcd, iproute2, containerd…), when
 * missing, and a fresh build of twill and twill-cni: the lab runs what the
 * tree holds now (the kubelet lab's image is made from dist/).
 */
async function ensureBuilt(): Promise<void> {
  await run(HOST_DEPS, [], { timeoutMs: 1_800_000 });
  process.stderr.write('lab: building twill and twill-cni (npm run build)…\n');
  await run('npm', ['run', 'build'], { timeoutMs: 600_000 });
}

async function openLab(name: string): Promise<NetnsCluster> {
  const c = await NetnsCluster.open(name);
  if (!c)
    throw new Error(
      `no lab named ${name} is up (run: npm run lab -- up${name === 'twlab' ? '' : ` --name ${name}`})`,
    );
  return c;
}

async function printStatus(c: Cluster): Promise<boolean> {
  const m = await connectivity(c);
  const nodes = await c.nodes();
  const kube =
    c instanceof NetnsCluster && c.mode === 'kubelet' ? `${await kubeletStatus(c)}\n` : '';
  const addresses = (n: LabNode): string => (n.ip6 === undefined ? n.ip : `${n.ip}, ${n.ip6}`);
  process.stdout.write(
    `${c.description}\n${kube}${renderMatrix(m)}\nlogs:\n${nodes.map((n) => `  ${n.name} (${addresses(n)}): ${c.logPath(n.name)}`).join('\n')}\n`,
  );
  return m.failures.length === 0;
}

/** Nodes, twill pods and test pods, as kubectl shows them. */
async function kubeletStatus(c: NetnsCluster): Promise<string> {
  const wide = (args: string[]): Promise<string> =>
    c.kubectl([...args, '-o', 'wide']).catch((err: Error) => `(${err.message})\n`);
  const [nodes, twill, pods] = await Promise.all([
    wide(['get', 'nodes']),
    wide(['get', 'pods', '-n', 'twill-system']),
    wide(['get', 'pods', '-n', 'default']),
  ]);
  return `nodes:\n${nodes}twill pods:\n${twill}test pods:\n${pods}kubeconfig: ${c.adminKubeconfig}`;
}

function slowFactor(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 1 || n > 50)
    throw new InvalidArgumentError(`${value} is not a factor from 1 to 50`);
  return n;
}

function etcdMembersOf(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > MAX_ETCD_MEMBERS)
    throw new InvalidArgumentError(`${value} is not a whole number from 1 to ${MAX_ETCD_MEMBERS}`);
  return n;
}

async function up(o: UpOptions & { name: string }): Promise<number> {
  const conflict = upConflict(o);
  if (conflict !== undefined) throw new Error(conflict);
  if (o.vagrant === true) return upVagrant(o);
  if (await NetnsCluster.open(o.name))
    throw new Error(
      `a lab named ${o.name} is already up (npm run lab -- down${o.name === 'twlab' ? '' : ` --name ${o.name}`})`,
    );
  await ensureBuilt();
  const c = await NetnsCluster.create({
    name: o.name,
    backend: o.backend,
    store: o.store,
    ...(o.slow === undefined ? {} : { slow: o.slow }),
    ...(o.kubelet === true ? { kubelet: true } : {}),
    ...(o.etcdMembers === undefined ? {} : { etcdMembers: o.etcdMembers }),
    ...(o.dualStack === true ? { dualStack: true } : {}),
    ...(o.ipv6Only === true ? { ipv6Only: true } : {}),
    ...(o.nftables === true ? { nftables: true } : {}),
  });
  if (o.slow !== undefined)
    process.stderr.write(
      `lab: slow mode: etcd, the apiserver and every twill (with what it spawns) get 1/${o.slow} of this machine's CPU\n`,
    );
  await c.addNodes(
    Array.from({ length: o.nodes }, (_, i) => `n${i + 1}`),
    o.pods,
  );
  await untilFull(c, o.kubelet === true ? 120_000 : 30_000);
  return (await printStatus(c)) ? 0 : 1;
}

/**
 * The Vagrant lab: the provider (said), its settings for later commands, the lxc box and bridge
 * when on lxc, `vagrant up`, then the matrix; how long each step took.
 */
async function upVagrant(o: UpOptions): Promise<number> {
  if (await readSettings())
    throw new Error('a Vagrant lab is already up here (npm run lab -- down --vagrant)');
  const log = (line: string): void => void process.stderr.write(`${line}\n`);
  // first: the host's packages include Vagrant and vagrant-lxc, which the choice asks about
  const t0 = performance.now();
  await ensureBuilt();
  const buildMs = performance.now() - t0;
  const { provider, why } = await chooseProvider();
  log(`lab: Vagrant provider ${provider} (${why})`);
  const settings: VagrantLabSettings = {
    provider,
    nodes: o.nodes,
    pods: o.pods,
    spares: o.spares ?? 0,
    backend: o.backend,
  };
  const { boxMs, upMs } = await vagrantUp({ settings }, log);
  const c = await openVagrantLab();
  const fullMs = await untilFull(c, 120_000);
  const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
  log(
    `lab: host deps and build ${s(buildMs)}, box ${s(boxMs)}, vagrant up ${s(upMs)}, full matrix ${fullMs === undefined ? 'NOT reached in 120 s' : `+${s(fullMs)}`}`,
  );
  return (await printStatus(c)) ? 0 : 1;
}

/** Spare node machines a drill needs on the Vagrant lab, where machines are not made on the fly. */
const SPARES_NEEDED: Readonly<Record<string, number>> = { 'twenty-nodes': 20 };

/**
 * "n/a" for a drill that needs more spare machines than the lab has (as etcd-leader-loss is on a
 * lab without three etcd members); undefined when it can run.
 */
async function withoutSpares(c: VagrantCluster, d: Drill): Promise<DrillResult | undefined> {
  const need = SPARES_NEEDED[d.name] ?? 0;
  const have = need === 0 ? 0 : (await c.spareNodes()).length;
  if (have >= need) return undefined;
  return notApplicableResult(d, [
    `n/a: needs ${need} spare node machines (npm run lab -- up --vagrant --spares ${need}); this lab has ${have}`,
  ]);
}

/**
 * The drills on the Vagrant lab: the netns lab's, then the machine restart; each one's wall time.
 */
async function drillVagrant(
  c: VagrantCluster,
  o: { which: string; json: boolean },
): Promise<number> {
  const pool = [...DRILLS, ...VAGRANT_DRILLS];
  const chosen =
    o.which === 'all'
      ? [...drillsFor(c.mode), ...VAGRANT_DRILLS]
      : pool.filter((d) => d.name === o.which);
  if (chosen.length === 0)
    throw new Error(`no drill named ${o.which} (have: ${pool.map((d) => d.name).join(', ')}, all)`);
  const results = [];
  for (const d of chosen) {
    process.stderr.write(`drill ${d.name}: ${d.broke}…\n`);
    const t0 = performance.now();
    const r = (await withoutSpares(c, d)) ?? (await runDrill(c, d));
    process.stderr.write(
      `drill ${d.name}: ${r.pass ? 'pass' : 'FAIL'}, the drill took ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
    );
    results.push(r);
  }
  process.stdout.write(
    o.json ? `${JSON.stringify(results, null, 2)}\n` : `${renderDrills(results)}\n`,
  );
  return results.every((r) => r.pass) ? 0 : 1;
}

async function drill(c: Cluster, o: { which: string; json: boolean }): Promise<number> {
  const names = o.which === 'all' ? drillsFor(c.mode).map((d) => d.name) : [o.which];
  const unknown = names.filter((n) => !DRILLS.some((d) => d.name === n));
  if (unknown.length > 0)
    throw new Error(
      `no drill named ${unknown.join(', ')} (have: ${DRILLS.map((d) => d.name).join(', ')}, all)`,
    );
  const results = await runDrills(c, names, (line) => process.stderr.write(`${line}\n`));
  process.stdout.write(
    o.json ? `${JSON.stringify(results, null, 2)}\n` : `${renderDrills(results)}\n`,
  );
  return results.every((r) => r.pass) ? 0 : 1;
}

/**
 * `[--name N] kubectl ARGS…`: ARGS go to kubectl untouched (flags, `--` and all), so commander
 * never sees them.
 */
function kubectlPassThrough(argv: readonly string[]): { name: string; args: string[] } | undefined {
  const named = argv[0] === '--name' ? 2 : argv[0]?.startsWith('--name=') === true ? 1 : 0;
  if (argv[named] !== 'kubectl') return undefined;
  const name =
    named === 2
      ? (argv[1] ?? 'twlab')
      : named === 1
        ? (argv[0] ?? '').slice('--name='.length)
        : 'twlab';
  return { name, args: argv.slice(named + 1) };
}

/** kubectl as the lab's admin, with this terminal (so `kubectl exec -it` works); its exit code. */
async function kubectl(name: string, args: readonly string[]): Promise<number> {
  const [file = '', ...rest] = (await openLab(name)).kubectlArgv(args);
  return new Promise<number>((done, fail) => {
    const child = spawn(file, rest, { stdio: 'inherit' });
    child.on('error', fail);
    child.on('exit', (exitCode, signal) => done(exitCode ?? (signal === null ? 1 : 128)));
  });
}

async function main(argv: string[]): Promise<number> {
  const pass = kubectlPassThrough(argv);
  if (pass) {
    return kubectl(pass.name, pass.args).catch((err: unknown) => {
      process.stderr.write(`lab: ${err instanceof Error ? err.message : String(err)}\n`);
      return 1;
    });
  }
  let code = 0;
  const program = new Command('lab')
    .description('the twill lab: nodes, pods and etcd in network namespaces, and failure drills')
    .exitOverride();
  program.option('--name <name>', 'the lab name (namespace and directory prefix)', 'twlab');
  const name = (): string => String(program.opts<{ name: string }>().name);
  program
    .command('up')
    .option('--nodes <n>', 'nodes', positive, 3)
    .option('--pods <n>', 'pods per node', positive, 2)
    .option('--backend <type>', 'vxlan or host-gw', backendOf, 'vxlan' as const)
    .option(
      '--store <mode>',
      'etcd, or kube (a kube-apiserver, Node objects, twill run --kube-subnet-mgr)',
      storeOf,
      'etcd' as const,
    )
    .option(
      '--slow <factor>',
      'run the lab as on a machine <factor> times slower: its processes share 1/<factor> of the CPUs (a cgroup CPU quota)',
      slowFactor,
    )
    .option(
      '--etcd-members <n>',
      `etcd as a cluster of <n> members (1 to ${MAX_ETCD_MEMBERS}) in the etcd namespace, on ports 2379, 22379, 32379…; twill gets every endpoint (etcd store only)`,
      etcdMembersOf,
    )
    .option(
      '--dual-stack',
      'IPv4 and IPv6: an IPv6 underlay beside the IPv4 one, EnableIPv6 in the network config, pods with both, the matrix in both families',
    )
    .option(
      '--ipv6-only',
      'IPv6 alone (with --store kube): EnableIPv4 false in net-conf.json, one IPv6 podCIDR per Node, pods with IPv6 only, the matrix and drills in IPv6 (the underlay keeps IPv4 for the apiserver)',
    )
    .option(
      '--nftables',
      'twill in nftables mode: EnableNFTables in the network config, its masquerade in its own tables (ip twill-ipv4, ip6 twill-ipv6) and no iptables chain; the drills break and check those (not with --kubelet or --vagrant)',
    )
    .option(
      '--kubelet',
      "a real cluster: controller-manager, scheduler, and per node containerd, kubelet and kube-proxy; twill as deploy/'s DaemonSet",
    )
    .option(
      '--vagrant',
      'the Vagrant lab (see docs/lab.md): VirtualBox or libvirt machines, else lxc containers',
    )
    .option(
      '--spares <n>',
      'Vagrant lab: node machines made but left out of the lab, for the drills that add nodes (twenty-nodes needs 20)',
      (v: string) => (v === '0' ? 0 : positive(v)),
    )
    .action(async (o: UpOptions) => void (code = await up({ name: name(), ...o })));
  program
    .command('kubectl')
    .description("kubectl as the lab's admin: npm run lab -- kubectl ARGS…")
    .action(() => void (code = 1));
  program
    .command('kubeconfig')
    .action(async () => void process.stdout.write(`${(await openLab(name())).adminKubeconfig}\n`));
  program
    .command('status')
    .option('--vagrant', 'the Vagrant lab')
    .action(
      async (o: { vagrant?: boolean }) =>
        void (code = (await printStatus(o.vagrant ? await openVagrantLab() : await openLab(name())))
          ? 0
          : 1),
    );
  program
    .command('down')
    .option('--vagrant', 'the Vagrant lab: vagrant destroy -f, and what it leaves on the host')
    .action(async (o: { vagrant?: boolean }) => {
      if (o.vagrant) {
        const { destroyMs, removed } = await vagrantDown();
        process.stdout.write(
          `vagrant lab: machines destroyed in ${(destroyMs / 1000).toFixed(1)} s${removed.length > 0 ? `; removed ${removed.join(', ')}` : ''}\n`,
        );
        return;
      }
      const removed = await NetnsCluster.destroy(name());
      process.stdout.write(
        `lab ${name()}: removed ${removed.length} namespaces, its processes and /run/twill-lab/${name()}\n`,
      );
    });
  program
    .command('drill <which>')
    .option('--json', 'print JSON instead of the table')
    .option('--vagrant', 'run the drills on the Vagrant lab (see docs/lab.md)')
    .action(async (which: string, o: { json?: boolean; vagrant?: boolean }) => {
      const json = o.json === true;
      code = o.vagrant
        ? await drillVagrant(await openVagrantLab(), { which, json })
        : await drill(await openLab(name()), { which, json });
    });
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (err instanceof Error && 'exitCode' in err)
      return Number((err as { exitCode: number }).exitCode);
    process.stderr.write(`lab: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
  return code;
}

process.exitCode = await main(process.argv.slice(2));
