// `twill doctor` as a real process inside a node's network namespace (via
// nsenter, so its /proc/sys/net reads see the namespace's values), against
// a real etcd in another namespace. A healthy node — `twill run` over
// vxlan with a peer, plus a cni0 bridge and a pod veth made as the CNI
// plugin makes them — passes every check, with the daemon running and
// after it stopped. Then each broken condition is made in that namespace
// (never the host's), doctor must exit 1 and fail exactly the checks that
// name it, and the condition is undone (also when the test fails).
// br_netfilter not being loaded is host-global and cannot be made here: its
// check is covered from facts in test/unit/doctor-checks.test.ts.
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import { startEtcd, type EtcdServer } from '../../lab/kit/etcd.ts';
import { NetnsLab, sweepStaleNetns } from '../../lab/kit/netns.ts';
import { exited, runToExit, stopProcess } from '../../lab/kit/process.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const MAIN = resolve(import.meta.dirname, '../../src/cli/main.ts');
const ENDPOINT = 'http://10.123.0.1:2379';
const PEER =
  '{"PublicIP":"10.123.0.9","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"02:00:00:00:00:09"}}';
const lab = new NetnsLab();
let etcd: EtcdServer;
let dir: string;
let etcdNs: string;
let nodeNs: string;
let twill: ReturnType<NetnsLab['spawn']> | undefined;
let subnetEnvText = '';
const hostHasBrNetfilter = existsSync('/proc/sys/net/bridge');

interface Report {
  code: number | string;
  checks: { check: string; verdict: string; detail: string; fix: string }[];
  stderr: string;
}

/** Runs `twill doctor --json` in the node's namespace. */
async function doctor(extra: string[] = []): Promise<Report> {
  const env = Object.fromEntries(
    Object.entries(process.env).filter((e): e is [string, string] => e[1] !== undefined),
  );
  const argv = [
    'nsenter',
    `--net=/run/netns/${nodeNs}`,
    process.execPath,
    MAIN,
    'doctor',
    '--json',
    '--iface',
    'eth0',
    '--subnet-file',
    join(dir, 'subnet.env'),
    '--etcd-endpoints',
    ENDPOINT,
    ...extra,
  ];
  const out = await runToExit(argv, { input: '', env, timeoutMs: 30_000 });
  try {
    const { checks } = JSON.parse(out.stdout) as { checks: Report['checks'] };
    return { code: out.code, checks, stderr: out.stderr };
  } catch {
    throw new Error(`doctor printed no JSON (exit ${out.code}): ${out.stdout}\n${out.stderr}`);
  }
}

const notOk = (r: Report): string[] =>
  r.checks.filter((c) => c.verdict !== 'ok').map((c) => `${c.check}: ${c.verdict}`);

/** Runs a command inside the node's namespace. */
async function inNode(file: string, ...args: string[]): Promise<string> {
  return (await run('nsenter', [`--net=/run/netns/${nodeNs}`, file, ...args])).stdout;
}

beforeAll(async () => {
  await sweepStaleNetns();
  dir = await mkdtemp(join(tmpdir(), 'twill-doctor-'));
  etcdNs = await lab.add('detcd');
  nodeNs = await lab.add('dnode');
  await lab.link(
    { ns: etcdNs, dev: 'eth0', cidr: '10.123.0.1/24' },
    { ns: nodeNs, dev: 'eth0', cidr: '10.123.0.2/24' },
  );
  await inNode('ip', 'route', 'add', 'default', 'via', '10.123.0.1');
  etcd = await startEtcd({ netns: etcdNs, host: '10.123.0.1', clientPort: 2379 });
  await lab.exec(etcdNs, 'etcdctl', [
    '--endpoints',
    ENDPOINT,
    'put',
    '/coreos.com/network/config',
    '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}',
  ]);
  await lab.exec(etcdNs, 'etcdctl', [
    '--endpoints',
    ENDPOINT,
    'put',
    '/coreos.com/network/subnets/10.244.77.0-24',
    PEER,
  ]);
  // The node's own subnet is fixed (twill reclaims the one subnet.env names), so it never is one
  // of the subnets the cases below add as stale or foreign (250–252).
  await writeFile(
    join(dir, 'subnet.env'),
    'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.10.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n',
  );
  const argv = [
    process.execPath,
    MAIN,
    'run',
    '--etcd-endpoints',
    ENDPOINT,
    '--subnet-file',
    join(dir, 'subnet.env'),
    '--iface',
    'eth0',
    '--ip-masq',
    '--node-name',
    'doc1',
  ];
  twill = lab.spawn(nodeNs, argv, join(dir, 'twill.log'));
  await waitFor(
    async () => (await inNode('ip', 'route', 'show', 'proto', '151')).includes('10.244.77.0/24'),
    { timeoutMs: 15_000, what: 'the peer route' },
  );
  subnetEnvText = await readFile(join(dir, 'subnet.env'), 'utf8');
  const gateway = /FLANNEL_SUBNET=(\S+)/.exec(subnetEnvText)?.[1] ?? '';
  // cni0 and one pod's host veth, as the CNI plugin makes them (MTU = FLANNEL_MTU = 1500 − 50)
  await inNode('ip', 'link', 'add', 'cni0', 'mtu', '1450', 'type', 'bridge');
  await inNode('ip', 'addr', 'add', gateway, 'dev', 'cni0');
  await inNode('ip', 'link', 'set', 'cni0', 'up');
  await inNode(
    'ip',
    'link',
    'add',
    'twvdoctor1',
    'mtu',
    '1450',
    'type',
    'veth',
    'peer',
    'name',
    'poddoctor1',
    'mtu',
    '1450',
  );
  await inNode('ip', 'link', 'set', 'twvdoctor1', 'master', 'cni0', 'up');
}, 60_000);

afterAll(async () => {
  if (twill) await stopProcess(twill);
  await etcd?.destroy();
  await lab.destroy();
  await rm(dir, { recursive: true, force: true });
});

function expectHealthy(r: Report): void {
  const allowed = hostHasBrNetfilter ? [] : ['br-netfilter: fail', 'bridge-nf-call-iptables: warn'];
  expect(notOk(r)).toEqual(allowed);
  expect(r.checks).toHaveLength(12);
  expect(r.code).toBe(allowed.length === 0 ? 0 : 1);
}

describe('twill doctor in a network namespace', () => {
  it('passes every check on a healthy node with twill running, and after twill stopped', async () => {
    const r = await doctor();
    expectHealthy(r);
    const detail = (check: string): string => r.checks.find((c) => c.check === check)?.detail ?? '';
    expect(detail('stale-routes')).toBe(
      "1 route with protocol 151, each explained by a peer's lease",
    );
    expect(detail('mtu')).toBe('consistent: eth0 1500, FLANNEL_MTU 1450, cni0 and pods 1450');
    expect(detail('subnet-env')).toMatch(
      /matches our lease 10\.244\.10\.0-24 \(PublicIP 10\.123\.0\.2\)/,
    );
    if (twill) await stopProcess(twill);
    expect(twill ? await exited(twill) : 0).toBe(0);
    twill = undefined;
    expectHealthy(await doctor());
  });

  it('with etcd unreachable, the store checks warn "skipped: lease store unreachable" and the rest still run', async () => {
    const started = Date.now();
    const r = await doctor(['--etcd-endpoints', 'http://10.123.0.1:2390']);
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(r.code).toBe(hostHasBrNetfilter ? 0 : 1);
    for (const check of ['subnet-env', 'stale-routes']) {
      expect(r.checks.find((c) => c.check === check)).toMatchObject({
        verdict: 'warn',
        detail: expect.stringContaining('lease store unreachable (etcd'),
      });
    }
    expect(r.checks.find((c) => c.check === 'mtu')?.verdict).toBe('ok');
  });

  const legacyInUse = async (): Promise<boolean> =>
    !(await run('iptables', ['--version'])).stdout.includes('nf_tables');
  const otherIptables = async (): Promise<string> =>
    (await legacyInUse()) ? 'iptables-nft' : 'iptables-legacy';
  const gatewayOf = (): string => /FLANNEL_SUBNET=(\S+)/.exec(subnetEnvText)?.[1] ?? '';

  const cases: {
    name: string;
    failing: string[];
    says: string;
    make: () => Promise<unknown>;
    undo: () => Promise<unknown>;
  }[] = [
    {
      name: 'ip_forward 0',
      failing: ['ip-forward'],
      says: 'net.ipv4.ip_forward is 0',
      make: () => inNode('sysctl', '-qw', 'net.ipv4.ip_forward=0'),
      undo: () => inNode('sysctl', '-qw', 'net.ipv4.ip_forward=1'),
    },
    // never skipped: where the host has no br_netfilter (the sysctl cannot be set to 0), that is
    // the broken condition
    hostHasBrNetfilter
      ? {
          name: 'bridge-nf-call-iptables 0 (per namespace on this kernel)',
          failing: ['bridge-nf-call-iptables'],
          says: 'bridge-nf-call-iptables is 0',
          make: () => inNode('sysctl', '-qw', 'net.bridge.bridge-nf-call-iptables=0'),
          undo: () => inNode('sysctl', '-qw', 'net.bridge.bridge-nf-call-iptables=1'),
        }
      : {
          name: 'br_netfilter not loaded (this host)',
          failing: ['br-netfilter'],
          says: 'br_netfilter is not loaded',
          make: async () => undefined,
          undo: async () => undefined,
        },
    {
      name: 'rp_filter strict on the underlay',
      failing: ['rp-filter'],
      says: 'eth0=1 (the underlay)',
      make: () => inNode('sysctl', '-qw', 'net.ipv4.conf.eth0.rp_filter=1'),
      undo: () => inNode('sysctl', '-qw', 'net.ipv4.conf.eth0.rp_filter=0'),
    },
    {
      name: 'rp_filter strict on all',
      failing: ['rp-filter'],
      says: 'all=1',
      make: () => inNode('sysctl', '-qw', 'net.ipv4.conf.all.rp_filter=1'),
      undo: () => inNode('sysctl', '-qw', 'net.ipv4.conf.all.rp_filter=0'),
    },
    {
      name: 'rules in the iptables backend not in use',
      failing: ['iptables-backend'],
      says: 'holds 1 rules',
      make: async () =>
        inNode(await otherIptables(), '-A', 'INPUT', '-s', '192.0.2.1/32', '-j', 'ACCEPT'),
      undo: async () =>
        inNode(await otherIptables(), '-D', 'INPUT', '-s', '192.0.2.1/32', '-j', 'ACCEPT'),
    },
    {
      name: 'an INPUT rule dropping the vxlan port',
      failing: ['vxlan-port'],
      says: '-A INPUT -p udp -m udp --dport 8472 -j DROP',
      make: () => inNode('iptables', '-A', 'INPUT', '-p', 'udp', '--dport', '8472', '-j', 'DROP'),
      undo: () => inNode('iptables', '-D', 'INPUT', '-p', 'udp', '--dport', '8472', '-j', 'DROP'),
    },
    {
      name: 'INPUT policy DROP with only established traffic accepted',
      failing: ['vxlan-port'],
      says: 'INPUT policy is DROP and no rule accepts UDP to port 8472',
      make: async () => {
        await inNode(
          'iptables',
          '-A',
          'INPUT',
          '-m',
          'conntrack',
          '--ctstate',
          'RELATED,ESTABLISHED',
          '-j',
          'ACCEPT',
        );
        await inNode('iptables', '-P', 'INPUT', 'DROP');
      },
      undo: async () => {
        await inNode('iptables', '-P', 'INPUT', 'ACCEPT');
        await inNode(
          'iptables',
          '-D',
          'INPUT',
          '-m',
          'conntrack',
          '--ctstate',
          'RELATED,ESTABLISHED',
          '-j',
          'ACCEPT',
        );
      },
    },
    {
      name: 'twill.1 MTU not underlay − 50',
      failing: ['mtu'],
      says: 'twill.1 has MTU 1400, expected 1450 (eth0 MTU 1500 − 50)',
      make: () => inNode('ip', 'link', 'set', 'twill.1', 'mtu', '1400'),
      undo: () => inNode('ip', 'link', 'set', 'twill.1', 'mtu', '1450'),
    },
    {
      name: 'a pod veth on cni0 above FLANNEL_MTU',
      failing: ['mtu'],
      says: 'twvdoctor2 has MTU 1500, above FLANNEL_MTU 1450',
      make: async () => {
        await inNode(
          'ip',
          'link',
          'add',
          'twvdoctor2',
          'mtu',
          '1500',
          'type',
          'veth',
          'peer',
          'name',
          'poddoctor2',
        );
        await inNode('ip', 'link', 'set', 'twvdoctor2', 'master', 'cni0', 'up');
        await inNode('ip', 'link', 'set', 'cni0', 'mtu', '1450');
      },
      undo: () => inNode('ip', 'link', 'del', 'twvdoctor2'),
    },
    {
      name: 'subnet.env naming another subnet than the lease',
      failing: ['subnet-env', 'cni0-subnet'],
      says: 'FLANNEL_SUBNET=10.244.250.1/24, but our lease (PublicIP 10.123.0.2) is',
      make: () =>
        writeFile(
          join(dir, 'subnet.env'),
          subnetEnvText.replace(/FLANNEL_SUBNET=\S+/, 'FLANNEL_SUBNET=10.244.250.1/24'),
        ),
      undo: () => writeFile(join(dir, 'subnet.env'), subnetEnvText),
    },
    {
      name: 'subnet.env missing',
      failing: ['subnet-env'],
      says: 'does not exist',
      make: () => rm(join(dir, 'subnet.env')),
      undo: () => writeFile(join(dir, 'subnet.env'), subnetEnvText),
    },
    {
      name: 'cni0 with an address from an old subnet',
      failing: ['cni0-subnet'],
      says: 'cni0 carries 10.244.251.1/24 from an old subnet',
      make: () => inNode('ip', 'addr', 'add', '10.244.251.1/24', 'dev', 'cni0'),
      undo: () => inNode('ip', 'addr', 'del', '10.244.251.1/24', 'dev', 'cni0'),
    },
    {
      name: 'a twill route no lease explains',
      failing: ['stale-routes'],
      says: '10.244.252.0/24 via 10.244.252.0 dev twill.1',
      make: () =>
        inNode(
          'ip',
          'route',
          'add',
          '10.244.252.0/24',
          'via',
          '10.244.252.0',
          'dev',
          'twill.1',
          'onlink',
          'proto',
          '151',
        ),
      undo: () => inNode('ip', 'route', 'del', '10.244.252.0/24', 'proto', '151'),
    },
    {
      name: 'a flannel.1 device',
      failing: ['foreign-overlay'],
      says: 'device flannel.1 (vxlan VNI 2 port 8472',
      make: () =>
        inNode(
          'ip',
          'link',
          'add',
          'flannel.1',
          'type',
          'vxlan',
          'id',
          '2',
          'dstport',
          '8472',
          'dev',
          'eth0',
        ),
      undo: () => inNode('ip', 'link', 'del', 'flannel.1'),
    },
    {
      name: 'FLANNEL-POSTRTG and FLANNEL-FWD chains',
      failing: ['foreign-overlay'],
      says: 'chain FLANNEL-POSTRTG in nat (1 rules, 1 jumps to it); chain FLANNEL-FWD in filter (0 rules, 0 jumps to it)',
      make: async () => {
        await inNode('iptables', '-t', 'nat', '-N', 'FLANNEL-POSTRTG');
        await inNode('iptables', '-t', 'nat', '-A', 'FLANNEL-POSTRTG', '-j', 'RETURN');
        await inNode('iptables', '-t', 'nat', '-A', 'POSTROUTING', '-j', 'FLANNEL-POSTRTG');
        await inNode('iptables', '-N', 'FLANNEL-FWD');
      },
      undo: async () => {
        await inNode('iptables', '-t', 'nat', '-D', 'POSTROUTING', '-j', 'FLANNEL-POSTRTG').catch(
          () => '',
        );
        await inNode('iptables', '-t', 'nat', '-F', 'FLANNEL-POSTRTG').catch(() => '');
        await inNode('iptables', '-t', 'nat', '-X', 'FLANNEL-POSTRTG').catch(() => '');
        await inNode('iptables', '-X', 'FLANNEL-FWD').catch(() => '');
      },
    },
    {
      name: 'a cni0 address outside our network',
      failing: ['foreign-overlay'],
      says: 'cni0 address 10.42.0.1/24 outside our network 10.244.0.0/16',
      make: () => inNode('ip', 'addr', 'add', '10.42.0.1/24', 'dev', 'cni0'),
      undo: () => inNode('ip', 'addr', 'del', '10.42.0.1/24', 'dev', 'cni0'),
    },
  ];

  for (const c of cases) {
    it(`names ${c.name} and exits 1`, async () => {
      expect(gatewayOf()).not.toBe('');
      let failed = true;
      try {
        await c.make();
        const r = await doctor();
        const brAllowed = hostHasBrNetfilter
          ? []
          : [
              'bridge-nf-call-iptables: warn',
              ...(c.failing.includes('br-netfilter') ? [] : ['br-netfilter: fail']),
            ];
        expect(notOk(r).filter((x) => !brAllowed.includes(x))).toEqual(
          c.failing.map((f) => `${f}: fail`),
        );
        const first = r.checks.find((x) => x.check === c.failing[0]);
        expect(first?.detail).toContain(c.says);
        expect(first?.fix).not.toBe('');
        expect(r.code).toBe(1);
        failed = false;
      } finally {
        // an undo that fails after make or an expectation failed must not hide that first failure
        await c.undo().catch((e: unknown) => {
          if (!failed) throw e;
        });
      }
    });
  }
});
