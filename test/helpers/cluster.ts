// A small cluster in network namespaces for tests, on the lab's underlay
// (lab/kit/underlay.ts): a router namespace (10.123.0.254, also the nodes'
// default gateway), a real etcd on it (10.123.0.1), N node namespaces
// (10.123.0.1x) each running `twill run` from source as a real process, one
// "pod" per node on a cni0 bridge holding an address from the node's subnet,
// and an "outside" namespace (203.0.113.2) beyond the router that knows no pod
// routes. Everything is made in the test's own namespaces and removed by
// `destroy`, even after a failure.
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd, type EtcdServer } from '../../lab/kit/etcd.ts';
import { addVeth, NetnsLab, nsRun } from '../../lab/kit/netns.ts';
import { stopProcess } from '../../lab/kit/process.ts';
import { etcdStoreFlags, twillRunArgv, twillSourceCommand } from '../../lab/kit/twill-command.ts';
import { attachHost, buildRouter, ETCD_IP, nodeIp, OUTSIDE_IP } from '../../lab/kit/underlay.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { parseSubnetEnv } from '../../src/subnetenv.ts';
import { formatIpv4, firstHost } from '../../src/net/ipv4.ts';

export const ETCD_ENDPOINT = `http://${ETCD_IP}:2379`;

export interface ClusterNode {
  readonly name: string;
  readonly ns: string;
  readonly ip: string;
  readonly subnetFile: string;
  readonly logFile: string;
  twill: ChildProcess | undefined;
  /** the pod namespace and its address, once made */
  pod?: { ns: string; ip: string };
}

export class Cluster {
  readonly lab = new NetnsLab();
  readonly nodes: ClusterNode[] = [];
  router = '';
  outside = '';
  etcdNs = '';
  dir = '';
  private etcd: EtcdServer | undefined;

  /** Underlay, router, outside and etcd with `netconf` stored under the default prefix. */
  async start(netconf: string): Promise<void> {
    this.dir = await mkdtemp(join(tmpdir(), 'twill-cluster-'));
    this.router = await this.lab.add('rt');
    this.outside = await this.lab.add('out');
    await buildRouter(this.router, this.outside);
    this.etcdNs = await this.attach('etcd', ETCD_IP);
    this.etcd = await startEtcd({ netns: this.etcdNs, host: ETCD_IP, clientPort: 2379 });
    await this.etcdctl('put', '/coreos.com/network/config', netconf);
  }

  async sh(ns: string, file: string, ...args: string[]): Promise<string> {
    return (await nsRun(ns, [file, ...args], { timeoutMs: 20_000 })).stdout;
  }

  async etcdctl(...args: string[]): Promise<string> {
    return this.sh(this.etcdNs, 'etcdctl', '--endpoints', ETCD_ENDPOINT, ...args);
  }

  /** A namespace on the underlay bridge with address `ip`/24 and the router as default gateway. */
  private async attach(short: string, ip: string): Promise<string> {
    const ns = await this.lab.add(short);
    await attachHost({ rt: this.router, ns, short, address: ip });
    return ns;
  }

  /** Adds node `n` (address 10.123.0.(10+n)) and starts its twill. */
  async addNode(n: number, extraFlags: string[] = ['--ip-masq']): Promise<ClusterNode> {
    const name = `n${n}`;
    const ip = nodeIp(n);
    const ns = await this.attach(name, ip);
    const node: ClusterNode = {
      name,
      ns,
      ip,
      subnetFile: join(this.dir, `${name}.env`),
      logFile: join(this.dir, `${name}.log`),
      twill: undefined,
    };
    this.nodes.push(node);
    this.startTwill(node, extraFlags);
    return node;
  }

  startTwill(node: ClusterNode, extraFlags: string[] = ['--ip-masq']): void {
    const argv = twillRunArgv(twillSourceCommand(), {
      store: etcdStoreFlags(ETCD_ENDPOINT, node.name),
      subnetFile: node.subnetFile,
      flags: extraFlags,
    });
    node.twill = this.lab.spawn(node.ns, argv, node.logFile);
  }

  async stopTwill(node: ClusterNode): Promise<void> {
    if (node.twill) await stopProcess(node.twill);
    node.twill = undefined;
  }

  /** The node's twill log so far (all runs). */
  async logOf(node: ClusterNode): Promise<string> {
    return readFile(node.logFile, 'utf8').catch(() => '');
  }

  async subnetOf(
    node: ClusterNode,
  ): Promise<{ gateway: string; prefix: number; key: string; mtu: number }> {
    const env = parseSubnetEnv(await readFile(node.subnetFile, 'utf8'), node.subnetFile);
    const subnet = env.subnet;
    // the clusters these helpers make are IPv4 or dual-stack
    if (!subnet) throw new Error(`${node.subnetFile} has no IPv4 subnet`);
    return {
      gateway: formatIpv4(firstHost(subnet)),
      prefix: subnet.prefix,
      key: `${formatIpv4(subnet.base)}-${subnet.prefix}`,
      mtu: env.mtu,
    };
  }

  /**
   * Waits for subnet.env, then makes the node's pod: cni0 with the gateway address, a veth into the
   * pod namespace.
   */
  async addPod(node: ClusterNode): Promise<void> {
    await waitFor(async () => (await readFile(node.subnetFile, 'utf8').catch(() => '')) !== '', {
      timeoutMs: 15_000,
      what: `${node.name} subnet.env`,
    });
    const s = await this.subnetOf(node);
    const podIp = s.gateway.replace(/\.1$/, '.2');
    const pod = await this.lab.add(`${node.name}-pod`);
    await this.sh(node.ns, 'ip', 'link', 'add', 'cni0', 'mtu', String(s.mtu), 'type', 'bridge');
    await this.sh(node.ns, 'ip', 'addr', 'add', `${s.gateway}/${s.prefix}`, 'dev', 'cni0');
    await this.sh(node.ns, 'ip', 'link', 'set', 'cni0', 'up');
    await addVeth({ ns: node.ns, dev: 'vethpod', peerNs: pod, peerDev: 'eth0', mtu: s.mtu });
    await this.sh(node.ns, 'ip', 'link', 'set', 'vethpod', 'master', 'cni0', 'up');
    await this.sh(pod, 'ip', 'addr', 'add', `${podIp}/${s.prefix}`, 'dev', 'eth0');
    await this.sh(pod, 'ip', 'link', 'set', 'eth0', 'up');
    await this.sh(pod, 'ip', 'route', 'add', 'default', 'via', s.gateway);
    node.pod = { ns: pod, ip: podIp };
  }

  /** True when one ping from `ns` to `ip` gets an answer within 1 s. */
  async ping(ns: string, ip: string): Promise<boolean> {
    return this.sh(ns, 'ping', '-c', '1', '-W', '1', ip).then(
      () => true,
      () => false,
    );
  }

  /**
   * Starts a TCP server in the outside namespace that answers every connection with the address it
   * came from.
   */
  startEchoSource(port: number): void {
    const script = `require('node:net').createServer((s) => s.end(s.remoteAddress)).listen(${port}, '${OUTSIDE_IP}')`;
    this.lab.spawn(this.outside, [process.execPath, '-e', script], join(this.dir, 'outside.log'));
  }

  /** Connects from `ns` to the outside echo server; the source address the outside saw. */
  async sourceSeenOutside(ns: string, port: number): Promise<string> {
    const script = `const s = require('node:net').connect(${port}, '${OUTSIDE_IP}'); let d = ''; s.on('data', (c) => (d += c)); s.on('end', () => process.stdout.write(d)); s.on('error', (e) => { console.error(e.message); process.exit(1); }); setTimeout(() => process.exit(2), 3000).unref();`;
    return this.sh(ns, process.execPath, '-e', script);
  }

  async destroy(): Promise<void> {
    for (const node of this.nodes) if (node.twill) node.twill.kill('SIGKILL');
    await this.etcd?.destroy();
    await this.lab.destroy();
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}

/**
 * GET http://127.0.0.1:<port><path> from inside a node's namespace (its health endpoint, say):
 * status and body.
 */
export async function httpGetIn(
  c: Cluster,
  node: ClusterNode,
  port: number,
  path: string,
): Promise<{ status: number; body: string }> {
  const script = `fetch('http://127.0.0.1:${port}${path}').then(async (r) => process.stdout.write(r.status + ' ' + (await r.text())), (e) => { console.error(e.message); process.exit(1); })`;
  const out = await c.sh(node.ns, process.execPath, '-e', script);
  const sp = out.indexOf(' ');
  return { status: Number(out.slice(0, sp)), body: out.slice(sp + 1) };
}
