// Which interface carries overlay traffic and which address peers reach us
// at: flannel's --iface / --iface-regex / default-route rules. The selection
// is pure over `ip -json` output; `discoverInterface` does the two reads.
import { TwillError } from '../errors.ts';
import { runJson, type Runner } from '../exec/runner.ts';
import { containsAddr, isIpv4, parseCidr, parseIpv4 } from './ipv4.ts';

export interface IfaceInfo {
  readonly name: string;
  readonly mtu: number;
  readonly mac: string;
  /** IPv4 addresses in the order the kernel lists them */
  readonly addrs: readonly string[];
  /** the same addresses with their prefix length ("10.0.0.2/24"): the on-link networks */
  readonly networks: readonly string[];
}

/** True when `ip` lies in one of the interface's on-link networks. */
export function onLink(iface: Pick<IfaceInfo, 'networks'>, ip: string): boolean {
  const addr = parseIpv4(ip);
  if (addr === undefined) return false;
  return iface.networks.some((n) => {
    const cidr = parseCidr(n, { strict: false });
    return cidr !== undefined && containsAddr(cidr, addr);
  });
}

export interface IfaceChoice {
  readonly iface: IfaceInfo;
  /** the interface address used for the underlay */
  readonly ifaceIp: string;
  /** what peers are told (--public-ip, or the interface address) */
  readonly publicIp: string;
}

export interface IfaceRequest {
  readonly iface: readonly string[];
  readonly ifaceRegex: readonly string[];
  readonly publicIp: string | undefined;
}

interface IpAddrJson {
  ifname?: string;
  mtu?: number;
  address?: string;
  addr_info?: { family?: string; local?: string; prefixlen?: number }[];
}

/** Parses `ip -json addr show` output into interfaces. */
export function parseIpAddr(json: unknown): IfaceInfo[] {
  if (!Array.isArray(json)) return [];
  return (json as IpAddrJson[]).map((l) => {
    const inet = (l.addr_info ?? []).filter((a) => a.family === 'inet' && a.local);
    return {
      name: l.ifname ?? '',
      mtu: l.mtu ?? 1500,
      mac: l.address ?? '',
      addrs: inet.map((a) => a.local as string),
      networks: inet.map((a) => `${a.local as string}/${a.prefixlen ?? 32}`),
    };
  });
}

/** The device of the first IPv4 default route in `ip -json route show default` output. */
export function defaultRouteDevice(json: unknown): string | undefined {
  if (!Array.isArray(json)) return undefined;
  const route = (json as { dst?: string; dev?: string }[]).find(
    (r) => r.dst === 'default' && r.dev,
  );
  return route?.dev;
}

function withAddress(iface: IfaceInfo | undefined, what: string): IfaceInfo {
  if (!iface) throw new TwillError('IFACE_NOT_FOUND', `${what}: no such interface`);
  if (iface.addrs.length === 0)
    throw new TwillError('IFACE_NOT_FOUND', `${what}: interface ${iface.name} has no IPv4 address`);
  return iface;
}

function choose(iface: IfaceInfo, ip: string, publicIp: string | undefined): IfaceChoice {
  return { iface, ifaceIp: ip, publicIp: publicIp ?? ip };
}

/**
 * Applies flannel's rules: each --iface in order, then each --iface-regex, then the default route.
 */
export function selectInterface(
  links: readonly IfaceInfo[],
  defaultDev: string | undefined,
  req: IfaceRequest,
): IfaceChoice {
  for (const wanted of req.iface) {
    const hit = isIpv4(wanted)
      ? links.find((l) => l.addrs.includes(wanted))
      : links.find((l) => l.name === wanted);
    if (hit && hit.addrs.length > 0)
      return choose(hit, isIpv4(wanted) ? wanted : (hit.addrs[0] as string), req.publicIp);
  }
  if (req.iface.length > 0) {
    throw new TwillError(
      'IFACE_NOT_FOUND',
      `--iface ${req.iface.join(',')}: none of these is an interface (or address) with an IPv4 address`,
    );
  }
  for (const pattern of req.ifaceRegex) {
    const re = new RegExp(pattern);
    for (const l of links) {
      const ip = l.addrs.find((a) => re.test(a));
      if (ip) return choose(l, ip, req.publicIp);
    }
    const named = links.find((l) => re.test(l.name) && l.addrs.length > 0);
    if (named) return choose(named, named.addrs[0] as string, req.publicIp);
  }
  if (req.ifaceRegex.length > 0) {
    throw new TwillError(
      'IFACE_NOT_FOUND',
      `--iface-regex ${req.ifaceRegex.join(',')}: no interface name or IPv4 address matches`,
    );
  }
  if (!defaultDev) {
    throw new TwillError(
      'IFACE_NOT_FOUND',
      'no IPv4 default route to pick an interface from; pass --iface <name|ip>',
    );
  }
  const iface = withAddress(
    links.find((l) => l.name === defaultDev),
    `default route device ${defaultDev}`,
  );
  return choose(iface, iface.addrs[0] as string, req.publicIp);
}

/** Reads the kernel's interfaces and default route, then selects. */
export async function discoverInterface(
  runner: Runner,
  req: IfaceRequest,
  signal: AbortSignal,
): Promise<IfaceChoice> {
  const links = parseIpAddr(
    await runJson(runner, 'ip', ['-json', '-4', 'addr', 'show'], { signal }),
  );
  const needDefault = req.iface.length === 0 && req.ifaceRegex.length === 0;
  const routes = needDefault
    ? await runJson(runner, 'ip', ['-json', '-4', 'route', 'show', 'default'], { signal })
    : [];
  return selectInterface(links, defaultRouteDevice(routes), req);
}

/** The MAC of an existing link, or undefined when there is none by that name. */
export async function linkMac(
  runner: Runner,
  name: string,
  signal: AbortSignal,
): Promise<string | undefined> {
  const links = parseIpAddr(await runJson(runner, 'ip', ['-json', 'link', 'show'], { signal }));
  return links.find((l) => l.name === name)?.mac;
}
