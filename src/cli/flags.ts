// The flags of `twill run` (flannel's names and meanings) in one table. Each
// flag can also come from TWILL_<FLAG_NAME>; the command line wins over the
// environment, which wins over the default. Values are parsed strictly here,
// and a bad one is a FLAG_INVALID error naming the flag and the value.
import { readFileSync } from 'node:fs';
import { Option, type Command } from 'commander';
import { PROC_SYS_NET } from '../dataplane/sysctl.ts';
import { TwillError } from '../errors.ts';
import { LOG_LEVELS, redactUrlCredentials, type LogLevel } from '../log.ts';
import { isIpv4 } from '../net/ipv4.ts';

type Kind = 'string' | 'list' | 'repeat' | 'bool' | 'int';

interface FlagSpec {
  readonly name: string;
  readonly kind: Kind;
  readonly arg?: string;
  readonly help: string;
  readonly default?: string;
}

export const RUN_FLAGS: readonly FlagSpec[] = [
  {
    name: 'etcd-endpoints',
    kind: 'list',
    arg: 'urls',
    help: 'comma-separated etcd endpoints',
    default: 'http://127.0.0.1:2379',
  },
  {
    name: 'etcd-prefix',
    kind: 'string',
    arg: 'path',
    help: 'etcd key prefix of the network config and leases',
    default: '/coreos.com/network',
  },
  { name: 'etcd-cafile', kind: 'string', arg: 'file', help: 'CA certificate for etcd TLS' },
  { name: 'etcd-certfile', kind: 'string', arg: 'file', help: 'client certificate for etcd TLS' },
  { name: 'etcd-keyfile', kind: 'string', arg: 'file', help: 'client key for etcd TLS' },
  { name: 'etcd-username', kind: 'string', arg: 'name', help: 'etcd user name' },
  {
    name: 'etcd-password',
    kind: 'string',
    arg: 'password',
    help: 'etcd password (visible in ps and the process environment: prefer --etcd-password-file)',
  },
  {
    name: 'etcd-password-file',
    kind: 'string',
    arg: 'file',
    help: 'file holding the etcd password (one trailing newline is dropped); instead of --etcd-password',
  },
  {
    name: 'etcd-allow-insecure-password',
    kind: 'bool',
    help: 'allow sending the etcd password to http:// endpoints, in clear text (refused by default)',
  },
  {
    name: 'iface',
    kind: 'repeat',
    arg: 'name|ip',
    help: 'interface (name or address) for the underlay; repeatable, first found wins',
  },
  {
    name: 'iface-regex',
    kind: 'repeat',
    arg: 'regex',
    help: 'regex over interface addresses, then names; repeatable',
  },
  {
    name: 'public-ip',
    kind: 'string',
    arg: 'ip',
    help: 'IPv4 address peers reach this node at (default: the interface address)',
  },
  {
    name: 'subnet-file',
    kind: 'string',
    arg: 'path',
    help: 'where to write subnet.env',
    default: '/run/twill/subnet.env',
  },
  {
    name: 'subnet-lease-renew-margin',
    kind: 'int',
    arg: 'minutes',
    help: 'renew the lease this many minutes before it expires',
    default: '60',
  },
  {
    name: 'ip-masq',
    kind: 'bool',
    help: 'masquerade traffic leaving the pod network (FLANNEL_IPMASQ)',
  },
  {
    name: 'iptables-resync',
    kind: 'int',
    arg: 'seconds',
    help: 'period of the full safety-net dataplane pass (routes, neighbours, FDB, chains), ±10 %; kernel monitors repair drift at once',
    default: '60',
  },
  {
    name: 'proc-sys-net',
    kind: 'string',
    arg: 'dir',
    help: "the node network namespace's /proc/sys/net, where twill sets ip_forward and reads the bridge and rp_filter sysctls (a container that is not privileged has a read-only /proc/sys: mount the host's /proc/sys/net and name the mount here)",
    default: PROC_SYS_NET,
  },
  {
    name: 'healthz-ip',
    kind: 'string',
    arg: 'ip',
    help: 'address of the health endpoint',
    default: '0.0.0.0',
  },
  {
    name: 'healthz-port',
    kind: 'int',
    arg: 'port',
    help: 'port of the health endpoint (0: disabled)',
    default: '0',
  },
  {
    name: 'node-name',
    kind: 'string',
    arg: 'name',
    help: "this node's name (default: $NODE_NAME, then the host name)",
  },
  {
    name: 'log-level',
    kind: 'string',
    arg: 'level',
    help: `one of ${LOG_LEVELS.join(', ')}`,
    default: 'info',
  },
  {
    name: 'kube-subnet-mgr',
    kind: 'bool',
    help: 'take the subnet from the Kubernetes API instead of etcd',
  },
  {
    name: 'kubeconfig-file',
    kind: 'string',
    arg: 'file',
    help: 'kubeconfig for --kube-subnet-mgr (default: in-cluster config)',
  },
  {
    name: 'kube-api-url',
    kind: 'string',
    arg: 'url',
    help: 'Kubernetes API server URL for --kube-subnet-mgr',
  },
  {
    name: 'kube-annotation-prefix',
    kind: 'string',
    arg: 'prefix',
    help: 'prefix of the node annotations',
    default: 'flannel.alpha.coreos.com',
  },
  {
    name: 'net-config-path',
    kind: 'string',
    arg: 'file',
    help: 'net-conf.json for --kube-subnet-mgr',
    default: '/etc/kube-flannel/net-conf.json',
  },
];

export interface RunFlags {
  readonly etcdEndpoints: string[];
  readonly etcdPrefix: string;
  readonly etcdCafile: string | undefined;
  readonly etcdCertfile: string | undefined;
  readonly etcdKeyfile: string | undefined;
  readonly etcdUsername: string | undefined;
  /** from --etcd-password, --etcd-password-file or the endpoint URLs */
  readonly etcdPassword: string | undefined;
  readonly etcdPasswordFile: string | undefined;
  readonly etcdAllowInsecurePassword: boolean;
  readonly iface: string[];
  readonly ifaceRegex: string[];
  readonly publicIp: string | undefined;
  readonly subnetFile: string;
  readonly subnetLeaseRenewMargin: number;
  readonly ipMasq: boolean;
  readonly iptablesResync: number;
  readonly procSysNet: string;
  readonly healthzIp: string;
  readonly healthzPort: number;
  readonly nodeName: string | undefined;
  readonly logLevel: LogLevel;
  readonly kubeSubnetMgr: boolean;
  readonly kubeconfigFile: string | undefined;
  readonly kubeApiUrl: string | undefined;
  readonly kubeAnnotationPrefix: string;
  readonly netConfigPath: string;
}

export function envName(flag: string): string {
  return `TWILL_${flag.toUpperCase().replace(/-/g, '_')}`;
}

function camel(flag: string): string {
  return flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

function bad(flag: string, value: string, why: string): never {
  // an endpoint may carry a password: never echo one back
  throw new TwillError(
    'FLAG_INVALID',
    redactUrlCredentials(`--${flag} ${JSON.stringify(value)}: ${why}`),
  );
}

/** Declares the flags on a commander command (values are parsed by `resolveRunFlags`). */
export function addRunFlags(cmd: Command): Command {
  for (const f of RUN_FLAGS) {
    const syntax = f.kind === 'bool' ? `--${f.name}` : `--${f.name} <${f.arg ?? 'value'}>`;
    const envNote = f.kind === 'repeat' ? `${envName(f.name)}, comma-separated` : envName(f.name);
    const opt = new Option(syntax, `${f.help} (env: ${envNote})`);
    if (f.kind === 'repeat')
      opt.argParser((v: string, prev: string[] | undefined) => [...(prev ?? []), v]);
    if (f.default !== undefined) opt.default(f.default);
    cmd.addOption(opt);
  }
  return cmd;
}

function commaList(text: string): string[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

function parseValue(f: FlagSpec, raw: unknown, fromEnv: boolean): unknown {
  const text = Array.isArray(raw) ? raw.join(',') : String(raw);
  switch (f.kind) {
    case 'bool':
      if (typeof raw === 'boolean') return raw;
      if (/^(1|t|true|yes)$/i.test(text)) return true;
      if (/^(0|f|false|no|)$/i.test(text)) return false;
      return bad(f.name, text, 'is not true or false');
    case 'int':
      if (!/^\d+$/.test(text)) return bad(f.name, text, 'is not a non-negative integer');
      return Number(text);
    case 'list':
      return commaList(text);
    case 'repeat':
      return fromEnv ? commaList(text) : raw;
    case 'string':
      return text;
  }
}

/** Merges command line, environment and defaults into checked RunFlags. */
export function resolveRunFlags(cmd: Command, env: NodeJS.ProcessEnv): RunFlags {
  const values = cmd.opts<Record<string, unknown>>();
  const out: Record<string, unknown> = {};
  for (const f of RUN_FLAGS) {
    const key = camel(f.name);
    const fromCli = cmd.getOptionValueSource(key) === 'cli';
    const envValue = env[envName(f.name)];
    if (!fromCli && envValue !== undefined) out[key] = parseValue(f, envValue, true);
    else if (values[key] !== undefined) out[key] = parseValue(f, values[key], false);
    else out[key] = f.kind === 'bool' ? false : f.kind === 'repeat' ? [] : undefined;
  }
  return checkFlags(etcdCredentials(out as unknown as RunFlags));
}

/** The password in --etcd-password-file: the file's text less one trailing newline. */
function readPasswordFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    return bad('etcd-password-file', path, `cannot be read (${e.code ?? e.message})`);
  }
  const password = text.replace(/\r?\n$/, '');
  if (password === '') bad('etcd-password-file', path, 'is empty');
  return password;
}

function decoded(part: string, endpoint: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return bad('etcd-endpoints', endpoint, 'has a badly %-encoded user name or password');
  }
}

/**
 * Settles where the etcd user and password come from: --etcd-password, or
 * --etcd-password-file, or user:password@ in the endpoint URLs (taken out of
 * the URLs, so no URL twill logs or dials carries them). One source each.
 */
function etcdCredentials(flags: RunFlags): RunFlags {
  let { etcdUsername, etcdPassword } = flags;
  if (flags.etcdPasswordFile !== undefined) {
    if (etcdPassword !== undefined) {
      throw new TwillError(
        'FLAG_INVALID',
        '--etcd-password and --etcd-password-file: give the etcd password one way only (the file keeps it out of ps and the environment)',
      );
    }
    etcdPassword = readPasswordFile(flags.etcdPasswordFile);
  }
  const endpoints: string[] = [];
  let fromUrl: { user: string; password: string | undefined; endpoint: string } | undefined;
  for (const e of flags.etcdEndpoints) {
    const m = /^(https?:\/\/)([^/@\s]*)@(.*)$/.exec(e);
    if (!m) {
      endpoints.push(e);
      continue;
    }
    const [, scheme = '', userinfo = '', rest = ''] = m;
    const colon = userinfo.indexOf(':');
    const user = decoded(colon < 0 ? userinfo : userinfo.slice(0, colon), e);
    const password = colon < 0 ? undefined : decoded(userinfo.slice(colon + 1), e);
    if (fromUrl && (fromUrl.user !== user || fromUrl.password !== password))
      bad('etcd-endpoints', e, `has other credentials than ${fromUrl.endpoint}`);
    fromUrl ??= { user, password, endpoint: e };
    endpoints.push(`${scheme}${rest}`);
  }
  if (fromUrl) {
    if (etcdUsername !== undefined && etcdUsername !== fromUrl.user)
      bad('etcd-endpoints', fromUrl.endpoint, 'names another user than --etcd-username');
    if (fromUrl.password !== undefined && etcdPassword !== undefined)
      bad(
        'etcd-endpoints',
        fromUrl.endpoint,
        'carries a password, and so does --etcd-password or --etcd-password-file: give it one way only',
      );
    etcdUsername = fromUrl.user;
    etcdPassword = fromUrl.password ?? etcdPassword;
  }
  return { ...flags, etcdEndpoints: endpoints, etcdUsername, etcdPassword };
}

function checkFlags(flags: RunFlags): RunFlags {
  if (!LOG_LEVELS.includes(flags.logLevel))
    bad('log-level', flags.logLevel, `must be one of ${LOG_LEVELS.join(', ')}`);
  if (flags.publicIp !== undefined && !isIpv4(flags.publicIp))
    bad('public-ip', flags.publicIp, 'is not an IPv4 address');
  if (!isIpv4(flags.healthzIp)) bad('healthz-ip', flags.healthzIp, 'is not an IPv4 address');
  if (flags.healthzPort > 65535)
    bad('healthz-port', String(flags.healthzPort), 'is not a port number');
  if (flags.subnetLeaseRenewMargin < 1 || flags.subnetLeaseRenewMargin > 1439) {
    bad(
      'subnet-lease-renew-margin',
      String(flags.subnetLeaseRenewMargin),
      'must be from 1 to 1439 minutes (the lease lasts 24 h)',
    );
  }
  if (flags.iptablesResync < 1)
    bad('iptables-resync', String(flags.iptablesResync), 'must be at least 1 second');
  if (!flags.procSysNet.startsWith('/'))
    bad('proc-sys-net', flags.procSysNet, 'must be an absolute path');
  for (const e of flags.etcdEndpoints) {
    if (!/^https?:\/\/[^/\s]+\/?$/.test(e))
      bad(
        'etcd-endpoints',
        e,
        'each endpoint must look like http://host:port or https://host:port',
      );
  }
  if (flags.etcdEndpoints.length === 0) bad('etcd-endpoints', '', 'needs at least one endpoint');
  if ((flags.etcdCertfile === undefined) !== (flags.etcdKeyfile === undefined)) {
    throw new TwillError(
      'FLAG_INVALID',
      '--etcd-certfile and --etcd-keyfile: give both (the client certificate and its key) or neither',
    );
  }
  const plain = flags.etcdEndpoints.filter((e) => e.startsWith('http://'));
  if (flags.etcdPassword !== undefined && plain.length > 0 && !flags.etcdAllowInsecurePassword) {
    throw new TwillError(
      'FLAG_INVALID',
      `--etcd-endpoints ${JSON.stringify(plain.join(','))}: refusing to send the etcd password over plain http, where anyone on the path can read it; ` +
        'use https:// endpoints (with --etcd-cafile), or pass --etcd-allow-insecure-password to send it in clear text anyway',
    );
  }
  if (!flags.etcdPrefix.startsWith('/')) bad('etcd-prefix', flags.etcdPrefix, 'must start with /');
  if (
    flags.kubeApiUrl !== undefined &&
    !/^https:\/\/[^/\s:]+(:\d{1,5})?\/?$/.test(flags.kubeApiUrl)
  )
    bad(
      'kube-api-url',
      flags.kubeApiUrl,
      'must look like https://host:port (client-node refuses plain http)',
    );
  const labels = flags.kubeAnnotationPrefix.split('.');
  if (
    flags.kubeAnnotationPrefix.length > 253 ||
    !labels.every((l) => /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(l))
  ) {
    bad(
      'kube-annotation-prefix',
      flags.kubeAnnotationPrefix,
      'must be a DNS subdomain like flannel.alpha.coreos.com (lower-case labels of 1-63 letters, digits and inner dashes)',
    );
  }
  for (const r of flags.ifaceRegex) {
    try {
      new RegExp(r);
    } catch (err) {
      bad('iface-regex', r, `is not a regular expression (${(err as Error).message})`);
    }
  }
  return flags;
}
