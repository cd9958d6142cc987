// Drives a CNI plugin exactly as a runtime does: the CNI_* variables and the
// network config on stdin, the executable run inside a "node" namespace the
// test created (never the host's own), stdout parsed as the result or the
// CNI error. Shared by the CNI tests and the benchmark.
import { access, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { run } from '../../src/exec/runner.ts';
import { parseCidr } from '../../src/net/ipv4.ts';
import { renderSubnetEnv } from '../../src/subnetenv.ts';
import { NetnsLab } from './netns.ts';
import { runToExit, type Finished } from './process.ts';

export const TWILL_CNI = resolve(import.meta.dirname, '../../dist/twill-cni');
export const REFERENCE_DIR = '/usr/lib/cni';

export interface CniCall {
  /** the namespace playing the host (where the bridge lives) */
  readonly nodeNs: string;
  readonly exe: string;
  readonly verb: string;
  readonly conf: unknown;
  readonly containerId?: string;
  /** a namespace name (made into /var/run/netns/<name>) or an absolute path */
  readonly netns?: string;
  readonly ifname?: string;
  /** extra or overriding variables; a value of undefined removes one */
  readonly env?: Record<string, string | undefined>;
  readonly path?: string;
}

export interface CniAnswer extends Finished {
  /** stdout as JSON, when there was any */
  readonly json: Record<string, unknown> | undefined;
}

export function netnsPath(ns: string): string {
  return ns.startsWith('/') ? ns : `/var/run/netns/${ns}`;
}

function callEnv(c: CniCall): Record<string, string> {
  const env: Record<string, string | undefined> = {
    PATH: c.path ?? process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
    CNI_COMMAND: c.verb,
    CNI_CONTAINERID: c.containerId,
    CNI_NETNS: c.netns === undefined ? undefined : netnsPath(c.netns),
    CNI_IFNAME: c.ifname ?? (c.containerId === undefined ? undefined : 'eth0'),
    CNI_PATH: REFERENCE_DIR,
    ...c.env,
  };
  return Object.fromEntries(
    Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined),
  );
}

/** Runs one plugin call; never throws for a plugin failure (look at `code` and `json`). */
export async function callCni(c: CniCall): Promise<CniAnswer> {
  const input = typeof c.conf === 'string' ? c.conf : JSON.stringify(c.conf);
  const done = await runToExit(['nsenter', `--net=${netnsPath(c.nodeNs)}`, c.exe], {
    input,
    env: callEnv(c),
  });
  const text = done.stdout.trim();
  let json: Record<string, unknown> | undefined;
  try {
    json = text === '' ? undefined : (JSON.parse(text) as Record<string, unknown>);
  } catch {
    json = undefined;
  }
  return { ...done, json };
}

/** A subnet.env text for `subnet` ("10.244.3.0/24") inside `network`. */
export function subnetEnvText(o: { network: string; subnet: string; mtu: number }): string {
  const network = parseCidr(o.network, { strict: true });
  const subnet = parseCidr(o.subnet, { strict: true });
  if (!network || !subnet)
    throw new Error(`test setup: ${o.network} / ${o.subnet} are not network CIDRs`);
  return renderSubnetEnv({ network, subnet, mtu: o.mtu, ipMasq: false });
}

/**
 * One test node: a namespace playing the host, a temp dir holding subnet.env,
 * the IP store and the log, and pod namespaces on demand. `destroy` removes
 * all of it, also after a failure.
 */
export class CniNode {
  readonly lab = new NetnsLab();
  readonly network: string;
  readonly subnet: string;
  readonly mtu: number;
  dir = '';
  nodeNs = '';

  constructor(o: { network?: string; subnet?: string; mtu?: number } = {}) {
    this.network = o.network ?? '10.244.0.0/16';
    this.subnet = o.subnet ?? '10.244.3.0/24';
    this.mtu = o.mtu ?? 1450;
  }

  get subnetFile(): string {
    return join(this.dir, 'subnet.env');
  }

  get storeDir(): string {
    return join(this.dir, 'ipam', 'twnet');
  }

  async setup(short = 'node'): Promise<this> {
    await access(TWILL_CNI).catch(() => {
      throw new Error(`${TWILL_CNI} is missing: run npm run build:cni (npm test does)`);
    });
    this.dir = await mkdtemp(join(tmpdir(), 'twill-cni-'));
    this.nodeNs = await this.lab.add(short);
    await this.writeSubnetEnv();
    return this;
  }

  async writeSubnetEnv(text?: string): Promise<void> {
    await writeFile(
      this.subnetFile,
      text ?? subnetEnvText({ network: this.network, subnet: this.subnet, mtu: this.mtu }),
    );
  }

  /** A network config as a runtime hands it to the plugin (name and cniVersion filled in). */
  conf(cniVersion = '1.0.0', extra: Record<string, unknown> = {}): Record<string, unknown> {
    return {
      cniVersion,
      name: 'twnet',
      type: 'twill',
      subnetFile: this.subnetFile,
      dataDir: join(this.dir, 'ipam'),
      logFile: join(this.dir, 'cni.log'),
      ...extra,
    };
  }

  pod(short: string): Promise<string> {
    return this.lab.add(short);
  }

  call(c: Omit<CniCall, 'nodeNs' | 'exe' | 'conf'> & { conf?: unknown }): Promise<CniAnswer> {
    return callCni({ nodeNs: this.nodeNs, exe: TWILL_CNI, conf: c.conf ?? this.conf(), ...c });
  }

  /** Addresses reserved in the store (host-local's files, without last_reserved_ip.0). */
  async reserved(): Promise<string[]> {
    const names = await readdir(this.storeDir).catch(() => [] as string[]);
    return names.filter((n) => /^\d+\.\d+\.\d+\.\d+$/.test(n)).sort();
  }

  /** twill's host veths in the node namespace. */
  async hostVeths(): Promise<string[]> {
    const links = JSON.parse(
      (await run('ip', ['-n', this.nodeNs, '-json', 'link', 'show'])).stdout,
    ) as { ifname: string }[];
    return links.map((l) => l.ifname).filter((n) => n.startsWith('twv'));
  }

  /** `ip -json <args>` inside one of our namespaces. */
  async ipJson(ns: string, args: readonly string[]): Promise<unknown> {
    return JSON.parse((await run('ip', ['-n', ns, '-json', ...args])).stdout || '[]') as unknown;
  }

  async destroy(): Promise<void> {
    await this.lab.destroy();
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }
}
