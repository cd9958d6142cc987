// The flags of `twill run` (flannel's names and meanings) in one table: the command line's options
// (src/cli/argv.ts parses them, their --help comes from here), the TWILL_<FLAG_NAME> environment
// variables and the README's configuration reference
// (scripts/flags-doc.ts, `npm run docs:flags`) all come from it. The command line wins over the
// environment, which wins over the default. A default the product also needs elsewhere is that
// module's constant, never a second literal. Values are parsed strictly here, and a bad one is a
// FLAG_INVALID error naming the flag and the value.
import { readFileSync } from 'node:fs';
import { PROC_SYS_NET } from '../dataplane/sysctl.ts';
import { TwillError } from '../errors.ts';
import { DEFAULT_ANNOTATION_PREFIX } from '../lease/kube-node.ts';
import { DEFAULT_ETCD_PREFIX } from '../lease/kv-store.ts';
import { LOG_LEVELS, redactUrlCredentials, type LogLevel } from '../log.ts';
import type { IfaceRequest } from '../net/iface.ts';
import { isIpv4 } from '../net/ipv4.ts';
import { isUnicastHost6, parseIpv6 } from '../net/ipv6.ts';
import { DEFAULT_SUBNET_FILE } from '../subnetenv.ts';
import type { GivenOptions, OptionSpec, OptionValue } from './argv.ts';

export type FlagKind = 'string' | 'list' | 'repeat' | 'bool' | 'int';

export interface FlagSpec {
  /** without its dashes; TWILL_<NAME> is its variable (`envName`), camelCase its RunFlags key */
  readonly name: string;
  /** list: one comma-separated value; repeat: given again for each value (a comma list in env) */
  readonly kind: FlagKind;
  /** the value's name in --help (`--iface <name|ip>`) */
  readonly arg?: string;
  /** what the flag does, plain text for --help */
  readonly help: string;
  /** what the flag does, Markdown for the README; `help` when absent */
  readonly doc?: string;
  /** the value when neither the command line nor the environment gives one */
  readonly default?: string;
  /**
   * no TWILL_<NAME> variable: the command line alone sets it (--cleanup: a pod's environment
   * copied from the DaemonSet must never turn every start into an uninstall)
   */
  readonly commandLineOnly?: true;
  /**
   * declared on `twill run` only, not on `twill status` or `twill doctor` (which refuse it as an
   * unknown option rather than ignore it)
   */
  readonly runOnly?: true;
  /**
   * Without `default`: what twill does instead (shown in --help and the README); with it: a note
   * on the value (README only). Booleans are off unless given.
   */
  readonly defaultText?: string;
  /**
   * the lease store the flag is used with: etcd (the default) or --kube-subnet-mgr; both if unset
   */
  readonly store?: 'etcd' | 'kube';
}

export const RUN_FLAGS: readonly FlagSpec[] = [
  {
    name: 'etcd-endpoints',
    kind: 'list',
    arg: 'urls',
    help: 'comma-separated etcd endpoints',
    doc: 'comma-separated etcd endpoints, `http://host:port` or `https://host:port`',
    default: 'http://127.0.0.1:2379',
    store: 'etcd',
  },
  {
    name: 'etcd-prefix',
    kind: 'string',
    arg: 'path',
    help: 'etcd key prefix of the network config and leases',
    default: DEFAULT_ETCD_PREFIX,
    store: 'etcd',
  },
  {
    name: 'etcd-cafile',
    kind: 'string',
    arg: 'file',
    help: 'CA certificate for etcd TLS',
    doc: "CA certificate for etcd TLS: the CA that signed etcd's server certificate (see [etcd TLS and credentials](#etcd-tls-and-credentials))",
    defaultText: "the system's CA roots",
    store: 'etcd',
  },
  {
    name: 'etcd-certfile',
    kind: 'string',
    arg: 'file',
    help: 'client certificate for etcd TLS',
    doc: 'client certificate for etcd TLS (with `--etcd-keyfile`, both or neither)',
    store: 'etcd',
  },
  {
    name: 'etcd-keyfile',
    kind: 'string',
    arg: 'file',
    help: 'client key for etcd TLS',
    doc: 'client key for etcd TLS (with `--etcd-certfile`, both or neither)',
    store: 'etcd',
  },
  {
    name: 'etcd-username',
    kind: 'string',
    arg: 'name',
    help: 'etcd user name',
    store: 'etcd',
  },
  {
    name: 'etcd-password',
    kind: 'string',
    arg: 'password',
    help: 'etcd password (visible in ps and the process environment: prefer --etcd-password-file)',
    doc: 'etcd password (visible in `ps` and the process environment: prefer `--etcd-password-file`)',
    store: 'etcd',
  },
  {
    name: 'etcd-password-file',
    kind: 'string',
    arg: 'file',
    help: 'file holding the etcd password (one trailing newline is dropped); instead of --etcd-password',
    doc: 'the etcd password from a file (one trailing newline is dropped) instead of `--etcd-password` (see [etcd TLS and credentials](#etcd-tls-and-credentials))',
    store: 'etcd',
  },
  {
    name: 'etcd-allow-insecure-password',
    kind: 'bool',
    help: 'allow sending the etcd password to http:// endpoints, in clear text (refused by default)',
    doc: 'allow sending the password to `http://` endpoints, in clear text',
    store: 'etcd',
  },
  {
    name: 'iface',
    kind: 'repeat',
    arg: 'name|ip',
    help: 'interface (name or address) for the underlay; repeatable, first found wins',
    doc: 'underlay interface, by name or address; repeatable, first found wins',
    defaultText: "the default route's interface (IPv6 default route's when EnableIPv4 is false)",
  },
  {
    name: 'iface-regex',
    kind: 'repeat',
    arg: 'regex',
    help: 'regex over interface addresses, then names; repeatable',
    doc: 'regex over addresses, then names; repeatable, tried after `--iface`',
  },
  {
    name: 'public-ip',
    kind: 'string',
    arg: 'ip',
    help: 'IPv4 address peers reach this node at (refused when EnableIPv4 is false)',
    defaultText: 'the interface address',
  },
  {
    name: 'public-ipv6',
    kind: 'string',
    arg: 'ip',
    help: 'IPv6 address peers reach this node at (used when the network config sets EnableIPv6)',
    doc: 'IPv6 address peers reach this node at (`PublicIPv6`); used only when the network config sets `EnableIPv6`',
    defaultText: "the interface's first global IPv6 address",
  },
  {
    name: 'subnet-file',
    kind: 'string',
    arg: 'path',
    help: 'where to write subnet.env',
    doc: 'where subnet.env is written (and read back at start)',
    default: DEFAULT_SUBNET_FILE,
  },
  {
    name: 'subnet-lease-renew-margin',
    kind: 'int',
    arg: 'minutes',
    help: 'renew the lease this many minutes before it expires',
    doc: 'minutes before expiry to renew the lease (1–1439)',
    default: '60',
  },
  {
    name: 'ip-masq',
    kind: 'bool',
    help: 'masquerade traffic leaving the pod network (FLANNEL_IPMASQ)',
    doc: 'masquerade pod traffic leaving the network (`TWILL-POSTRTG`); written as `FLANNEL_IPMASQ`',
  },
  {
    name: 'cni-bridge',
    kind: 'string',
    arg: 'name',
    help: "the CNI plugin's bridge: twill removes the gateway of an earlier subnet of ours from it",
    doc: "the CNI plugin's bridge (its config's `bridge`). After the node's subnet changes (a Node re-registered with a new podCIDR, a lease lost and taken), the old gateway stays on it and its connected route hides the subnet's new holder: twill deletes such an address (the first host of a block of our subnet's size, inside the pod network, outside our subnet) from this bridge only, never from another one",
    default: 'cni0',
  },
  {
    name: 'iptables-resync',
    kind: 'int',
    arg: 'seconds',
    help: 'period of the full safety-net dataplane pass (routes, neighbours, FDB, chains), ±10 %; kernel monitors repair drift at once',
    doc: "seconds (±10 %) between full safety-net passes (device, routes, neighbours, FDB, chains); the kernel monitors repair drift at once, so this is only a net (flannel's default is 5: flannel has no kernel events)",
    default: '60',
  },
  {
    name: 'proc-sys-net',
    kind: 'string',
    arg: 'dir',
    help: "the node network namespace's /proc/sys/net, where twill sets ip_forward and reads the bridge and rp_filter sysctls (a container that is not privileged has a read-only /proc/sys: mount the host's /proc/sys/net and name the mount here)",
    doc: "where the node's net sysctls are: twill sets `ipv4/ip_forward` and reads `bridge/bridge-nf-call-iptables` there (`twill doctor` reads them, and `rp_filter`, there too). A container that is not privileged has a read-only `/proc/sys`: mount the host's `/proc/sys/net` (a hostPath) elsewhere and name it here, as `deploy/` does. Net sysctls are those of the namespace of the process that opens them, so the mount shows the node's values",
    default: PROC_SYS_NET,
  },
  {
    name: 'healthz-ip',
    kind: 'string',
    arg: 'ip',
    help: 'address of the health endpoint',
    doc: 'address where `/healthz`, `/readyz` and `/metrics` listen (see [Health, metrics and status](#health-metrics-and-status))',
    default: '0.0.0.0',
  },
  {
    name: 'healthz-port',
    kind: 'int',
    arg: 'port',
    help: 'port of the health endpoint (0: disabled)',
    doc: 'port of `/healthz`, `/readyz` and `/metrics` (0: off); a port that cannot be bound stops start-up',
    default: '0',
    defaultText: 'off',
  },
  {
    name: 'node-name',
    kind: 'string',
    arg: 'name',
    help: "this node's name",
    doc: "this node's name (logs, derived VtepMAC; in Kubernetes mode the Node twill reads and annotates)",
    // nodeNameOf in open-store.ts applies it
    defaultText: '$NODE_NAME, then the host name',
  },
  {
    name: 'log-level',
    kind: 'string',
    arg: 'level',
    help: `one of ${LOG_LEVELS.join(', ')}`,
    default: 'info',
  },
  {
    name: 'cleanup',
    kind: 'bool',
    commandLineOnly: true,
    runOnly: true,
    help: "remove twill's kernel state from this node and exit (its TWILL-POSTRTG and TWILL-FWD chains and their jumps, its nftables tables, its twill.* and twill-v6.* devices, its routes of protocol 151); the CNI bridge, the pods and subnet.env are left alone, and no store is read. For uninstalling, after the DaemonSet is deleted: never on a restart or upgrade, which would cut the pods off until twill runs again",
    doc: "remove twill's kernel state from this node and exit 0 (the `TWILL-POSTRTG` and `TWILL-FWD` chains and the jumps to them, in iptables and ip6tables; the nftables tables `ip twill-ipv4` and `ip6 twill-ipv6`; the `twill.<VNI>` and `twill-v6.<VNI>` devices; the routes of protocol 151), without reading the store. The CNI bridge, the pods and subnet.env are left alone. For uninstalling, once the DaemonSet is deleted, never on a restart or upgrade: see [Uninstalling](docs/operations.md#uninstalling)",
  },
  {
    name: 'kube-subnet-mgr',
    kind: 'bool',
    help: 'take the subnet from the Kubernetes API instead of etcd',
    doc: 'the subnet and the peers come from the Kubernetes API instead of etcd (the `--etcd-*` flags are then ignored); see [Kubernetes mode](#kubernetes-mode)',
  },
  {
    name: 'kubeconfig-file',
    kind: 'string',
    arg: 'file',
    help: 'kubeconfig for --kube-subnet-mgr',
    doc: "kubeconfig for the Kubernetes API; without it, the pod's service account (token, CA, `KUBERNETES_SERVICE_HOST`/`PORT`)",
    defaultText: 'in-cluster config',
    store: 'kube',
  },
  {
    name: 'kube-api-url',
    kind: 'string',
    arg: 'url',
    help: 'Kubernetes API server URL for --kube-subnet-mgr',
    doc: 'overrides the API server URL (of the kubeconfig or the in-cluster config); `https://` only',
    defaultText: "the kubeconfig's server",
    store: 'kube',
  },
  {
    name: 'kube-annotation-prefix',
    kind: 'string',
    arg: 'prefix',
    help: 'prefix of the node annotations',
    doc: 'node annotation prefix',
    default: DEFAULT_ANNOTATION_PREFIX,
    store: 'kube',
  },
  {
    name: 'net-config-path',
    kind: 'string',
    arg: 'file',
    help: 'net-conf.json for --kube-subnet-mgr',
    doc: "net-conf.json in Kubernetes mode (flannel's path, so kube-flannel's ConfigMap mount works unchanged; `deploy/` passes `/etc/twill/net-conf.json`)",
    default: '/etc/kube-flannel/net-conf.json',
    store: 'kube',
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
  readonly publicIpv6: string | undefined;
  readonly subnetFile: string;
  readonly subnetLeaseRenewMargin: number;
  readonly ipMasq: boolean;
  readonly iptablesResync: number;
  readonly cniBridge: string;
  readonly procSysNet: string;
  readonly healthzIp: string;
  readonly healthzPort: number;
  readonly nodeName: string | undefined;
  readonly logLevel: LogLevel;
  /** `twill run --cleanup`: remove twill's kernel state and exit, instead of running */
  readonly cleanup: boolean;
  readonly kubeSubnetMgr: boolean;
  readonly kubeconfigFile: string | undefined;
  readonly kubeApiUrl: string | undefined;
  readonly kubeAnnotationPrefix: string;
  readonly netConfigPath: string;
}

/**
 * The interface flags as `discoverInterface` takes them; `ipv4` and `ipv6` are the network
 * config's to set (EnableIPv4, EnableIPv6), once it has been read.
 */
export function ifaceRequest(flags: RunFlags): IfaceRequest {
  return {
    iface: flags.iface,
    ifaceRegex: flags.ifaceRegex,
    publicIp: flags.publicIp,
    publicIpv6: flags.publicIpv6,
  };
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

/**
 * The flags as options of a command (values are parsed by `resolveRunFlags`): `run` for
 * `twill run`, which alone takes the `runOnly` ones (a flag not declared resolves to its default).
 */
export function runFlagOptions(o: { readonly run: boolean }): OptionSpec[] {
  return RUN_FLAGS.filter((f) => o.run || !f.runOnly).map((f) => {
    const envNote = f.commandLineOnly
      ? 'command line only'
      : f.kind === 'repeat'
        ? `env: ${envName(f.name)}, comma-separated`
        : `env: ${envName(f.name)}`;
    // the help shows a value default itself, after the env note; words for a missing one go
    // there too
    const instead =
      f.default === undefined && f.defaultText !== undefined ? ` (default: ${f.defaultText})` : '';
    return {
      name: f.name,
      ...(f.kind === 'bool' ? {} : { arg: f.arg ?? 'value' }),
      ...(f.kind === 'repeat' ? { repeat: true as const } : {}),
      help: `${f.help} (${envNote})${instead}`,
      ...(f.default === undefined ? {} : { default: f.default }),
    };
  });
}

function commaList(text: string): string[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/**
 * A flag's value: `true` for a switch given on the command line, the values of a repeatable flag
 * given on the command line, or text (from the command line, the environment or the default).
 */
function parseValue(f: FlagSpec, raw: OptionValue): unknown {
  if (raw === true) return true;
  if (typeof raw !== 'string') return [...raw];
  switch (f.kind) {
    case 'bool':
      if (/^(1|t|true|yes)$/i.test(raw)) return true;
      if (/^(0|f|false|no|)$/i.test(raw)) return false;
      return bad(f.name, raw, 'is not true or false');
    case 'int':
      if (!/^\d+$/.test(raw)) return bad(f.name, raw, 'is not a non-negative integer');
      return Number(raw);
    case 'list':
    case 'repeat':
      return commaList(raw);
    case 'string':
      return raw;
  }
}

/**
 * Merges the command line (`given`, what src/cli/argv.ts parsed), the environment and the defaults
 * into checked RunFlags.
 */
export function resolveRunFlags(given: GivenOptions, env: NodeJS.ProcessEnv): RunFlags {
  const out: Record<string, unknown> = {};
  for (const f of RUN_FLAGS) {
    const fromCli = given.get(f.name);
    const fromEnv = f.commandLineOnly ? undefined : env[envName(f.name)];
    const raw = fromCli ?? fromEnv ?? f.default;
    out[camel(f.name)] =
      raw !== undefined
        ? parseValue(f, raw)
        : f.kind === 'bool'
          ? false
          : f.kind === 'repeat'
            ? []
            : undefined;
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
  if (flags.publicIpv6 !== undefined) {
    const v6 = parseIpv6(flags.publicIpv6);
    if (v6 === undefined) bad('public-ipv6', flags.publicIpv6, 'is not an IPv6 address');
    if (!isUnicastHost6(v6))
      bad(
        'public-ipv6',
        flags.publicIpv6,
        'is not a unicast address peers can reach (unspecified, loopback, multicast, link-local or IPv4-mapped)',
      );
  }
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
  // an interface name as the kernel takes it (IFNAMSIZ)
  if (!/^[A-Za-z0-9_.:-]{1,15}$/.test(flags.cniBridge) || /^\.\.?$/.test(flags.cniBridge))
    bad('cni-bridge', flags.cniBridge, 'is not an interface name (1 to 15 of A-Z a-z 0-9 _ . : -)');
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
      'must look like https://host:port (plain http would send the credentials in clear)',
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
