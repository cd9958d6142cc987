// The CNI tests' node (CniNode); its calls go through lab/kit/call-cni.ts, which
// drives the plugin exactly as a runtime does.
import { access, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callCni, subnetEnvText, type CniAnswer, type CniCall } from '../../lab/kit/call-cni.ts';
import { NetnsLab } from '../../lab/kit/netns.ts';
import { TWILL_CNI } from '../../lab/kit/twill-command.ts';
import { run } from '../../src/exec/runner.ts';
import { parseCidr6 } from '../../src/net/ipv6.ts';
import { renderSubnetEnv } from '../../src/subnetenv.ts';
import { isAddressName } from '../../cni/ipam/store.ts';

/**
 * One test node: a namespace playing the host, a temp dir holding subnet.env,
 * the IP store and the log, and pod namespaces on demand. `destroy` removes
 * all of it, also after a failure.
 */
export class CniNode {
  readonly lab = new NetnsLab();
  /** false: an IPv6-only node, whose subnet.env has no IPv4 pair (`network`, `subnet` unused) */
  readonly ipv4: boolean;
  readonly network: string;
  readonly subnet: string;
  readonly mtu: number;
  /**
   * dual-stack, IPv6 only: the IPv6 network and the node's IPv6 subnet ("fd00::/48",
   * "fd00:0:0:3::/64")
   */
  readonly network6: string | undefined;
  readonly subnet6: string | undefined;
  dir = '';
  nodeNs = '';

  constructor(
    o: {
      ipv4?: boolean;
      network?: string;
      subnet?: string;
      mtu?: number;
      network6?: string;
      subnet6?: string;
    } = {},
  ) {
    this.ipv4 = o.ipv4 ?? true;
    this.network = o.network ?? '10.244.0.0/16';
    this.subnet = o.subnet ?? '10.244.3.0/24';
    this.mtu = o.mtu ?? 1450;
    this.network6 = o.network6;
    this.subnet6 = o.subnet6;
    if (!this.ipv4 && (this.network6 === undefined || this.subnet6 === undefined))
      throw new Error('test setup: an IPv6-only node needs network6 and subnet6');
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
    await writeFile(this.subnetFile, text ?? this.subnetEnvText());
  }

  /** This node's subnet.env: IPv4 only, dual-stack, or (without `ipv4`) IPv6 only. */
  subnetEnvText(): string {
    if (this.ipv4)
      return subnetEnvText({
        network: this.network,
        subnet: this.subnet,
        mtu: this.mtu,
        network6: this.network6,
        subnet6: this.subnet6,
      });
    const network6 = parseCidr6(this.network6 ?? '', { strict: true });
    const subnet6 = parseCidr6(this.subnet6 ?? '', { strict: true });
    if (!network6 || !subnet6)
      throw new Error(`test setup: ${this.network6} / ${this.subnet6} are not IPv6 network CIDRs`);
    return renderSubnetEnv({
      network: null,
      subnet: null,
      network6,
      subnet6,
      mtu: this.mtu,
      ipMasq: false,
    });
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

  /**
   * Addresses reserved in the store, IPv4 and IPv6 (host-local's files, without the
   * last_reserved_ip.N hints).
   */
  async reserved(): Promise<string[]> {
    const names = await readdir(this.storeDir).catch(() => [] as string[]);
    return names.filter(isAddressName).sort();
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
