// The build's warm-up of the daemon (scripts/build-daemon.ts, through loader.ts): a start run
// in-process before the bundle's code cache is taken, so that the cache holds the functions a
// start reaches already compiled — V8 otherwise compiles each on its first call, about 30 ms of a
// cold start's JavaScript at 5,000 peers (docs/benchmarks.md). It runs `twill run`'s command line
// through the flag parser, the etcd client against canned replies (warm-up-etcd.ts), then two
// daemons to their first pass each (host-gw over IPv4; vxlan, dual-stack, in nftables mode, with
// the health endpoint on a loopback port of the system's choosing) against an in-memory lease
// store holding a few hundred peers. Their `ip`, `iptables` and `nft` are a shell that prints
// what those print on an empty node, started through the runner a start uses, and their monitors
// `sleep`: nothing of the build host is read or written but a throwaway directory. Only the
// build calls it; a start never does.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runDaemon } from '../daemon.ts';
import { run, watchLines, type LineWatcher, type Runner } from '../exec/runner.ts';
import { KvLeaseStore } from '../lease/kv-store.ts';
import { MemoryKv } from '../lease/memory-kv.ts';
import { encodeLeaseValue } from '../lease/codec.ts';
import { createLogger } from '../log.ts';
import { parseCommandLine } from './argv.ts';
import { resolveRunFlags, runFlagOptions } from './flags.ts';
import { warmEtcdClient } from './warm-up-etcd.ts';

/** Peers in the store: enough for every per-peer path to run many times, few enough to be quick. */
const PEERS = 200;
const PREFIX = '/coreos.com/network';
const UNDERLAY = { ip: '10.0.0.1', ip6: 'fd00:1::1' };

/** `ip -json` of the underlay, as `addr show` prints it (every link's, or one family's). */
function addrJson(o: { details: boolean }): string {
  const eth0 = {
    ifindex: 2,
    ifname: 'eth0',
    flags: ['BROADCAST', 'MULTICAST', 'UP', 'LOWER_UP'],
    mtu: 1500,
    operstate: 'UP',
    link_type: 'ether',
    address: '02:00:0a:00:00:01',
    ...(o.details ? { linkinfo: { info_kind: 'veth' } } : {}),
    addr_info: [
      { family: 'inet', local: UNDERLAY.ip, prefixlen: 16, scope: 'global' },
      { family: 'inet6', local: UNDERLAY.ip6, prefixlen: 64, scope: 'global' },
    ],
  };
  return JSON.stringify([eth0]);
}

/** What a tool prints on an empty node: its output, its complaint, its exit code. */
interface Canned {
  readonly stdout: string;
  readonly stderr?: string;
  readonly exit?: number;
}

/**
 * The tools as a start finds them on an empty node: iptables over nf_tables, no routes of twill's,
 * no chain or table of twill's; every batch and restore succeeds, and `run`'s other reads print
 * nothing.
 */
function canned(file: string, args: readonly string[]): Canned {
  const words = args.join(' ');
  if (words === '--version')
    return {
      stdout:
        file === 'nft' ? 'nftables v1.0.6 (Lester Gooch #5)\n' : `${file} v1.8.9 (nf_tables)\n`,
    };
  if (file === 'ip' && words.includes('addr show'))
    return { stdout: addrJson({ details: args.includes('-d') }) };
  if (file === 'ip' && args.includes('-json')) return { stdout: '[]\n' };
  // nftables mode: no table of twill's yet (nft -j lists none but its metainfo)
  if (file === 'nft' && words === '-j list tables')
    return {
      stdout: '{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}}]}\n',
    };
  if (file === 'nft' && words.startsWith('-j list table '))
    return { stdout: '', stderr: 'Error: No such file or directory\n', exit: 1 };
  if ((file === 'iptables' || file === 'ip6tables') && args.includes('-S')) {
    const chain = args[args.length - 1] ?? '';
    return chain.startsWith('TWILL')
      ? { stdout: '', stderr: `${file}: No chain/target/match by that name.\n`, exit: 1 }
      : { stdout: `-P ${chain} ACCEPT\n` };
  }
  return { stdout: '' };
}

/** Each tool as a shell that reads its input, then prints its canned answer (`canned`). */
const shellTools: Runner = (file, args, opts = {}) => {
  const c = canned(file, args);
  const script = 'cat >/dev/null; printf %s "$1"; printf %s "$2" >&2; exit "$3"';
  return run('/bin/sh', ['-c', script, file, c.stdout, c.stderr ?? '', String(c.exit ?? 0)], opts);
};

/** `ip monitor` and `nft monitor` as a `sleep` that prints nothing until the daemon stops it. */
const quietWatch: LineWatcher = (_file, _args, o) => watchLines('sleep', ['60'], o);

/** PEERS leases as flannel's etcd keys (under subnets/) and values. */
function leases(o: { dual: boolean; vxlan: boolean }): [string, string][] {
  return Array.from({ length: PEERS }, (_, i) => {
    const [a, b] = [1 + Math.floor(i / 250), 1 + (i % 250)];
    const mac = `0a:00:00:00:${a.toString(16).padStart(2, '0')}:${b.toString(16).padStart(2, '0')}`;
    const subnet = `10.244.${i + 1}.0-24`;
    const key = o.dual ? `${subnet}&fd00:10:244:${(i + 1).toString(16)}::-64` : subnet;
    const vxlan = (m: string): { vni: number; vtepMac: string } | null =>
      o.vxlan ? { vni: 1, vtepMac: m } : null;
    const value = encodeLeaseValue({
      publicIp: `10.0.${a}.${b}`,
      publicIpv6: o.dual ? `fd00:1::${a.toString(16)}:${b.toString(16)}` : null,
      backendType: o.vxlan ? 'vxlan' : 'host-gw',
      backendData: vxlan(mac),
      ...(o.dual ? { backendData6: vxlan(mac.replace('0a:', '0e:')) } : {}),
    });
    return [key, value];
  });
}

/** A store holding `config` and `peers`. */
function storeWith(config: object, peers: readonly [string, string][]): MemoryKv {
  const kv = new MemoryKv();
  kv.putRaw(`${PREFIX}/config`, JSON.stringify(config));
  for (const [key, value] of peers) kv.putRaw(`${PREFIX}/subnets/${key}`, value);
  return kv;
}

/** One daemon, started on `kv`, stopped once its first pass is reported. */
async function warmDaemon(
  kv: MemoryKv,
  o: { dir: string; name: string; health: boolean },
): Promise<void> {
  const store = new KvLeaseStore({ kv, prefix: PREFIX });
  const ctl = new AbortController();
  /** its first pass: true, or what failed in it; undefined before it */
  let passed: true | Error | undefined;
  const logger = createLogger({ level: 'debug', node: o.name, write: () => undefined });
  const daemon = runDaemon(
    {
      store,
      runner: shellTools,
      watch: quietWatch,
      logger,
      ensureForwarding: () => Promise.resolve(false),
      bridgeNetfilterProblem: () => Promise.resolve(undefined),
    },
    {
      nodeName: o.name,
      iface: { iface: ['eth0'], ifaceRegex: [], publicIp: undefined },
      subnetFile: join(o.dir, `${o.name}.env`),
      renewMarginMs: 3_600_000,
      ipMasq: true,
      resyncMs: 60_000,
      ...(o.health ? { healthz: { ip: '127.0.0.1', port: 0 } } : {}),
      onState: (s) => {
        if (s.pass === undefined || passed !== undefined) return;
        // a failure would mean the warm-up went down a path no start takes: the build says so
        const failures = s.pass.failures;
        passed = failures.length === 0 ? true : new Error(`${o.name}: ${failures.join('; ')}`);
        ctl.abort();
      },
    },
    ctl.signal,
  );
  const timer = setTimeout(() => ctl.abort(), 20_000);
  try {
    await daemon.catch((err: unknown) => {
      if (passed === undefined) throw err;
    });
    if (passed === undefined)
      throw new Error(`warm-up ${o.name}: the daemon stopped before its first pass`);
    if (passed instanceof Error) throw passed;
  } finally {
    clearTimeout(timer);
    await store.close();
  }
}

/**
 * Runs a start's code paths once, for the code cache the build takes after it
 * (scripts/daemon-code-cache.ts); throws when a daemon's first pass failed or never came.
 */
export async function warmUp(): Promise<void> {
  const argv = ['run', '--etcd-endpoints', 'http://127.0.0.1:2379', '--ip-masq', '--iface', 'eth0'];
  const parsed = parseCommandLine(
    {
      name: 'twill',
      description: '',
      commands: [{ name: 'run', description: '', options: runFlagOptions({ run: true }) }],
    },
    argv,
  );
  if (parsed.kind !== 'command') throw new Error(`warm-up: ${argv.join(' ')} did not parse`);
  resolveRunFlags(parsed.given, {});
  const dir = mkdtempSync(join(tmpdir(), 'twill-warm-'));
  try {
    const hostGw = { Network: '10.244.0.0/16', Backend: { Type: 'host-gw' } };
    const ipv4 = leases({ dual: false, vxlan: false });
    await warmEtcdClient(PREFIX, ipv4);
    await warmDaemon(storeWith(hostGw, ipv4), { dir, name: 'warm-host-gw', health: false });
    const dual = {
      Network: '10.244.0.0/16',
      EnableIPv6: true,
      IPv6Network: 'fd00:10:244::/48',
      EnableNFTables: true,
      Backend: { Type: 'vxlan' },
    };
    const peers = leases({ dual: true, vxlan: true });
    await warmDaemon(storeWith(dual, peers), { dir, name: 'warm-vxlan', health: true });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
