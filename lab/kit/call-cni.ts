// Drives a CNI plugin exactly as a runtime does: the CNI_* variables and the
// network config on stdin, the executable run inside a "node" namespace
// (never the host's own), stdout parsed as the result or the CNI error.
// Shared by the CNI tests, the lab (its pods) and the benchmark.
import { parseCidr } from '../../src/net/ipv4.ts';
import { parseCidr6 } from '../../src/net/ipv6.ts';
import { renderSubnetEnv } from '../../src/subnetenv.ts';
import { runToExit, type Finished } from './process.ts';

/** where Debian's containernetworking-plugins are (the reference bridge and host-local) */
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

/**
 * A subnet.env text for `subnet` ("10.244.3.0/24") inside `network`; with `network6` and `subnet6`
 * ("fd00:0:0:3::/64" inside "fd00::/48") a dual-stack node's.
 */
export function subnetEnvText(o: {
  network: string;
  subnet: string;
  mtu: number;
  network6?: string | undefined;
  subnet6?: string | undefined;
}): string {
  const network = parseCidr(o.network, { strict: true });
  const subnet = parseCidr(o.subnet, { strict: true });
  if (!network || !subnet)
    throw new Error(`test setup: ${o.network} / ${o.subnet} are not network CIDRs`);
  if ((o.network6 === undefined) !== (o.subnet6 === undefined))
    throw new Error('test setup: network6 and subnet6 go together');
  const network6 = o.network6 === undefined ? null : parseCidr6(o.network6, { strict: true });
  const subnet6 = o.subnet6 === undefined ? null : parseCidr6(o.subnet6, { strict: true });
  if (network6 === undefined || subnet6 === undefined)
    throw new Error(`test setup: ${o.network6} / ${o.subnet6} are not IPv6 network CIDRs`);
  return renderSubnetEnv({
    network,
    subnet,
    ...(network6 && subnet6 ? { network6, subnet6 } : {}),
    mtu: o.mtu,
    ipMasq: false,
  });
}
