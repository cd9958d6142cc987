// subnet.env: the file the CNI plugin reads to learn the node's subnet, in
// flannel's format (FLANNEL_NETWORK, FLANNEL_SUBNET, FLANNEL_MTU,
// FLANNEL_IPMASQ, in that order; FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET
// after the IPv4 pair on a dual-stack node, as flannel writes them). Written
// atomically: temp file, fsync, rename, so a reader never sees half a file.
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { TwillError } from './errors.ts';
import { formatCidr, formatIpv4, firstHost, parseCidr, type Cidr } from './net/ipv4.ts';
import { firstHost6, formatCidr6, formatIpv6, parseCidr6, type Cidr6 } from './net/ipv6.ts';

/** Where twill writes subnet.env and the CNI plugin reads it, unless told otherwise. */
export const DEFAULT_SUBNET_FILE = '/run/twill/subnet.env';

export interface SubnetEnv {
  readonly network: Cidr;
  readonly subnet: Cidr;
  /** dual-stack: the IPv6 network and this node's IPv6 subnet (both or neither) */
  readonly network6?: Cidr6 | null;
  readonly subnet6?: Cidr6 | null;
  readonly mtu: number;
  readonly ipMasq: boolean;
}

export function renderSubnetEnv(env: SubnetEnv): string {
  return [
    `FLANNEL_NETWORK=${formatCidr(env.network)}`,
    `FLANNEL_SUBNET=${formatIpv4(firstHost(env.subnet))}/${env.subnet.prefix}`,
    ...(env.network6 && env.subnet6
      ? [
          `FLANNEL_IPV6_NETWORK=${formatCidr6(env.network6)}`,
          `FLANNEL_IPV6_SUBNET=${formatIpv6(firstHost6(env.subnet6))}/${env.subnet6.prefix}`,
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
  const need = (key: string): string => vars.get(key) ?? bad(path, `${key} is missing`);
  const network = parseCidr(need('FLANNEL_NETWORK'), { strict: true });
  if (!network)
    bad(
      path,
      `FLANNEL_NETWORK ${JSON.stringify(vars.get('FLANNEL_NETWORK'))} is not a network CIDR`,
    );
  const subnet = parseCidr(need('FLANNEL_SUBNET'), { strict: false });
  if (!subnet)
    bad(path, `FLANNEL_SUBNET ${JSON.stringify(vars.get('FLANNEL_SUBNET'))} is not a CIDR`);
  const mtuText = need('FLANNEL_MTU');
  const mtu = /^\d{2,5}$/.test(mtuText) ? Number(mtuText) : NaN;
  if (!Number.isInteger(mtu) || mtu < 68 || mtu > 65535)
    bad(path, `FLANNEL_MTU ${JSON.stringify(vars.get('FLANNEL_MTU'))} is not an MTU`);
  const masq = need('FLANNEL_IPMASQ');
  if (masq !== 'true' && masq !== 'false')
    bad(path, `FLANNEL_IPMASQ ${JSON.stringify(masq)} is not true or false`);
  const v6 = parseIpv6Pair(vars, path);
  return { network, subnet, ...v6, mtu, ipMasq: masq === 'true' };
}

function parseIpv6Pair(
  vars: ReadonlyMap<string, string>,
  path: string,
): { network6: Cidr6; subnet6: Cidr6 } | object {
  const net = vars.get('FLANNEL_IPV6_NETWORK');
  const sub = vars.get('FLANNEL_IPV6_SUBNET');
  if (net === undefined && sub === undefined) return {};
  if (net === undefined || sub === undefined)
    bad(path, 'FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET must be given together');
  const network6 = parseCidr6(net, { strict: true });
  if (!network6)
    bad(path, `FLANNEL_IPV6_NETWORK ${JSON.stringify(net)} is not an IPv6 network CIDR`);
  const subnet6 = parseCidr6(sub, { strict: false });
  if (!subnet6) bad(path, `FLANNEL_IPV6_SUBNET ${JSON.stringify(sub)} is not an IPv6 CIDR`);
  return { network6, subnet6 };
}

/** Reads subnet.env; undefined when the file does not exist. */
export async function readSubnetEnv(path: string): Promise<SubnetEnv | undefined> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  return parseSubnetEnv(text, path);
}

/** Writes subnet.env atomically, creating its directory when needed. */
export async function writeSubnetEnv(path: string, env: SubnetEnv): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  // unique per write: two writers in one process (tests run several daemons) may start in the same
  // millisecond
  const tmp = join(
    dirname(path),
    `.${basename(path)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`,
  );
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
