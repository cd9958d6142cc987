// The netns lab: the Cluster interface over network namespaces on this
// machine, on the underlay of kit/underlay.ts: a router namespace holds the
// underlay bridge (10.123.0.254/24, every node's default gateway) and a link
// to the "outside" namespace (203.0.113.2, which knows no pod routes: only
// masquerade lets pods reach it); etcd runs in its own namespace at
// 10.123.0.1 (in kube mode with a kube-apiserver next to it, see
// netns-kube.ts), one member on port 2379 or (`up --etcd-members 3`) a
// cluster of members on ports 2379, 22379, 32379…; node k is 10.123.0.(10+k)
// and runs `twill run --ip-masq` as a real process; pods are namespaces wired
// by the twill-cni executable, called as a runtime calls it. `up --dual-stack`
// adds IPv6 everywhere: the underlay (kit/underlay.ts), EnableIPv6 in the
// network config, both podCIDRs in kube mode, pods with both families. `up
// --store kube --ipv6-only` makes twill's and the pods' network IPv6 alone:
// net-conf.json with EnableIPv4 false, one IPv6 podCIDR per Node, no --iface
// (twill picks eth0 by its IPv6 default route, as a deployed twill with IPv4
// off does), pods with an IPv6 address only, the matrix by IPv6. The underlay
// keeps its IPv4 half there, for the lab's own plumbing alone: etcd and the
// kube-apiserver serve on 10.123.0.1 (the apiserver's self-signed certificate
// names its one advertise address, and its Service range is IPv4), and
// twill's kubeconfig and kubectl reach it there; twill, with IPv4 off,
// ignores the node's IPv4 address. `up --nftables` (either store, not the
// kubelet lab) puts `"EnableNFTables": true` in the network config: twill
// keeps its masquerade in its own nftables tables, and the drills break and
// check those (drills-kernel.ts, drill-kit.ts). Every name starts with the
// lab's name, so `down` finds everything, even after a crash.
import { mkdir, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { run, watchLines } from '../src/exec/runner.ts';
import type { Cluster, LabMode, LabNode, LabPod, ShOptions, StoreMode, Target } from './cluster.ts';
import { KubeletNodes } from './kubelet-cluster.ts';
import { kubectlArgv } from './kube-apiserver.ts';
import {
  adminKubectl,
  applyRbac,
  kubeLab,
  labNetConfig,
  labPodCidrs,
  nodeObject,
  prepareKubeLab,
  spawnLabApiServer,
  twillKubeFlags,
  untilLabApiServerReady,
  type KubeLab,
  type LabFamilies,
  type LabNetOptions,
} from './netns-kube.ts';
import { callCni } from './kit/call-cni.ts';
import { agreedLeader, etcdArgv, etcdHealthy } from './kit/etcd.ts';
import { deleteNetns, killNamespaceProcesses, listNetns, NetnsLab } from './kit/netns.ts';
import { alive, spawnDetached, stopPid } from './kit/process.ts';
import { etcdStoreFlags, TWILL_CNI, twillCommand, twillRunArgv } from './kit/twill-command.ts';
import {
  attachHost,
  buildRouter,
  detachHost,
  ETCD_IP,
  ETCD_IP6,
  nodeIp,
  nodeIp6,
  OUTSIDE_IP,
  OUTSIDE_IP6,
} from './kit/underlay.ts';
import { until } from './kit/wait.ts';
import { labDir, readState, writeState, type LabState, type NodeState } from './state.ts';
import { createThrottle, joinThrottle, processCpuMs, removeThrottle } from './throttle.ts';

/**
 * `up --etcd-members` at most: member k (1-based) serves clients on port k×10000+2379 (2379,
 * 22379…), peers on +1, inside the etcd namespace
 */
export const MAX_ETCD_MEMBERS = 5;
const etcdClientPort = (k: number): number => (k === 1 ? 2379 : k * 10_000 + 2379);
/** every lab node serves /healthz, /readyz and /metrics here (each in its own namespace) */
export const HEALTHZ_PORT = 9810;

export class NetnsCluster implements Cluster {
  readonly description: string;
  readonly outsideIp = OUTSIDE_IP;
  readonly outsideIp6: string | undefined;
  /** every etcd member's client URL, member 1 first */
  readonly etcdEndpoints: readonly string[];
  /**
   * what etcdctl and twill's --etcd-endpoints get: the members' URLs, comma-separated (one URL on a
   * one-member lab)
   */
  readonly etcdEndpoint: string;
  readonly etcdPrefix = '/coreos.com/network';
  private readonly state: LabState;
  private readonly dir: string;
  /** makes the lab's namespaces, each named <lab name>-<short> */
  private readonly namespaces: NetnsLab;
  private readonly kube: KubeLab;
  /**
   * kubelet mode: the nodes' kubelets, containerds and kube-proxies, the control plane around the
   * apiserver
   */
  private readonly kubelet: KubeletNodes | undefined;

  private constructor(state: LabState) {
    this.state = state;
    this.dir = labDir(state.name);
    this.namespaces = new NetnsLab(`${state.name}-`);
    this.kube = kubeLab(this.dir, ETCD_IP);
    this.etcdEndpoints = Array.from(
      { length: state.etcdMembers ?? 1 },
      (_, i) => `http://${ETCD_IP}:${etcdClientPort(i + 1)}`,
    );
    this.etcdEndpoint = this.etcdEndpoints.join(',');
    this.outsideIp6 = this.hasIpv6 ? OUTSIDE_IP6 : undefined;
    const how = state.kubelet
      ? ', kubelet + DaemonSet'
      : state.store === 'kube'
        ? ', Kubernetes API'
        : '';
    const family =
      state.dualStack === true ? ', dual-stack' : state.ipv6Only === true ? ', IPv6-only' : '';
    const masq = state.nftables === true ? ', nftables' : '';
    this.description = `netns lab ${state.name} (${state.backend}${how}${family}${masq})`;
    this.kubelet = state.kubelet
      ? new KubeletNodes({
          state,
          dir: this.dir,
          kube: this.kube,
          save: () => writeState(this.state),
          kubectl: (args, opts) => this.kubectl(args, opts),
          nsOf: (short) => this.nsOf(short),
        })
      : undefined;
  }

  get store(): StoreMode {
    return this.state.store;
  }

  get mode(): LabMode {
    return this.state.kubelet ? 'kubelet' : this.state.store;
  }

  get backend(): 'vxlan' | 'host-gw' {
    return this.state.backend;
  }

  /** `up --ipv6-only`: twill with IPv4 off, pods with IPv6 alone */
  get ipv6Only(): boolean {
    return this.state.ipv6Only === true;
  }

  /** `up --nftables`: twill keeps its masquerade in its nftables tables (EnableNFTables) */
  get nftables(): boolean {
    return this.state.nftables === true;
  }

  /** which families the pods get (net-conf.json, the podCIDRs) */
  private get families(): LabFamilies {
    return { dualStack: this.state.dualStack === true, ipv6Only: this.ipv6Only };
  }

  /** what net-conf.json (etcd mode: the network config) says: the families, the masquerade mode */
  private get netOptions(): LabNetOptions {
    return { ...this.families, nftables: this.nftables };
  }

  /** the underlay, the pods and the matrix have IPv6: a dual-stack or IPv6-only lab */
  private get hasIpv6(): boolean {
    return this.state.dualStack === true || this.state.ipv6Only === true;
  }

  /** The lab `up` made, or undefined. */
  static async open(name: string): Promise<NetnsCluster | undefined> {
    const state = await readState(name);
    return state ? new NetnsCluster(state) : undefined;
  }

  /**
   * Router, underlay, outside and etcd; no nodes yet. etcd mode: the network
   * config in etcd. kube mode: the kube-apiserver, RBAC, kubeconfigs and
   * net-conf.json (netns-kube.ts).
   */
  static async create(o: {
    name: string;
    backend: 'vxlan' | 'host-gw';
    store?: StoreMode;
    slow?: number;
    kubelet?: boolean;
    etcdMembers?: number;
    dualStack?: boolean;
    ipv6Only?: boolean;
    nftables?: boolean;
  }): Promise<NetnsCluster> {
    const store = o.kubelet === true ? 'kube' : (o.store ?? 'etcd');
    if (o.nftables === true && o.kubelet === true)
      throw new Error(
        "--nftables: twill run by hand (either store), not --kubelet: deploy/'s net-conf.json is iptables mode",
      );
    if (o.ipv6Only === true && (store !== 'kube' || o.kubelet === true || o.dualStack === true))
      throw new Error(
        "--ipv6-only: twill's Kubernetes store by hand (--store kube), without --kubelet or --dual-stack",
      );
    const kubelet = o.kubelet === true ? { kubelet: KubeletNodes.initialState() } : {};
    const members = o.etcdMembers ?? 1;
    if (!Number.isInteger(members) || members < 1 || members > MAX_ETCD_MEMBERS)
      throw new Error(`--etcd-members ${members}: from 1 to ${MAX_ETCD_MEMBERS}`);
    if (members > 1 && store !== 'etcd')
      throw new Error(
        "--etcd-members: an etcd cluster is for twill's etcd store (--store etcd, no --kubelet)",
      );
    const etcd =
      members > 1
        ? { etcdMembers: members, etcdMemberPids: Array.from({ length: members - 1 }, () => null) }
        : {};
    const c = new NetnsCluster({
      name: o.name,
      backend: o.backend,
      store,
      etcdPid: undefined,
      apiServerPid: undefined,
      nodes: [],
      nextIndex: 1,
      ...(o.slow === undefined ? {} : { slow: o.slow }),
      ...(o.dualStack === true ? { dualStack: true } : {}),
      ...(o.ipv6Only === true ? { ipv6Only: true } : {}),
      ...(o.nftables === true ? { nftables: true } : {}),
      ...kubelet,
      ...etcd,
    });
    await mkdir(c.dir, { recursive: true });
    await writeState(c.state);
    if (o.slow !== undefined) await createThrottle(o.name, o.slow);
    await buildRouter(await c.addNs('rt'), await c.addNs('out'), { ipv6: c.hasIpv6 });
    // IPv6-only too: the control plane keeps serving on its IPv4 address (the header says why)
    await c.attach('etcd', ETCD_IP, c.hasIpv6 ? ETCD_IP6 : undefined);
    await c.startEtcd({ wipe: true });
    if (store === 'etcd') {
      await c.sh('etcd', [
        'etcdctl',
        '--endpoints',
        c.etcdEndpoint,
        'put',
        `${c.etcdPrefix}/config`,
        JSON.stringify(labNetConfig(o.backend, c.netOptions)),
      ]);
      return c;
    }
    await prepareKubeLab(c.kube, o.backend, c.netOptions);
    if (c.kubelet) await c.kubelet.prepare();
    await c.startApiServer();
    if (c.kubelet) await c.kubelet.startControlPlane();
    else await applyRbac(c.kube, c.controlPlane);
    return c;
  }

  /**
   * Removes every process, namespace and file of the lab `name`, whether or not its state survived.
   */
  static async destroy(name: string): Promise<string[]> {
    const state = await readState(name);
    const mine = await listNetns(`${name}-`);
    // kubelet mode first: every process of its nodes (pods included) at once, then its control
    // plane
    await KubeletNodes.destroy(state, mine);
    for (const pid of [
      state?.apiServerPid,
      state?.etcdPid,
      ...(state?.etcdMemberPids ?? []).map((p) => p ?? undefined),
      ...(state?.nodes ?? []).map((n) => n.pid),
    ])
      await stopPid(pid, 'kill');
    for (const n of mine) await killNamespaceProcesses(n);
    for (const n of mine) await deleteNetns(n);
    await rm(labDir(name), { recursive: true, force: true });
    await removeThrottle(name);
    return mine;
  }

  private nsOf(short: string): string {
    return this.namespaces.ns(short);
  }

  private async addNs(short: string): Promise<string> {
    return this.namespaces.add(short);
  }

  /** A namespace on the underlay bridge at `ip`/24 (and `ip6`/64), default route via the router. */
  private async attach(short: string, ip: string, ip6?: string): Promise<string> {
    const ns = await this.addNs(short);
    const v6 = ip6 === undefined ? {} : { address6: ip6 };
    await attachHost({ rt: this.nsOf('rt'), ns, short, address: ip, ...v6 });
    return ns;
  }

  private targetNs(t: Target): string {
    if (t === 'etcd' || t === 'outside') return this.nsOf(t === 'etcd' ? 'etcd' : 'out');
    return this.nsOf('node' in t ? t.node : t.pod);
  }

  /**
   * nsenter's --net argument for a target: a namespace the lab made, or (kubelet mode) a pod's, by
   * its process
   */
  private async netOf(t: Target): Promise<string> {
    if (this.kubelet && t !== 'etcd' && t !== 'outside' && 'pod' in t)
      return `--net=${await this.kubelet.podNetns(t.pod)}`;
    return `--net=/run/netns/${this.targetNs(t)}`;
  }

  async sh(t: Target, argv: readonly string[], opts: ShOptions = {}): Promise<string> {
    const r = await run('nsenter', [await this.netOf(t), ...argv], {
      timeoutMs: opts.timeoutMs ?? 20_000,
      ...(opts.input === undefined ? {} : { input: opts.input }),
    });
    return r.stdout;
  }

  async watch(
    t: Target,
    argv: readonly string[],
    opts: { signal: AbortSignal; onLine: (line: string) => void },
  ): Promise<void> {
    await watchLines('nsenter', [await this.netOf(t), ...argv], opts);
  }

  async nodes(): Promise<LabNode[]> {
    return this.state.nodes.map((n) => ({
      name: n.name,
      ip: n.ip,
      ...(this.hasIpv6 ? { ip6: nodeIp6(n.index) } : {}),
    }));
  }

  async pods(): Promise<LabPod[]> {
    if (this.kubelet) return this.kubelet.pods();
    return this.state.nodes.flatMap((n) =>
      n.pods.map((p) => ({
        name: p.name,
        node: n.name,
        ip: p.ip,
        ...(p.ip6 === undefined ? {} : { ip6: p.ip6 }),
      })),
    );
  }

  private node(name: string): NodeState {
    const n = this.state.nodes.find((x) => x.name === name);
    if (!n) throw new Error(`${this.description}: no node ${name}`);
    return n;
  }

  /** `up --slow`: how much slower than this machine the lab's processes run, if they do. */
  get slow(): number | undefined {
    return this.state.slow;
  }

  /**
   * Starts a lab process (etcd, the apiserver, twill) in a namespace: in the slow lab's CPU group,
   * when it has one.
   */
  private async spawnIn(ns: string, argv: readonly string[], log: string): Promise<number> {
    const pid = spawnDetached(ns, argv, log);
    if (this.state.slow !== undefined) await joinThrottle(this.state.name, pid);
    return pid;
  }

  async twillCpuMs(node: string): Promise<number | undefined> {
    if (this.kubelet) return this.kubelet.twillCpuMs(node);
    return processCpuMs(this.node(node).pid);
  }

  logPath(node: string): string {
    if (this.kubelet) return this.kubelet.twillLogDir(node);
    return join(this.dir, node, 'twill.log');
  }

  async twillLog(node: string): Promise<string> {
    if (this.kubelet) return this.kubelet.twillLog(node);
    return readFile(this.logPath(node), 'utf8').catch(() => '');
  }

  /**
   * kubelet mode: twill is the DaemonSet's pod, which kubelet starts and restarts; the drills go
   * through Kubernetes
   */
  private notKubelet(what: string): void {
    if (this.kubelet)
      throw new Error(
        `${this.description}: ${what}: in kubelet mode twill runs as the DaemonSet's pod (use kubectl)`,
      );
  }

  get kubeletControl(): KubeletNodes | undefined {
    return this.kubelet;
  }

  async startTwill(name: string): Promise<void> {
    this.notKubelet('starting twill');
    const n = this.node(name);
    if (alive(n.pid)) throw new Error(`twill already runs on ${name} (pid ${n.pid})`);
    const store =
      this.store === 'kube'
        ? twillKubeFlags(this.kube, name)
        : etcdStoreFlags(this.etcdEndpoints.join(','), name);
    const argv = twillRunArgv(await twillCommand(), {
      store,
      subnetFile: join(this.dir, name, 'subnet.env'),
      flags: ['--ip-masq', '--healthz-port', String(HEALTHZ_PORT)],
      // IPv6-only: no --iface, so twill finds eth0 by its IPv6 default route (IPv4 off), as a
      // deployed twill (deploy/ gives none) does
      ...(this.ipv6Only ? { iface: null } : {}),
    });
    n.pid = await this.spawnIn(this.nsOf(name), argv, this.logPath(name));
    await writeState(this.state);
  }

  async stopTwill(name: string, how: 'term' | 'kill'): Promise<void> {
    this.notKubelet('stopping twill');
    const n = this.node(name);
    await stopPid(n.pid, how);
    n.pid = undefined;
    await writeState(this.state);
  }

  /** Runs argv in the etcd namespace, where the kube-apiserver listens. */
  private readonly controlPlane = (argv: readonly string[], opts?: ShOptions): Promise<string> =>
    this.sh('etcd', argv, opts);

  private kubeOnly(what: string): void {
    if (this.store !== 'kube')
      throw new Error(`${this.description}: ${what} needs a lab in kube mode (up --store kube)`);
  }

  async kubectl(args: readonly string[], opts?: ShOptions): Promise<string> {
    this.kubeOnly('kubectl');
    return adminKubectl(this.kube, this.controlPlane, args, opts);
  }

  /**
   * The admin's kubeconfig (its server is reachable from the lab's namespaces, such as
   * <name>-etcd).
   */
  get adminKubeconfig(): string {
    this.kubeOnly('a kubeconfig');
    return this.kube.admin.kubeconfig;
  }

  /**
   * argv of kubectl as the admin, run where the apiserver is reachable (`npm run lab -- kubectl`).
   */
  kubectlArgv(args: readonly string[]): string[] {
    this.kubeOnly('kubectl');
    return [
      'nsenter',
      `--net=/run/netns/${this.nsOf('etcd')}`,
      ...kubectlArgv(this.kube.admin, args),
    ];
  }

  async stopApiServer(): Promise<void> {
    this.kubeOnly('stopping the kube-apiserver');
    await stopPid(this.state.apiServerPid, 'term');
    this.state.apiServerPid = undefined;
    await writeState(this.state);
  }

  async startApiServer(): Promise<void> {
    this.kubeOnly('starting the kube-apiserver');
    if (alive(this.state.apiServerPid))
      throw new Error(`the kube-apiserver already runs (pid ${this.state.apiServerPid})`);
    const pid = await spawnLabApiServer({
      k: this.kube,
      ns: this.nsOf('etcd'),
      etcd: this.etcdEndpoint,
    });
    if (this.state.slow !== undefined) await joinThrottle(this.state.name, pid);
    this.state.apiServerPid = pid;
    await writeState(this.state);
    await untilLabApiServerReady(this.kube, this.controlPlane, pid);
  }

  /** How many members the lab's etcd has (`up --etcd-members`; 1 by default). */
  get etcdMembers(): number {
    return this.etcdEndpoints.length;
  }

  /** Member k's pid (1-based), or undefined when it does not run. */
  private etcdPidOf(k: number): number | undefined {
    return (k === 1 ? this.state.etcdPid : this.state.etcdMemberPids?.[k - 2]) ?? undefined;
  }

  private setEtcdPid(k: number, pid: number | undefined): void {
    if (k === 1) this.state.etcdPid = pid;
    else if (this.state.etcdMemberPids) this.state.etcdMemberPids[k - 2] = pid ?? null;
  }

  /** etcd member k's argv; one member alone is the lab's single etcd, as it always was */
  private etcdArgv(k: number): string[] {
    const member = (m: number): { name: string; peerUrl: string } => ({
      name: m === 1 ? 'lab' : `lab${m}`,
      peerUrl: `http://127.0.0.1:${etcdClientPort(m) + 1}`,
    });
    const spec = {
      ...member(k),
      dataDir: this.etcdDataDir(k),
      clientUrl: this.etcdEndpoints[k - 1] ?? '',
    };
    if (this.etcdMembers === 1) return etcdArgv(spec);
    return etcdArgv(spec, {
      cluster: this.etcdEndpoints.map((_, i) => member(i + 1)),
      token: `twill-lab-${this.state.name}`,
    });
  }

  private etcdDataDir(k: number): string {
    return join(this.dir, k === 1 ? 'etcd' : `etcd${k}`);
  }

  private etcdLogPath(k: number): string {
    return join(this.dir, k === 1 ? 'etcd.log' : `etcd${k}.log`);
  }

  /** Stops every etcd member. */
  async stopEtcd(): Promise<void> {
    for (let k = 1; k <= this.etcdMembers; k++) await stopPid(this.etcdPidOf(k), 'term');
    for (let k = 1; k <= this.etcdMembers; k++) this.setEtcdPid(k, undefined);
    await writeState(this.state);
  }

  /**
   * Starts every etcd member that does not run (together: a cluster's members wait for each other),
   * and waits until each is healthy.
   */
  async startEtcd(o: { wipe: boolean }): Promise<void> {
    const down = Array.from({ length: this.etcdMembers }, (_, i) => i + 1).filter(
      (k) => !alive(this.etcdPidOf(k)),
    );
    if (o.wipe)
      for (const k of down) await rm(this.etcdDataDir(k), { recursive: true, force: true });
    for (const k of down)
      this.setEtcdPid(
        k,
        await this.spawnIn(this.nsOf('etcd'), this.etcdArgv(k), this.etcdLogPath(k)),
      );
    await writeState(this.state);
    await Promise.all(down.map((k) => this.untilEtcdMemberHealthy(k)));
  }

  private async untilEtcdMemberHealthy(k: number): Promise<void> {
    const url = this.etcdEndpoints[k - 1] ?? '';
    const healthy = (): Promise<boolean> => etcdHealthy(url, this.nsOf('etcd'));
    if ((await until(healthy, { timeoutMs: 20_000, everyMs: 100 })) === undefined)
      throw new Error(
        `etcd${this.etcdMembers > 1 ? ` member ${k}` : ''} did not become healthy; see ${this.etcdLogPath(k)}`,
      );
  }

  /** Stops etcd member k (1-based) alone: SIGTERM, or SIGKILL as a crashed machine. */
  async stopEtcdMember(k: number, how: 'term' | 'kill'): Promise<void> {
    await stopPid(this.etcdPidOf(k), how);
    this.setEtcdPid(k, undefined);
    await writeState(this.state);
  }

  /** Starts etcd member k again with its data, and waits until it is healthy. */
  async startEtcdMember(k: number): Promise<void> {
    if (alive(this.etcdPidOf(k)))
      throw new Error(`etcd member ${k} already runs (pid ${this.etcdPidOf(k)})`);
    this.setEtcdPid(
      k,
      await this.spawnIn(this.nsOf('etcd'), this.etcdArgv(k), this.etcdLogPath(k)),
    );
    await writeState(this.state);
    await this.untilEtcdMemberHealthy(k);
  }

  /**
   * The member (1-based) that every running member names as the leader
   * (`etcdctl endpoint status`), or undefined when they do not agree (an
   * election under way) or none answers.
   */
  async etcdLeader(): Promise<number | undefined> {
    const up = this.etcdEndpoints.filter((_, i) => alive(this.etcdPidOf(i + 1)));
    const leader = await agreedLeader(up, this.nsOf('etcd'));
    const k = leader === undefined ? 0 : this.etcdEndpoints.indexOf(leader) + 1;
    return k > 0 ? k : undefined;
  }

  async addNodes(names: readonly string[], pods: number): Promise<void> {
    const added: NodeState[] = [];
    for (const name of names) {
      const index = this.state.nextIndex++;
      const n: NodeState = { name, index, ip: nodeIp(index), pid: undefined, pods: [] };
      await mkdir(join(this.dir, name), { recursive: true });
      await this.attach(name, n.ip, this.hasIpv6 ? nodeIp6(index) : undefined);
      this.state.nodes.push(n);
      added.push(n);
    }
    await writeState(this.state);
    if (this.kubelet) return this.kubelet.addNodes(added, pods);
    // a controller-manager would give each Node its podCIDR: here the lab does, before twill starts
    for (const n of added)
      if (this.store === 'kube')
        await this.kubectl(['create', '-f', '-'], {
          input: nodeObject(n.name, labPodCidrs(n.index, this.families)),
        });
    for (const n of added) await this.startTwill(n.name);
    for (const n of added) await this.wirePods(n, pods);
  }

  async removeNode(name: string): Promise<void> {
    const n = this.node(name);
    const log = this.logPath(name);
    if (this.kubelet) await this.kubelet.removeNode(n);
    else await this.stopTwill(name, 'term');
    if (this.store === 'kube') await this.kubectl(['delete', 'node', name, '--ignore-not-found']);
    for (const p of n.pods) await deleteNetns(this.nsOf(p.name));
    await deleteNetns(this.nsOf(name));
    await detachHost(this.nsOf('rt'), name);
    this.state.nodes = this.state.nodes.filter((x) => x !== n);
    await writeState(this.state);
    // a node added later under the same name starts afresh; its log (kubelet mode: its pod logs) is
    // kept under removed/
    await mkdir(join(this.dir, 'removed'), { recursive: true });
    await rename(
      log,
      join(this.dir, 'removed', `${name}-${Date.now()}${this.kubelet ? '-pods' : '.log'}`),
    ).catch(() => undefined);
    await rm(join(this.dir, name), { recursive: true, force: true });
  }

  /** Waits for the node's subnet.env, then makes its pods with twill-cni ADD. */
  private async wirePods(n: NodeState, count: number): Promise<void> {
    const subnetFile = join(this.dir, n.name, 'subnet.env');
    // a twill that stopped (say on a bad flag) will not write it: no point waiting the full minute
    const written = async (): Promise<boolean> =>
      (await readFile(subnetFile, 'utf8').catch(() => '')) !== '' || !alive(n.pid);
    await until(written, { timeoutMs: 60_000, everyMs: 25 });
    if ((await readFile(subnetFile, 'utf8').catch(() => '')) === '') {
      throw new Error(
        `${n.name}: no subnet.env ${alive(n.pid) ? 'after 60 s' : 'and its twill exited'}; see ${this.logPath(n.name)}`,
      );
    }
    const conf = {
      cniVersion: '1.0.0',
      name: 'twill-lab',
      type: 'twill',
      subnetFile,
      dataDir: join(this.dir, n.name, 'ipam'),
      logFile: join(this.dir, n.name, 'cni.log'),
    };
    for (let k = n.pods.length + 1; n.pods.length < count; k++) {
      const pod = `${n.name}-p${k}`;
      await this.addNs(pod);
      const answer = await callCni({
        nodeNs: this.nsOf(n.name),
        exe: TWILL_CNI,
        verb: 'ADD',
        conf,
        containerId: `${this.state.name}-${pod}`,
        netns: `/run/netns/${this.nsOf(pod)}`,
        env: { CNI_PATH: '/opt/cni/bin' },
      });
      if (answer.code !== 0 || answer.json === undefined)
        throw new Error(
          `${pod}: twill-cni ADD failed (${answer.code}): ${(answer.stdout + answer.stderr).trim()}`,
        );
      const ips = (answer.json as { ips?: { address?: string }[] }).ips ?? [];
      const addrs = ips.map((a) => (a.address ?? '').split('/')[0] ?? '');
      const ip4 = addrs.find((a) => !a.includes(':'));
      const ip6 = addrs.find((a) => a.includes(':'));
      if (this.hasIpv6 && ip6 === undefined)
        throw new Error(
          `${pod}: twill-cni ADD gave no IPv6 address on a ${this.ipv6Only ? 'IPv6-only' : 'dual-stack'} lab`,
        );
      // IPv6-only: the pod's one address is IPv6, its primary one (LabPod.ip)
      if (this.ipv6Only && ip4 !== undefined)
        throw new Error(`${pod}: twill-cni ADD gave an IPv4 address (${ip4}) on an IPv6-only lab`);
      const ip = this.ipv6Only ? (ip6 ?? '') : (ip4 ?? '');
      n.pods.push({ name: pod, ip, ...(ip6 === undefined ? {} : { ip6 }) });
      await writeState(this.state);
    }
  }
}
