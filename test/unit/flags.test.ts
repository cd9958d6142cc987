// Unit tests of `twill run` flags: defaults, command line, TWILL_* environment
// fallback (the command line wins), FLAG_INVALID errors naming the flag, and
// every RUN_FLAGS entry reaching `twill run --help`, the command line and its
// variable.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve as resolvePath } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCommandLine } from '../../src/cli/argv.ts';
import {
  envName,
  resolveRunFlags,
  RUN_FLAGS,
  runFlagOptions,
  type RunFlags,
} from '../../src/cli/flags.ts';
import { TwillError } from '../../src/errors.ts';

function resolve(
  argv: string[],
  env: NodeJS.ProcessEnv = {},
  o: { run: boolean } = { run: true },
): RunFlags {
  const name = o.run ? 'run' : 'status';
  const program = {
    name: 'twill',
    description: '',
    commands: [{ name, description: '', options: runFlagOptions(o) }],
  };
  const outcome = parseCommandLine(program, [name, ...argv]);
  if (outcome.kind !== 'command') throw new Error(`${outcome.kind}: ${JSON.stringify(outcome)}`);
  return resolveRunFlags(outcome.given, env);
}

function failure(argv: string[], env: NodeJS.ProcessEnv = {}): TwillError {
  try {
    resolve(argv, env);
  } catch (err) {
    if (err instanceof TwillError) return err;
    throw err;
  }
  throw new Error(`expected an error for ${JSON.stringify(argv)} ${JSON.stringify(env)}`);
}

describe('resolveRunFlags: defaults', () => {
  it("gives flannel's defaults with no flags and no environment", () => {
    expect(resolve([])).toStrictEqual({
      etcdEndpoints: ['http://127.0.0.1:2379'],
      etcdPrefix: '/coreos.com/network',
      etcdCafile: undefined,
      etcdCertfile: undefined,
      etcdKeyfile: undefined,
      etcdUsername: undefined,
      etcdPassword: undefined,
      etcdPasswordFile: undefined,
      etcdAllowInsecurePassword: false,
      iface: [],
      ifaceRegex: [],
      publicIp: undefined,
      publicIpv6: undefined,
      subnetFile: '/run/twill/subnet.env',
      subnetLeaseRenewMargin: 60,
      ipMasq: false,
      iptablesResync: 60,
      cniBridge: 'cni0',
      procSysNet: '/proc/sys/net',
      healthzIp: '0.0.0.0',
      healthzPort: 0,
      nodeName: undefined,
      logLevel: 'info',
      cleanup: false,
      kubeSubnetMgr: false,
      kubeconfigFile: undefined,
      kubeApiUrl: undefined,
      kubeAnnotationPrefix: 'flannel.alpha.coreos.com',
      netConfigPath: '/etc/kube-flannel/net-conf.json',
    });
  });

  it('ignores environment variables that are not its own', () => {
    expect(
      resolve([], { ETCD_ENDPOINTS: 'http://a:1', FLANNELD_IFACE: 'eth1' }).etcdEndpoints,
    ).toStrictEqual(['http://127.0.0.1:2379']);
  });
});

describe('resolveRunFlags: command line', () => {
  it('splits a comma list of endpoints', () => {
    const flags = resolve(['--etcd-endpoints', 'http://10.0.0.1:2379,https://10.0.0.2:2379']);
    expect(flags.etcdEndpoints).toStrictEqual(['http://10.0.0.1:2379', 'https://10.0.0.2:2379']);
  });

  it('repeats --iface and --iface-regex in order', () => {
    const flags = resolve([
      '--iface',
      'eth1',
      '--iface',
      '192.0.2.2',
      '--iface-regex',
      '^10\\.',
      '--iface-regex',
      'en.*',
    ]);
    expect(flags.iface).toStrictEqual(['eth1', '192.0.2.2']);
    expect(flags.ifaceRegex).toStrictEqual(['^10\\.', 'en.*']);
  });

  it('parses ints, booleans and strings', () => {
    const flags = resolve([
      '--ip-masq',
      '--kube-subnet-mgr',
      '--healthz-port',
      '8471',
      '--iptables-resync',
      '30',
      '--subnet-lease-renew-margin',
      '120',
      '--public-ip',
      '203.0.113.7',
      '--log-level',
      'debug',
      '--etcd-prefix',
      '/twill/network',
      '--node-name',
      'node-a',
    ]);
    expect(flags).toMatchObject({
      ipMasq: true,
      kubeSubnetMgr: true,
      healthzPort: 8471,
      iptablesResync: 30,
      subnetLeaseRenewMargin: 120,
      publicIp: '203.0.113.7',
      logLevel: 'debug',
      etcdPrefix: '/twill/network',
      nodeName: 'node-a',
    });
  });
});

describe('run-only flags (--cleanup)', () => {
  const runOnly = RUN_FLAGS.filter((f) => f.runOnly);

  it('are there (this file tests them)', () => {
    expect(runOnly.map((f) => f.name)).toStrictEqual(['cleanup']);
  });

  it('are refused by twill status and twill doctor, not ignored', () => {
    for (const f of runOnly) expect(() => resolve([`--${f.name}`], {}, { run: false })).toThrow();
    expect(resolve(['--cleanup']).cleanup).toBe(true);
  });

  it('resolve to their default where they are not declared; the other flags still work', () => {
    const flags = resolve(['--ip-masq'], { TWILL_CLEANUP: 'true' }, { run: false });
    expect(flags.cleanup).toBe(false);
    expect(flags.ipMasq).toBe(true);
  });

  it("are not in twill status's or twill doctor's --help", async () => {
    const main = resolvePath(import.meta.dirname, '../../src/cli/main.ts');
    for (const command of ['status', 'doctor']) {
      const help = (await promisify(execFile)(process.execPath, [main, command, '--help'])).stdout;
      expect(help).toContain('--ip-masq');
      for (const f of runOnly) expect(help).not.toContain(`--${f.name}`);
    }
  });
});

describe('resolveRunFlags: environment', () => {
  it('reads TWILL_ETCD_ENDPOINTS as a comma list', () => {
    const flags = resolve([], { TWILL_ETCD_ENDPOINTS: 'http://a:2379, http://b:2379' });
    expect(flags.etcdEndpoints).toStrictEqual(['http://a:2379', 'http://b:2379']);
  });

  it('reads TWILL_IFACE as a comma list', () => {
    expect(resolve([], { TWILL_IFACE: 'eth1,192.0.2.2' }).iface).toStrictEqual([
      'eth1',
      '192.0.2.2',
    ]);
  });

  it.each([
    ['false', false],
    ['true', true],
    ['1', true],
    ['0', false],
  ])('TWILL_IP_MASQ=%s gives %s', (value, expected) => {
    expect(resolve([], { TWILL_IP_MASQ: value }).ipMasq).toBe(expected);
  });

  it('reads ints and strings', () => {
    const flags = resolve([], {
      TWILL_HEALTHZ_PORT: '8471',
      TWILL_SUBNET_FILE: '/tmp/x.env',
      TWILL_PUBLIC_IP: '198.51.100.4',
    });
    expect(flags).toMatchObject({
      healthzPort: 8471,
      subnetFile: '/tmp/x.env',
      publicIp: '198.51.100.4',
    });
  });

  it('lets the command line win over the environment', () => {
    const flags = resolve(
      ['--etcd-endpoints', 'http://cli:2379', '--iface', 'eth2', '--healthz-port', '1'],
      {
        TWILL_ETCD_ENDPOINTS: 'http://env:2379',
        TWILL_IFACE: 'eth1',
        TWILL_HEALTHZ_PORT: '2',
      },
    );
    expect(flags.etcdEndpoints).toStrictEqual(['http://cli:2379']);
    expect(flags.iface).toStrictEqual(['eth2']);
    expect(flags.healthzPort).toBe(1);
  });

  it('takes --cni-bridge, or TWILL_CNI_BRIDGE, and refuses what is not an interface name', () => {
    expect(resolve(['--cni-bridge=br0']).cniBridge).toBe('br0');
    expect(resolve([], { TWILL_CNI_BRIDGE: 'kube-bridge' }).cniBridge).toBe('kube-bridge');
    for (const bad of ['', 'a/b', 'sixteen-chars-xx', 'two words', '..'])
      expect(() => resolve([`--cni-bridge=${bad}`]), bad).toThrow(/--cni-bridge/);
  });

  it("takes --proc-sys-net, or TWILL_PROC_SYS_NET (a DaemonSet mounts the host's /proc/sys/net elsewhere)", () => {
    expect(resolve(['--proc-sys-net=/host/proc/sys/net']).procSysNet).toBe('/host/proc/sys/net');
    expect(resolve([], { TWILL_PROC_SYS_NET: '/host/proc/sys/net' }).procSysNet).toBe(
      '/host/proc/sys/net',
    );
  });

  it('lets --ip-masq win over TWILL_IP_MASQ=false', () => {
    expect(resolve(['--ip-masq'], { TWILL_IP_MASQ: 'false' }).ipMasq).toBe(true);
  });
});

describe('resolveRunFlags: bad values', () => {
  it.each([
    ['--healthz-port abc', ['--healthz-port', 'abc'], {}, '--healthz-port', 'abc'],
    ['--healthz-port -1', ['--healthz-port=-1'], {}, '--healthz-port', '-1'],
    ['--healthz-port 65536', ['--healthz-port', '65536'], {}, '--healthz-port', '65536'],
    ['--iptables-resync 0', ['--iptables-resync', '0'], {}, '--iptables-resync', '0'],
    [
      '--subnet-lease-renew-margin 1.5',
      ['--subnet-lease-renew-margin', '1.5'],
      {},
      '--subnet-lease-renew-margin',
      '1.5',
    ],
    ['--public-ip 1.2.3', ['--public-ip', '1.2.3'], {}, '--public-ip', '1.2.3'],
    ['--public-ipv6 IPv4', ['--public-ipv6', '192.0.2.9'], {}, '--public-ipv6', 'not an IPv6'],
    ['--public-ipv6 zone', ['--public-ipv6', 'fe80::1%eth0'], {}, '--public-ipv6', 'fe80::1%eth0'],
    ['--public-ipv6 link-local', ['--public-ipv6', 'fe80::1'], {}, '--public-ipv6', 'unicast'],
    ['TWILL_PUBLIC_IPV6 loopback', [], { TWILL_PUBLIC_IPV6: '::1' }, '--public-ipv6', 'unicast'],
    ['--public-ipv6 multicast', ['--public-ipv6', 'ff02::1'], {}, '--public-ipv6', 'ff02::1'],
    ['--healthz-ip localhost', ['--healthz-ip', 'localhost'], {}, '--healthz-ip', 'localhost'],
    ['--log-level loud', ['--log-level', 'loud'], {}, '--log-level', 'loud'],
    ['TWILL_IP_MASQ=maybe', [], { TWILL_IP_MASQ: 'maybe' }, '--ip-masq', 'maybe'],
    ['TWILL_HEALTHZ_PORT=http', [], { TWILL_HEALTHZ_PORT: 'http' }, '--healthz-port', 'http'],
    [
      '--etcd-endpoints ftp://x',
      ['--etcd-endpoints', 'ftp://x'],
      {},
      '--etcd-endpoints',
      'ftp://x',
    ],
    [
      '--etcd-endpoints without scheme',
      ['--etcd-endpoints', 'http://a:2379,10.0.0.2:2379'],
      {},
      '--etcd-endpoints',
      '10.0.0.2:2379',
    ],
    [
      '--etcd-endpoints with a path',
      ['--etcd-endpoints', 'http://a:2379/v3'],
      {},
      '--etcd-endpoints',
      'http://a:2379/v3',
    ],
    [
      'TWILL_ETCD_ENDPOINTS empty',
      [],
      { TWILL_ETCD_ENDPOINTS: ' , ' },
      '--etcd-endpoints',
      'at least one',
    ],
    [
      '--etcd-prefix relative',
      ['--etcd-prefix', 'coreos.com/network'],
      {},
      '--etcd-prefix',
      'coreos.com/network',
    ],
    ['--iface-regex (', ['--iface-regex', '('], {}, '--iface-regex', '('],
    [
      '--proc-sys-net relative',
      ['--proc-sys-net', 'host/proc/sys/net'],
      {},
      '--proc-sys-net',
      'host/proc/sys/net',
    ],
    [
      '--kube-api-url without scheme',
      ['--kube-api-url', '10.0.0.1:6443'],
      {},
      '--kube-api-url',
      '10.0.0.1:6443',
    ],
    [
      '--kube-api-url with a path',
      ['--kube-api-url', 'https://api:6443/x'],
      {},
      '--kube-api-url',
      'https://api:6443/x',
    ],
    [
      '--kube-annotation-prefix with a slash',
      ['--kube-annotation-prefix', 'a.io/b'],
      {},
      '--kube-annotation-prefix',
      'a.io/b',
    ],
    [
      '--kube-annotation-prefix with an empty label',
      ['--kube-annotation-prefix', 'a..b'],
      {},
      '--kube-annotation-prefix',
      'a..b',
    ],
    [
      '--kube-annotation-prefix with a dash at a label edge',
      ['--kube-annotation-prefix', 'a-.b'],
      {},
      '--kube-annotation-prefix',
      'a-.b',
    ],
    [
      '--kube-api-url over plain http',
      ['--kube-api-url', 'http://api:8080'],
      {},
      '--kube-api-url',
      'http://api:8080',
    ],
  ])('%s', (_name, argv: string[], env: NodeJS.ProcessEnv, flag, value) => {
    const err = failure(argv, env);
    expect(err.code).toBe('FLAG_INVALID');
    expect(err.message).toContain(flag);
    expect(err.message).toContain(value);
  });

  it('names the flag first, then the value in quotes', () => {
    expect(failure(['--log-level', 'loud']).message).toMatch(/^--log-level "loud": /);
  });

  it('refuses an unknown option on the command line', () => {
    expect(() => resolve(['--no-such-flag'])).toThrow(/no-such-flag/);
  });
});

describe('envName', () => {
  it.each([
    ['etcd-endpoints', 'TWILL_ETCD_ENDPOINTS'],
    ['ip-masq', 'TWILL_IP_MASQ'],
    ['subnet-lease-renew-margin', 'TWILL_SUBNET_LEASE_RENEW_MARGIN'],
    ['iface', 'TWILL_IFACE'],
  ])('%s is %s', (flag, name) => {
    expect(envName(flag)).toBe(name);
  });
});

describe('resolveRunFlags: etcd credentials', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'twill-flags-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const file = async (name: string, text: string): Promise<string> => {
    const path = join(dir, name);
    await writeFile(path, text);
    return path;
  };
  const https = ['--etcd-endpoints', 'https://10.0.0.1:2379'];

  it('reads --etcd-password-file, dropping one trailing newline (TWILL_ETCD_PASSWORD_FILE too)', async () => {
    const path = await file('pw', 's3cret pass\n\n');
    expect(resolve([...https, '--etcd-password-file', path]).etcdPassword).toBe('s3cret pass\n');
    const crlf = await file('pw-crlf', 'from-env\r\n');
    expect(resolve(https, { TWILL_ETCD_PASSWORD_FILE: crlf })).toMatchObject({
      etcdPassword: 'from-env',
      etcdPasswordFile: crlf,
    });
    expect(
      resolve([...https, '--etcd-password-file', await file('pw-bare', 'bare')]).etcdPassword,
    ).toBe('bare');
  });

  it('refuses --etcd-password together with --etcd-password-file, an unreadable file and an empty one', async () => {
    const path = await file('pw2', 'secret-two\n');
    const both = failure([...https, '--etcd-password', 'secret-one', '--etcd-password-file', path]);
    expect(both.code).toBe('FLAG_INVALID');
    expect(both.message).toMatch(
      /^--etcd-password and --etcd-password-file: give the etcd password one way only/,
    );
    expect(both.message).not.toContain('secret-');
    expect(
      failure(https, { TWILL_ETCD_PASSWORD: 'secret-one', TWILL_ETCD_PASSWORD_FILE: path }).message,
    ).toContain('one way only');
    expect(failure([...https, '--etcd-password-file', join(dir, 'absent')]).message).toBe(
      `--etcd-password-file ${JSON.stringify(join(dir, 'absent'))}: cannot be read (ENOENT)`,
    );
    expect(
      failure([...https, '--etcd-password-file', await file('empty', '\n')]).message,
    ).toContain('is empty');
  });

  it('refuses a password over http:// unless --etcd-allow-insecure-password (or its env twin) is given', async () => {
    const path = await file('pw3', 'hunter22\n');
    for (const argv of [
      ['--etcd-password', 'hunter22'],
      ['--etcd-password-file', path],
      ['--etcd-endpoints', 'http://root:hunter22@10.0.0.1:2379'],
    ]) {
      const err = failure(argv);
      expect(err.code).toBe('FLAG_INVALID');
      expect(err.message).toContain('refusing to send the etcd password over plain http');
      expect(err.message).toContain('--etcd-allow-insecure-password');
      expect(err.message).not.toContain('hunter22');
      expect(resolve([...argv, '--etcd-allow-insecure-password']).etcdPassword).toBe('hunter22');
      expect(resolve(argv, { TWILL_ETCD_ALLOW_INSECURE_PASSWORD: 'true' }).etcdPassword).toBe(
        'hunter22',
      );
    }
    expect(resolve([...https, '--etcd-password', 'hunter22']).etcdPassword).toBe('hunter22');
    // a user alone sends no password
    expect(resolve(['--etcd-username', 'root']).etcdUsername).toBe('root');
  });

  it('takes user:password@ out of the endpoint URLs, %-decoded', () => {
    const flags = resolve([
      '--etcd-endpoints',
      'https://root:p%40ss@10.0.0.1:2379,https://root:p%40ss@10.0.0.2:2379',
    ]);
    expect(flags).toMatchObject({
      etcdEndpoints: ['https://10.0.0.1:2379', 'https://10.0.0.2:2379'],
      etcdUsername: 'root',
      etcdPassword: 'p@ss',
    });
    expect(
      resolve(['--etcd-endpoints', 'https://root@10.0.0.1:2379', '--etcd-password', 'pw']),
    ).toMatchObject({
      etcdEndpoints: ['https://10.0.0.1:2379'],
      etcdUsername: 'root',
      etcdPassword: 'pw',
    });
  });

  it('never echoes a password from an endpoint URL in an error', () => {
    for (const argv of [
      ['--etcd-endpoints', 'http://root:hunter22@10.0.0.1:2379/v3'],
      ['--etcd-endpoints', 'ftp://root:hunter22@10.0.0.1:2379'],
      ['--etcd-endpoints', 'https://root:hunter22@a:1,https://root:other22@b:1'],
      ['--etcd-endpoints', 'https://root:hunter22@a:1', '--etcd-password', 'x'],
    ]) {
      const err = failure(argv);
      expect(err.code).toBe('FLAG_INVALID');
      expect(err.message).not.toContain('hunter22');
      expect(err.message).not.toContain('other22');
    }
    expect(failure(['--etcd-endpoints', 'ftp://root:hunter22@10.0.0.1:2379']).message).toContain(
      'root:***@',
    );
  });

  it('refuses a client certificate without its key, and a key without its certificate', () => {
    expect(failure(['--etcd-certfile', '/c.pem']).message).toContain(
      '--etcd-certfile and --etcd-keyfile: give both',
    );
    expect(failure(['--etcd-keyfile', '/k.pem']).message).toContain('give both');
  });
});

interface Sample {
  readonly text: string;
  readonly value: unknown;
  readonly with?: NodeJS.ProcessEnv;
}

describe('RUN_FLAGS: each entry is an option of `twill run` and a TWILL_ variable', () => {
  // Per flag, a value other than its default (as text) and what it resolves to; `with` holds
  // what the value needs from other flags (a password needs https://, a certificate its key).
  const https = { TWILL_ETCD_ENDPOINTS: 'https://10.9.0.1:2379' };
  let dir = '';
  const samples = (): Record<string, Sample> => ({
    'etcd-endpoints': { text: 'http://10.9.0.1:2379', value: ['http://10.9.0.1:2379'] },
    'etcd-prefix': { text: '/twill/network', value: '/twill/network' },
    'etcd-cafile': { text: '/etc/twill/ca.pem', value: '/etc/twill/ca.pem' },
    'etcd-certfile': {
      text: '/etc/twill/c.pem',
      value: '/etc/twill/c.pem',
      with: { TWILL_ETCD_KEYFILE: '/etc/twill/k.pem' },
    },
    'etcd-keyfile': {
      text: '/etc/twill/k.pem',
      value: '/etc/twill/k.pem',
      with: { TWILL_ETCD_CERTFILE: '/etc/twill/c.pem' },
    },
    'etcd-username': { text: 'root', value: 'root' },
    'etcd-password': { text: 'hunter22', value: 'hunter22', with: https },
    'etcd-password-file': { text: join(dir, 'pw'), value: join(dir, 'pw'), with: https },
    'etcd-allow-insecure-password': { text: 'true', value: true },
    iface: { text: 'eth7', value: ['eth7'] },
    'iface-regex': { text: '^10\\.', value: ['^10\\.'] },
    'public-ip': { text: '198.51.100.9', value: '198.51.100.9' },
    'public-ipv6': { text: '2001:db8::9', value: '2001:db8::9' },
    'subnet-file': { text: '/tmp/twill-subnet.env', value: '/tmp/twill-subnet.env' },
    'subnet-lease-renew-margin': { text: '90', value: 90 },
    'ip-masq': { text: 'true', value: true },
    'iptables-resync': { text: '30', value: 30 },
    'proc-sys-net': { text: '/host/proc/sys/net', value: '/host/proc/sys/net' },
    'cni-bridge': { text: 'br-pods', value: 'br-pods' },
    'healthz-ip': { text: '127.0.0.1', value: '127.0.0.1' },
    'healthz-port': { text: '8471', value: 8471 },
    'node-name': { text: 'node-q', value: 'node-q' },
    'log-level': { text: 'debug', value: 'debug' },
    cleanup: { text: 'true', value: true },
    'kube-subnet-mgr': { text: 'true', value: true },
    'kubeconfig-file': { text: '/etc/twill/kubeconfig', value: '/etc/twill/kubeconfig' },
    'kube-api-url': { text: 'https://10.9.0.1:6443', value: 'https://10.9.0.1:6443' },
    'kube-annotation-prefix': { text: 'twill.example.com', value: 'twill.example.com' },
    'net-config-path': { text: '/etc/twill/net-conf.json', value: '/etc/twill/net-conf.json' },
  });
  let help = '';
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'twill-flags-table-'));
    await writeFile(join(dir, 'pw'), 'from-file\n');
    const main = resolvePath(import.meta.dirname, '../../src/cli/main.ts');
    help = (await promisify(execFile)(process.execPath, [main, 'run', '--help'])).stdout;
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const key = (flag: string): string =>
    flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

  it('has a sample for every flag (a new flag needs one here)', () => {
    expect(Object.keys(samples()).sort()).toStrictEqual(RUN_FLAGS.map((f) => f.name).sort());
  });

  it.each(RUN_FLAGS.map((f) => [f.name, f] as const))('--%s', (name, f) => {
    const sample = samples()[name];
    if (sample === undefined) throw new Error(`no sample for --${name}`);
    const base = sample.with ?? {};
    const field = key(name) as keyof RunFlags;
    expect(resolve([])[field]).not.toStrictEqual(sample.value);
    // a command-line-only flag ignores its would-be variable
    expect(resolve([], { ...base, [envName(name)]: sample.text })[field]).toStrictEqual(
      f.commandLineOnly ? resolve([])[field] : sample.value,
    );
    const argv = f.kind === 'bool' ? [`--${name}`] : [`--${name}`, sample.text];
    expect(resolve(argv, base)[field]).toStrictEqual(sample.value);

    const syntax = f.kind === 'bool' ? `--${name}` : `--${name} <${f.arg ?? 'value'}>`;
    const line = help.split('\n').find((l) => l.trimStart().startsWith(`${syntax} `));
    expect(line, `twill run --help lists ${syntax}`).toBeDefined();
    expect(line).toContain(f.commandLineOnly ? '(command line only)' : `(env: ${envName(name)}`);
    if (f.default !== undefined) expect(line).toContain(`(default: ${JSON.stringify(f.default)})`);
    else if (f.defaultText !== undefined) expect(line).toContain(`(default: ${f.defaultText})`);
  });
});
