// `twill doctor` and `twill status` on an IPv6-only node ("EnableIPv4": false, Kubernetes store
// only): the daemon runs in a network namespace of its own whose underlay has IPv6 addresses
// only, against a real kube-apiserver, with a peer Node annotated as an IPv6-only twill node
// publishes itself; cni0 and a pod veth are made as the CNI plugin makes them. The doctor's reads
// (gather: commands through nsenter, sysctls read inside the namespace, the store as the CLI reads
// it) and checks, and status's reads and report, run in-process against that namespace: every
// check passes (the IPv4 ones n/a or over IPv6) and status is in sync with its IPv4 half null.
// Then what an earlier IPv4 run leaves (twill.1, an IPv4 route with twill's protocol, twill's
// iptables chain, an IPv4 address on cni0) is reported as stale by both, and a restarted daemon's
// first pass removes all of it but cni0's address (the CNI plugin's).
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runChecks } from '../../src/doctor/checks.ts';
import type { CheckResult } from '../../src/doctor/facts.ts';
import { gather, readLeaseStore } from '../../src/doctor/gather.ts';
import { ClientKubeApi } from '../../src/lease/kube-api.ts';
import { KubeLeaseStore } from '../../src/lease/kube-store.ts';
import { gatherStatus } from '../../src/status/inputs.ts';
import { buildStatus, type StatusReport } from '../../src/status/report.ts';
import { renderStatus } from '../../src/status/text.ts';
import { startTestDaemon, type TestNode } from '../helpers/daemon.ts';
import type { KubeApiServer } from '../helpers/kube.ts';
import { startKubeTestCluster, type KubeAdmin } from '../helpers/kube-nodes.ts';
import { addVeth, NetnsLab, nsRunner } from '../../lab/kit/netns.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const P = 'flannel.alpha.coreos.com';
const NET_CONF =
  '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}';
const IFACE = { iface: ['eth0'], ifaceRegex: [], publicIp: undefined };
let kube: KubeApiServer;
let admin: KubeAdmin;
let kubeconfig: string;
let dir: string;
let ns: string;
const lab = new NetnsLab();

const store = (): KubeLeaseStore =>
  new KubeLeaseStore({
    api: new ClientKubeApi({ kubeconfigFile: kubeconfig }),
    nodeName: 'd6n1',
    netConfigPath: join(dir, 'net-conf.json'),
  });

const inNode = async (file: string, ...args: string[]): Promise<string> =>
  (await nsRunner(ns)(file, args)).stdout;

/** A file read inside the namespace (net sysctls are the reading process's namespace's). */
async function readInNode(path: string): Promise<string> {
  const script = 'if [ -e "$1" ]; then cat "$1"; else echo ENOENT; fi';
  const out = await inNode('sh', '-c', script, 'sh', path);
  if (out === 'ENOENT\n') throw Object.assign(new Error(`no ${path}`), { code: 'ENOENT' });
  return out;
}

/** The doctor, as `twill doctor --kube-subnet-mgr --iface eth0` runs it in the node. */
async function doctor(): Promise<CheckResult[]> {
  const s = store();
  const signal = AbortSignal.timeout(30_000);
  try {
    const facts = await gather(
      {
        runner: nsRunner(ns),
        readText: readInNode,
        readStore: (sig) => readLeaseStore(s, sig, 5_000),
      },
      {
        iface: IFACE,
        subnetFile: join(dir, 'd6n1.env'),
        bridge: 'cni0',
        procSysNet: '/proc/sys/net',
      },
      signal,
    );
    return runChecks(facts);
  } finally {
    await s.close();
  }
}

/** `twill status` as it reads this node. */
async function status(): Promise<StatusReport> {
  const s = store();
  try {
    return buildStatus(
      await gatherStatus({
        store: s,
        runner: nsRunner(ns),
        iface: IFACE,
        subnetFile: join(dir, 'd6n1.env'),
        healthzPort: 0,
        signal: AbortSignal.timeout(30_000),
      }),
    );
  } finally {
    await s.close();
  }
}

/** The checks that are not ok, br_netfilter's allowed where the host has not loaded it. */
async function notOk(results: CheckResult[]): Promise<string[]> {
  const br = (
    await inNode('sh', '-c', 'test -d /proc/sys/net/bridge && echo yes || echo no')
  ).trim();
  const allowed = br === 'yes' ? [] : ['br-netfilter: fail', 'bridge-nf-call-ip6tables: warn'];
  return results
    .filter((r) => r.verdict !== 'ok')
    .map((r) => `${r.check}: ${r.verdict}`)
    .filter((x) => !allowed.includes(x));
}

const detail = (results: CheckResult[], check: string): string =>
  results.find((r) => r.check === check)?.detail ?? '';

const startDaemon = (): Promise<TestNode> =>
  startTestDaemon({
    store: store(),
    nodeName: 'd6n1',
    iface: ['eth0'],
    subnetFile: join(dir, 'd6n1.env'),
    ipMasq: true,
    ns,
  });

const routeToPeer = async (): Promise<string> =>
  inNode('ip', '-6', 'route', 'show', 'fd00:10:244:2::/64', 'proto', '151');

beforeAll(async () => {
  ({ kube, admin, kubeconfig, dir } = await startKubeTestCluster());
  await writeFile(join(dir, 'net-conf.json'), NET_CONF);
  // the node d6n1 at fd7b::1 on eth0, IPv6 addresses only; the peer's side of the link at fd7b::2
  ns = await lab.add('d6n1');
  const peerNs = await lab.add('d6peer');
  await addVeth({ ns, dev: 'eth0', peerNs, peerDev: 'eth0' });
  for (const [n, addr] of [
    [ns, 'fd7b::1/64'],
    [peerNs, 'fd7b::2/64'],
  ] as const) {
    await nsRunner(n)('ip', ['addr', 'add', addr, 'dev', 'eth0', 'nodad']);
    await nsRunner(n)('ip', ['link', 'set', 'eth0', 'up']);
  }
  const ready = [{ type: 'Ready', status: 'True' }];
  // an IPv6-only twill node as it annotates itself: no public-ip, no backend-data
  await admin.createNode('d6peer', {
    podCidrs: ['fd00:10:244:2::/64'],
    annotations: {
      [`${P}/kube-subnet-manager`]: 'true',
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/public-ipv6`]: 'fd7b::2',
      [`${P}/backend-v6-data`]: '{"VNI":1,"VtepMAC":"7e:00:00:00:00:02"}',
    },
    conditions: ready,
  });
  await admin.createNode('d6n1', { podCidrs: ['fd00:10:244:1::/64'], conditions: ready });
  // cni0 and one pod's host veth, as the CNI plugin makes them on an IPv6-only node (MTU 1500 − 70)
  await inNode('ip', 'link', 'add', 'cni0', 'mtu', '1430', 'type', 'bridge');
  await inNode('ip', 'addr', 'add', 'fd00:10:244:1::1/64', 'dev', 'cni0', 'nodad');
  await inNode('ip', 'link', 'set', 'cni0', 'up');
  await inNode(
    'ip',
    'link',
    'add',
    'twvd6a',
    'mtu',
    '1430',
    'type',
    'veth',
    'peer',
    'name',
    'podd6a',
    'mtu',
    '1430',
  );
  await inNode('ip', 'link', 'set', 'twvd6a', 'master', 'cni0', 'up');
}, 60_000);

afterAll(async () => {
  await kube?.stop();
  await lab.destroy();
});

describe('doctor and status on an IPv6-only node', () => {
  it('pass every check and show the node in sync, its IPv4 half off', async () => {
    await startDaemon();
    await waitFor(async () => (await routeToPeer()) !== '', {
      timeoutMs: 15_000,
      what: 'the route to the peer',
    });
    const results = await doctor();
    expect(await notOk(results)).toEqual([]);
    expect(results.map((r) => r.check)).toEqual([
      'ip-forward',
      'br-netfilter',
      'bridge-nf-call-ip6tables',
      'rp-filter',
      'iptables-backend',
      'vxlan-port',
      'mtu',
      'subnet-env',
      'cni0-subnet',
      'stale-routes',
      'foreign-overlay',
      'masq-leftovers',
      'ipv6-forward',
      'vxlan6-device',
      'ip6tables-chains',
      'ipv4-leftovers',
    ]);
    expect(detail(results, 'ip-forward')).toMatch(/^n\/a: IPv4 is off/);
    expect(detail(results, 'subnet-env')).toBe(
      `${join(dir, 'd6n1.env')}: FLANNEL_IPV6_NETWORK=fd00:10:244::/56 FLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64 matches our lease d6n1 (PublicIPv6 fd7b::1)`,
    );
    expect(detail(results, 'mtu')).toBe(
      'consistent: eth0 1500, twill-v6.1 1430, FLANNEL_MTU 1430, cni0 and pods 1430',
    );
    expect(detail(results, 'stale-routes')).toBe(
      "1 route with protocol 151, each explained by a peer's lease",
    );
    expect(detail(results, 'vxlan6-device')).toBe(
      'twill-v6.1: vxlan VNI 1 port 8472 local fd7b::1',
    );
    const r = await status();
    expect(r.inSync).toBe(true);
    expect(r.lease).toMatchObject({ subnet: null, publicIp: null, subnet6: 'fd00:10:244:1::/64' });
    expect(r.peers.find((p) => p.key === 'd6peer')).toMatchObject({
      subnet: null,
      kernel: null,
      subnet6: 'fd00:10:244:2::/64',
      publicIpv6: 'fd7b::2',
      kernel6: 'ok',
    });
    expect(r.masquerade).toBeNull();
    expect(r.masquerade6).toEqual({ postrouting: 'ok', forward: 'ok' });
    expect(renderStatus(r)).toContain('masquerade: IPv4 off');
  }, 60_000);

  it("reports an earlier IPv4 run's leftovers as stale; a restarted daemon removes twill's", async () => {
    // twill run is stopped (the test before ended); an IPv4 run left these behind
    await inNode(
      'ip',
      'link',
      'add',
      'twill.1',
      'type',
      'vxlan',
      'id',
      '1',
      'dstport',
      '8472',
      'dev',
      'eth0',
    );
    await inNode('ip', 'link', 'set', 'twill.1', 'up');
    await inNode(
      'ip',
      'route',
      'add',
      '10.244.7.0/24',
      'via',
      '10.244.7.0',
      'dev',
      'twill.1',
      'onlink',
      'proto',
      '151',
    );
    await inNode('iptables', '-N', 'TWILL-FWD');
    await inNode('iptables', '-A', 'TWILL-FWD', '-s', '10.244.0.0/16', '-j', 'ACCEPT');
    await inNode(
      'iptables',
      '-A',
      'FORWARD',
      '-m',
      'comment',
      '--comment',
      'twill forward',
      '-j',
      'TWILL-FWD',
    );
    await inNode('ip', 'addr', 'add', '10.244.1.1/24', 'dev', 'cni0');
    const results = await doctor();
    expect(await notOk(results)).toEqual([
      'cni0-subnet: fail',
      'stale-routes: fail',
      'ipv4-leftovers: warn',
    ]);
    expect(detail(results, 'stale-routes')).toContain(
      '10.244.7.0/24 via 10.244.7.0 dev twill.1 (IPv4 is off: its IPv4 routes are leftovers of an earlier IPv4 run)',
    );
    expect(detail(results, 'cni0-subnet')).toContain(
      '10.244.1.1/24 from an earlier IPv4 run (IPv4 is off now)',
    );
    expect(detail(results, 'ipv4-leftovers')).toBe(
      'IPv4 is off (IPv6 only), but an earlier IPv4 run left device twill.1 (vxlan VNI 1); 1 jump from FORWARD to TWILL-FWD; chain TWILL-FWD in filter (1 rules)',
    );
    const r = await status();
    expect(r.inSync).toBe(false);
    expect(r.diff.extra).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^route del 10\.244\.7\.0\/24 /),
        'chain filter TWILL-FWD (IPv4 is off)',
      ]),
    );
    // the daemon's first pass after a start removes twill's objects; cni0's address is the CNI
    // plugin's to remove
    await startDaemon();
    await waitFor(
      async () => (await inNode('ip', '-4', 'route', 'show', 'proto', '151')).trim() === '',
      { timeoutMs: 15_000, what: 'the IPv4 leftovers removed' },
    );
    await waitFor(async () => (await routeToPeer()) !== '', {
      timeoutMs: 15_000,
      what: 'the route to the peer',
    });
    await inNode('ip', 'addr', 'del', '10.244.1.1/24', 'dev', 'cni0');
    const after = await doctor();
    expect(await notOk(after)).toEqual([]);
    expect((await status()).inSync).toBe(true);
  }, 90_000);
});
