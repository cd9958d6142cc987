// subnet.env: the file the CNI plugin reads to learn the node's subnet, in
// flannel's format and order, as its WriteSubnetFile writes it: the IPv4 pair
// (FLANNEL_NETWORK, FLANNEL_SUBNET) unless IPv4 is off, then the IPv6 pair
// (FLANNEL_IPV6_NETWORK, FLANNEL_IPV6_SUBNET) when IPv6 is on, then
// FLANNEL_MTU and FLANNEL_IPMASQ. Each pair is there whole or not at all, and
// at least one is: IPv4 only, dual-stack or IPv6 only. Written atomically:
// temp file, fsync, rename, so a reader never sees half a file.
import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { TwillError } from './errors.ts';
import { formatCidr, formatIpv4, firstHost, parseCidr, type Cidr } from './net/ipv4.ts';
import { firstHost6, formatCidr6, formatIpv6, parseCidr6, type Cidr6 } from './net/ipv6.ts';

/** Where twill writes subnet.env and the CNI plugin reads it, unless told otherwise. */
export const DEFAULT_SUBNET_FILE = '/run/twill/subnet.env';

export interface SubnetEnv {
  /** the IPv4 network and this node's IPv4 subnet (both or neither); null on an IPv6-only node */
  readonly network: Cidr | null;
  readonly subnet: Cidr | null;
  /** the IPv6 network and this node's IPv6 subnet (both or neither); dual-stack or IPv6 only */
  readonly network6?: Cidr6 | null;
  readonly subnet6?: Cidr6 | null;
  readonly mtu: number;
  readonly ipMasq: boolean;
}

/** One family's network and the node's subnet in it. */
export interface SubnetPair<C> {
  readonly network: C;
  readonly subnet: C;
}

/**
 * The families subnet.env gives the node: `v4` unless it is IPv6-only, `v6` on a dual-stack or
 * IPv6-only node. A half-given pair counts as absent (parseSubnetEnv refuses one).
 */
export function subnetFamilies(env: SubnetEnv): {
  v4: SubnetPair<Cidr> | undefined;
  v6: SubnetPair<Cidr6> | undefined;
} {
  return {
    v4: env.network && env.subnet ? { network: env.network, subnet: env.subnet } : undefined,
    v6: env.network6 && env.subnet6 ? { network: env.network6, subnet: env.subnet6 } : undefined,
  };
}

/**
 * flannel's text for `env`. Throws (a bug in the caller, not an input error) when the IPv4 pair is
 * half given, or when neither pair is: such a file would describe no node.
 */
export function renderSubnetEnv(env: SubnetEnv): string {
  if ((env.network === null) !== (env.subnet === null))
    throw new Error('subnet.env: network and subnet must both be set or both be null');
  const { v4, v6 } = subnetFamilies(env);
  if (!v4 && !v6) throw new Error('subnet.env: neither an IPv4 nor an IPv6 subnet to write');
  return [
    ...(v4
      ? [
          `FLANNEL_NETWORK=${formatCidr(v4.network)}`,
          `FLANNEL_SUBNET=${formatIpv4(firstHost(v4.subnet))}/${v4.subnet.prefix}`,
        ]
      : []),
    ...(v6
      ? [
          `FLANNEL_IPV6_NETWORK=${formatCidr6(v6.network)}`,
          `FLANNEL_IPV6_SUBNET=${formatIpv6(firstHost6(v6.subnet))}/${v6.subnet.prefix}`,
        ]
      : []),
    `FLANNEL_MTU=${env.mtu}`,
    `FLANNEL_IPMASQ=${env.ipMasq}`,
    '',
  ].join('\n');
}

function bad(path: string, message: string): never {
  throw new TwillError('SUBNET_ENV_INVALID', `${path}: ${message}`);
}

/**
 * The values of a pair of keys: both, or undefined when neither is there; refuses one without the
 * other.
 */
function pairOf(
  vars: ReadonlyMap<string, string>,
  path: string,
  keys: readonly [string, string],
): [string, string] | undefined {
  const [netKey, subKey] = keys;
  const net = vars.get(netKey);
  const sub = vars.get(subKey);
  if (net === undefined && sub === undefined) return undefined;
  if (net === undefined || sub === undefined)
    bad(
      path,
      `${net === undefined ? netKey : subKey} is missing: ${netKey} and ${subKey} must be given together`,
    );
  return [net, sub];
}

/** Parses subnet.env text; `path` only names the file in errors. */
export function parseSubnetEnv(text: string, path: string): SubnetEnv {
  const vars = new Map<string, string>();
  for (const line of text.split('\n')) {
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    const eq = trimmed.indexOf('=');
    if (eq <= 0) bad(path, `line ${JSON.stringify(line)} is not KEY=VALUE`);
    vars.set(trimmed.slice(0, eq), trimmed.slice(eq + 1));
  }
  const v4 = parseIpv4Pair(vars, path);
  const v6 = parseIpv6Pair(vars, path);
  if (!v4 && !v6)
    bad(
      path,
      'FLANNEL_NETWORK and FLANNEL_SUBNET (IPv4) are missing, and so are FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET (IPv6): a node needs the subnet of at least one family',
    );
  const need = (key: string): string => vars.get(key) ?? bad(path, `${key} is missing`);
  const mtuText = need('FLANNEL_MTU');
  const mtu = /^\d{2,5}$/.test(mtuText) ? Number(mtuText) : NaN;
  if (!Number.isInteger(mtu) || mtu < 68 || mtu > 65535)
    bad(path, `FLANNEL_MTU ${JSON.stringify(vars.get('FLANNEL_MTU'))} is not an MTU`);
  const masq = need('FLANNEL_IPMASQ');
  if (masq !== 'true' && masq !== 'false')
    bad(path, `FLANNEL_IPMASQ ${JSON.stringify(masq)} is not true or false`);
  // an IPv4-only file gives no IPv6 keys at all (as before IPv6 was known); an IPv6-only one gives
  // the IPv4 pair as null
  return {
    network: v4?.network ?? null,
    subnet: v4?.subnet ?? null,
    ...(v6 ? { network6: v6.network, subnet6: v6.subnet } : {}),
    mtu,
    ipMasq: masq === 'true',
  };
}

function parseIpv4Pair(
  vars: ReadonlyMap<string, string>,
  path: string,
): SubnetPair<Cidr> | undefined {
  const pair = pairOf(vars, path, ['FLANNEL_NETWORK', 'FLANNEL_SUBNET']);
  if (!pair) return undefined;
  const [net, sub] = pair;
  const network = parseCidr(net, { strict: true });
  if (!network) bad(path, `FLANNEL_NETWORK ${JSON.stringify(net)} is not a network CIDR`);
  const subnet = parseCidr(sub, { strict: false });
  if (!subnet) bad(path, `FLANNEL_SUBNET ${JSON.stringify(sub)} is not a CIDR`);
  return { network, subnet };
}

function parseIpv6Pair(
  vars: ReadonlyMap<string, string>,
  path: string,
): SubnetPair<Cidr6> | undefined {
  const pair = pairOf(vars, path, ['FLANNEL_IPV6_NETWORK', 'FLANNEL_IPV6_SUBNET']);
  if (!pair) return undefined;
  const [net, sub] = pair;
  const network = parseCidr6(net, { strict: true });
  if (!network)
    bad(path, `FLANNEL_IPV6_NETWORK ${JSON.stringify(net)} is not an IPv6 network CIDR`);
  const subnet = parseCidr6(sub, { strict: false });
  if (!subnet) bad(path, `FLANNEL_IPV6_SUBNET ${JSON.stringify(sub)} is not an IPv6 CIDR`);
  return { network, subnet };
}

/** Reads subnet.env; undefined when the file does not exist. */
export async function readSubnetEnv(path: string): Promise<SubnetEnv | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if (isMissing(err)) return undefined;
    throw err;
  }
  return parseSubnetEnv(text, path);
}

/**
 * The same read synchronously: the CNI plugin, one call doing one thing, skips libuv's thread
 * pool.
 */
export function readSubnetEnvSync(path: string): SubnetEnv | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if (isMissing(err)) return undefined;
    throw err;
  }
  return parseSubnetEnv(text, path);
}

const isMissing = (err: unknown): boolean =>
  (err as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';

/** Temp files this process has written (writeSubnetEnv). */
let tmpCount = 0;

/** Writes subnet.env atomically, creating its directory when needed. */
export async function writeSubnetEnv(path: string, env: SubnetEnv): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  // unique per write: two writers in one process (tests run several daemons) may start in the same
  // millisecond, so the process's own count tells them apart (no node:crypto: rule 12)
  tmpCount += 1;
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.${tmpCount}.tmp`);
  try {
    const fh = await open(tmp, 'w', 0o644);
    try {
      await fh.writeFile(renderSubnetEnv(env));
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}
