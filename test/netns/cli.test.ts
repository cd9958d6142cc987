// `twill run` as a new user runs it: a real process inside a network
// namespace, against a real etcd in another namespace on the same link.
// Lease and subnet.env within 5 s; same subnet after SIGKILL + restart; the
// key back within 2 s after `etcdctl del`; clean exit on SIGTERM without
// revoking; clear start-up errors for a missing or bad config, and for an
// IPv6-only one, which needs the Kubernetes store. Dual-stack:
// flannel's refusal to start without an IPv6 address, then the lease key and
// value and subnet.env with both families, --public-ipv6 in the lease; and a
// dual-stack lease in flannel's exact format, put by hand, routed in both
// families (twill.1 and twill-v6.1), and what twill status and twill doctor say of it.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEtcd, type EtcdServer } from '../../lab/kit/etcd.ts';
import { NetnsLab, sweepStaleNetns } from '../../lab/kit/netns.ts';
import { exited } from '../../lab/kit/process.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';

const MAIN = resolve(import.meta.dirname, '../../src/cli/main.ts');
const lab = new NetnsLab();
let etcd: EtcdServer;
let dir: string;
let etcdNs: string;
let nodeNs: string;

async function etcdctl(...args: string[]): Promise<string> {
  return lab.exec(etcdNs, 'etcdctl', ['--endpoints', etcd.endpoint, ...args]);
}

async function subnetKeys(prefix = '/coreos.com/network'): Promise<string[]> {
  return (await etcdctl('get', '--prefix', '--keys-only', `${prefix}/subnets/`))
    .split('\n')
    .filter(Boolean);
}

function startTwill(extra: string[], log = 'twill.log'): ReturnType<NetnsLab['spawn']> {
  const argv = [
    process.execPath,
    MAIN,
    'run',
    '--etcd-endpoints',
    etcd.endpoint,
    '--subnet-file',
    join(dir, 'subnet.env'),
    '--node-name',
    'n1',
    ...extra,
  ];
  return lab.spawn(nodeNs, argv, join(dir, log));
}

beforeAll(async () => {
  await sweepStaleNetns();
  dir = await mkdtemp(join(tmpdir(), 'twill-cli-'));
  etcdNs = await lab.add('etcd');
  nodeNs = await lab.add('n1');
  await lab.link(
    { ns: etcdNs, dev: 'eth0', cidr: '10.123.0.1/24' },
    { ns: nodeNs, dev: 'eth0', cidr: '10.123.0.2/24' },
  );
  await lab.exec(nodeNs, 'ip', ['route', 'add', 'default', 'via', '10.123.0.1']);
  etcd = await startEtcd({ netns: etcdNs, host: '10.123.0.1', clientPort: 2379 });
  await etcdctl(
    'put',
    '/coreos.com/network/config',
    '{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}',
  );
});

afterAll(async () => {
  await etcd?.destroy();
  await lab.destroy();
  await rm(dir, { recursive: true, force: true });
});

describe('twill run in a network namespace', () => {
  it('leases, keeps the subnet over SIGKILL, reclaims a deleted key, and stops cleanly', async () => {
    let twill = startTwill(['--iface', 'eth0']);
    const took = await waitFor(async () => (await subnetKeys()).length === 1, {
      timeoutMs: 5000,
      what: 'lease in etcd',
    });
    const [key] = await subnetKeys();
    expect(key).toMatch(/^\/coreos\.com\/network\/subnets\/10\.244\.\d+\.0-24$/);
    // flannel's lease JSON, plus the node's name (TwillNode, which flannel ignores)
    expect((await etcdctl('get', '--print-value-only', key as string)).trim()).toBe(
      '{"PublicIP":"10.123.0.2","PublicIPv6":null,"BackendType":"host-gw","TwillNode":"n1"}',
    );
    const third = (key as string).split('/').at(-1)?.split('.')[2];
    await waitFor(
      async () => (await readFile(join(dir, 'subnet.env'), 'utf8').catch(() => '')) !== '',
      { timeoutMs: 5000 - took, what: 'subnet.env' },
    );
    expect(await readFile(join(dir, 'subnet.env'), 'utf8')).toBe(
      `FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.${third}.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n`,
    );

    twill.kill('SIGKILL');
    await exited(twill);
    twill = startTwill([], 'twill-2.log'); // no --iface: the default route's interface
    await waitFor(
      async () => (await readFile(join(dir, 'twill-2.log'), 'utf8')).includes('lease acquired'),
      { timeoutMs: 5000, what: 'restart' },
    );
    expect(await subnetKeys()).toEqual([key]);

    await etcdctl('del', key as string);
    const back = await waitFor(async () => (await subnetKeys()).includes(key as string), {
      timeoutMs: slowBound(2_000),
      what: 'key reclaimed',
    });
    expect(back).toBeLessThan(slowBound(2_000));

    twill.kill('SIGTERM');
    expect(await exited(twill)).toBe(0);
    expect(await subnetKeys()).toEqual([key]);
    const log = await readFile(join(dir, 'twill-2.log'), 'utf8');
    expect(log).toContain('own lease reclaimed');
    expect(log).toContain('shutting down; the lease is kept');
  });

  it('exits 0 on --version and SIGTERM while still starting, 2 on an unknown flag', async () => {
    const version = lab.spawn(
      nodeNs,
      [process.execPath, MAIN, '--version'],
      join(dir, 'version.log'),
    );
    expect(await exited(version)).toBe(0);
    const bogus = lab.spawn(
      nodeNs,
      [process.execPath, MAIN, 'run', '--bogus'],
      join(dir, 'bogus.log'),
    );
    expect(await exited(bogus)).toBe(2);
    expect(await readFile(join(dir, 'bogus.log'), 'utf8')).toContain("unknown option '--bogus'");
    const unreachable = lab.spawn(
      nodeNs,
      [
        process.execPath,
        MAIN,
        'run',
        '--etcd-endpoints',
        'http://10.123.0.1:2390',
        '--subnet-file',
        join(dir, 'x.env'),
      ],
      join(dir, 'early.log'),
    );
    await waitFor(
      async () =>
        (await readFile(join(dir, 'early.log'), 'utf8')).includes('lease store unreachable'),
      { timeoutMs: 10_000, what: 'retrying' },
    );
    unreachable.kill('SIGTERM');
    expect(await exited(unreachable)).toBe(0);
  });

  it('stops with exit code 2 and an actionable message when the config is missing or bad', async () => {
    const missing = startTwill(['--etcd-prefix', '/nothing-here'], 'missing.log');
    expect(await exited(missing)).toBe(2);
    expect(await readFile(join(dir, 'missing.log'), 'utf8')).toContain(
      'no network config at /nothing-here/config; write net-conf.json there',
    );
    await etcdctl('put', '/bad/config', '{"Network":"10.244.0.0/16","SubnetLen":31}');
    const bad = startTwill(['--etcd-prefix', '/bad'], 'bad.log');
    expect(await exited(bad)).toBe(2);
    expect(await readFile(join(dir, 'bad.log'), 'utf8')).toContain(
      '/bad/config: net-conf.json: \\"SubnetLen\\" is 31; it must be 30 or less',
    );
    // IPv6 only is the Kubernetes store's (as flannel's): etcd refuses it before anything else
    await etcdctl(
      'put',
      '/v6only/config',
      '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}',
    );
    const v6only = startTwill(['--etcd-prefix', '/v6only'], 'v6only.log');
    expect(await exited(v6only)).toBe(2);
    const log = await readFile(join(dir, 'v6only.log'), 'utf8');
    expect(log).toContain('"code":"CONFIG_UNSUPPORTED"');
    expect(log).toContain('/v6only/config: IPv6-only');
    expect(log).toContain('needs the Kubernetes store: run twill with --kube-subnet-mgr');
    expect(await subnetKeys('/v6only')).toEqual([]);
  });

  it('dual-stack: refuses to start without an IPv6 address, then leases both families', async () => {
    await etcdctl(
      'put',
      '/dual/config',
      '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"}}',
    );
    const subnetFile = join(dir, 'dual-subnet.env');
    const dual = ['--etcd-prefix', '/dual', '--subnet-file', subnetFile];
    // like flannel: EnableIPv6 on a node whose interface has no global IPv6 address stops start-up
    const none = startTwill(dual, 'dual-none.log');
    expect(await exited(none)).toBe(2);
    expect(await readFile(join(dir, 'dual-none.log'), 'utf8')).toContain(
      'failed to find IPv6 address for interface eth0',
    );
    expect(await subnetKeys('/dual')).toEqual([]);

    await lab.exec(nodeNs, 'ip', ['addr', 'add', 'fd00:123::2/64', 'dev', 'eth0', 'nodad']);
    const twill = startTwill([...dual, '--public-ipv6', '2001:db8::2'], 'dual.log');
    await waitFor(async () => (await readFile(subnetFile, 'utf8').catch(() => '')) !== '', {
      timeoutMs: 5000,
      what: 'dual-stack subnet.env',
    });
    const [key] = await subnetKeys('/dual');
    const m = /\/dual\/subnets\/10\.244\.(\d+)\.0-24&fd00:10:244:([0-9a-f]+)::-64$/.exec(key ?? '');
    expect(m, `key ${key}`).not.toBeNull();
    const [, third, v6] = m ?? [];
    expect(await readFile(subnetFile, 'utf8')).toBe(
      `FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.${third}.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:${v6}::1/64\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n`,
    );
    expect(
      JSON.parse(await etcdctl('get', '--print-value-only', key as string)) as unknown,
    ).toMatchObject({ PublicIP: '10.123.0.2', PublicIPv6: '2001:db8::2', BackendType: 'host-gw' });
    await waitFor(
      async () => (await readFile(join(dir, 'dual.log'), 'utf8')).includes('lease acquired'),
      { timeoutMs: 5000, what: 'lease acquired log' },
    );
    const log = await readFile(join(dir, 'dual.log'), 'utf8');
    expect(log).toContain(`"subnet6":"fd00:10:244:${v6}::/64"`);
    twill.kill('SIGTERM');
    expect(await exited(twill)).toBe(0);
  });
  it('dual-stack: a lease flannel wrote (its fixture, put by hand) is routed in both families', async () => {
    const fixtures = JSON.parse(
      await readFile(resolve(import.meta.dirname, '../fixtures/flannel-leases.json'), 'utf8'),
    ) as { leases: { name: string; key: string; value: string }[] };
    const lease = fixtures.leases.find((l) => l.name.startsWith('dual-stack vxlan'));
    if (!lease) throw new Error('no dual-stack vxlan fixture');
    await etcdctl(
      'put',
      '/flannel6/config',
      '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}',
    );
    // the key and value exactly as flannel's etcd manager writes them
    await etcdctl('put', `/flannel6/subnets/${lease.key}`, lease.value);
    await lab.exec(nodeNs, 'ip', ['addr', 'replace', 'fd00:123::2/64', 'dev', 'eth0', 'nodad']);
    const subnetFile = join(dir, 'flannel6-subnet.env');
    const twill = startTwill(
      ['--etcd-prefix', '/flannel6', '--subnet-file', subnetFile],
      'flannel6.log',
    );
    const sh = (args: string[]): Promise<string> => lab.exec(nodeNs, args[0] ?? '', args.slice(1));
    // the fixture: 10.244.5.0/24 & fd00:10:244:5::/64 at 192.168.56.13 / fd00:56::13, VtepMACs
    // 7e:1b:4f:9a:2c:03 (twill.1) and 9a:41:e0:11:6b:03 (twill-v6.1)
    await waitFor(
      async () =>
        (await sh(['ip', '-6', 'route', 'show', 'fd00:10:244:5::/64']).catch(() => '')) !== '',
      { timeoutMs: slowBound(5000), what: "the flannel lease's IPv6 route" },
    );
    expect(await sh(['ip', '-6', 'route', 'show', 'fd00:10:244:5::/64'])).toContain(
      'via fd00:10:244:5:: dev twill-v6.1 proto 151',
    );
    expect(await sh(['ip', '-6', 'neigh', 'show', 'fd00:10:244:5::', 'dev', 'twill-v6.1'])).toMatch(
      /lladdr 9a:41:e0:11:6b:03 PERMANENT/,
    );
    expect(await sh(['bridge', 'fdb', 'show', 'dev', 'twill-v6.1'])).toContain(
      '9a:41:e0:11:6b:03 dst fd00:56::13 self permanent',
    );
    expect(await sh(['ip', 'route', 'show', '10.244.5.0/24'])).toContain(
      'via 10.244.5.0 dev twill.1 proto 151 metric 717829 onlink',
    );
    expect(await sh(['bridge', 'fdb', 'show', 'dev', 'twill.1'])).toContain(
      '7e:1b:4f:9a:2c:03 dst 192.168.56.13 self permanent',
    );
    // what an operator asks next, with the node's own flags: both families, nothing missing
    const flags = ['--etcd-endpoints', etcd.endpoint, '--etcd-prefix', '/flannel6'];
    const cmd = (verb: string): Promise<string> =>
      lab.exec(nodeNs, process.execPath, [
        MAIN,
        verb,
        ...flags,
        '--subnet-file',
        subnetFile,
        '--json',
      ]);
    const status = JSON.parse(await cmd('status')) as {
      lease: { subnet6?: string };
      peers: { subnet: string; subnet6?: string; kernel: string; kernel6?: string }[];
      masquerade6: unknown;
    };
    expect(status.lease.subnet6).toMatch(/^fd00:10:244:[0-9a-f]+::\/64$/);
    expect(status.peers).toMatchObject([
      { subnet: '10.244.5.0/24', subnet6: 'fd00:10:244:5::/64', kernel: 'ok', kernel6: 'ok' },
    ]);
    expect(status.masquerade6).not.toBeNull();
    // doctor exits 1 here for checks of this bare namespace (br_netfilter, cni0…): read its JSON
    const doctor = JSON.parse(
      await lab
        .exec(nodeNs, 'sh', [
          '-c',
          `"$@"; exit 0`,
          'sh',
          process.execPath,
          MAIN,
          'doctor',
          ...flags,
          '--subnet-file',
          subnetFile,
          '--json',
        ])
        .catch((err: { stdout?: string }) => err.stdout ?? ''),
    ) as { checks: { check: string; verdict: string }[] };
    const verdict = (c: string): string | undefined =>
      doctor.checks.find((d) => d.check === c)?.verdict;
    expect(verdict('ipv6-forward'), JSON.stringify(doctor.checks)).toBe('ok');
    expect(verdict('vxlan6-device'), JSON.stringify(doctor.checks)).toBe('ok');
    expect(verdict('stale-routes'), JSON.stringify(doctor.checks)).toBe('ok');
    twill.kill('SIGTERM');
    expect(await exited(twill)).toBe(0);
  });
});
