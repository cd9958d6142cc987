// Which interface carries overlay traffic and which address peers reach us
// at: flannel's --iface / --iface-regex / default-route rules, and on a
// dual-stack node the same interface's IPv6 address (--public-ipv6 overrides
// what peers are told). With IPv4 off (IPv6 only) the same rules over IPv6
// addresses and the IPv6 default route, as flannel's LookupExtIface, and no
// IPv4 address is needed. The selection is pure over `ip -json` output;
// `discoverInterface` does the two reads.
import { TwillError } from '../errors.ts';
import { runJson, type Runner } from '../exec/runner.ts';
import { containsAddr, isIpv4, parseCidr, parseIpv4, type Cidr } from './ipv4.ts';
import { canonicalIpv6, containsAddr6, parseCidr6, parseIpv6, type Cidr6 } from './ipv6.ts';

export interface IfaceInfo {
  readonly name: string;
  readonly mtu: number;
  readonly mac: string;
  /** IPv4 addresses in the order the kernel lists them */
  readonly addrs: readonly string[];
  /** the same addresses with their prefix length ("10.0.0.2/24"): the on-link networks */
  readonly networks: readonly string[];
  /** global IPv6 addresses with their prefix length ("fd00::2/64"), in the kernel's order */
  readonly networks6?: readonly string[];
}

/**
 * An interface's on-link networks parsed, once per list: admission asks of every peer's address,
 * 5,000 times in a cold start, and the list is the same array each time.
 */
const parsedNetworks = new WeakMap<readonly string[], readonly Cidr[]>();
const parsedNetworks6 = new WeakMap<readonly string[], readonly Cidr6[]>();

const parseNetwork = (n: string): Cidr | undefined => parseCidr(n, { strict: false });
const parseNetwork6 = (n: string): Cidr6 | undefined => parseCidr6(n, { strict: false });

function parsedOnce<C>(
  memo: WeakMap<readonly string[], readonly C[]>,
  networks: readonly string[],
  parse: (text: string) => C | undefined,
): readonly C[] {
  let parsed = memo.get(networks);
  if (parsed === undefined) {
    parsed = networks.flatMap((n) => parse(n) ?? []);
    memo.set(networks, parsed);
  }
  return parsed;
}

/** True when `ip` lies in one of the interface's on-link networks. */
export function onLink(iface: Pick<IfaceInfo, 'networks'>, ip: string): boolean {
  const addr = parseIpv4(ip);
  if (addr === undefined) return false;
  const networks = parsedOnce(parsedNetworks, iface.networks, parseNetwork);
  return networks.some((cidr) => containsAddr(cidr, addr));
}

/** True when the IPv6 address `ip` lies in one of the interface's global IPv6 networks. */
export function onLink6(iface: Pick<IfaceInfo, 'networks6'>, ip: string): boolean {
  const addr = parseIpv6(ip);
  if (addr === undefined || iface.networks6 === undefined) return false;
  const networks = parsedOnce(parsedNetworks6, iface.networks6, parseNetwork6);
  return networks.some((cidr) => containsAddr6(cidr, addr));
}

export interface IfaceChoice {
  readonly iface: IfaceInfo;
  /** the interface's IPv4 address used for the underlay; null when IPv4 is off (IPv6 only) */
  readonly ifaceIp: string | null;
  /** what peers are told (--public-ip, or the interface address); null when IPv4 is off */
  readonly publicIp: string | null;
  /**
   * dual-stack or IPv6 only: the interface's global IPv6 address used for the IPv6 underlay, and
   * what peers are told (--public-ipv6, or that address); absent or null when IPv6 is off
   */
  readonly ifaceIp6?: string | null;
  readonly publicIp6?: string | null;
}

export interface IfaceRequest {
  readonly iface: readonly string[];
  readonly ifaceRegex: readonly string[];
  readonly publicIp: string | undefined;
  /** dual-stack (EnableIPv6): also pick the interface's IPv6 address, and fail without one */
  readonly ipv6?: boolean;
  /**
   * false: IPv4 is off ("EnableIPv4": false, IPv6 only): the interface is chosen by its IPv6
   * addresses and the IPv6 default route, needs no IPv4 address, and --public-ip is an error
   */
  readonly ipv4?: boolean;
  /** --public-ipv6: what peers are told instead of the interface's IPv6 address */
  readonly publicIpv6?: string | undefined;
}

interface IpAddrInfoJson {
  family?: string;
  local?: string;
  prefixlen?: number;
  scope?: string;
  deprecated?: boolean;
  tentative?: boolean;
  dadfailed?: boolean;
}

interface IpAddrJson {
  ifname?: string;
  mtu?: number;
  address?: string;
  addr_info?: IpAddrInfoJson[];
}

/**
 * An IPv6 address the underlay can use: global scope (not link-local or host), not deprecated
 * (flannel skips IFA_F_DEPRECATED too), and neither still in duplicate address detection
 * (tentative: the kernel will not send from it yet) nor a duplicate (dadfailed).
 */
function usableIpv6(a: IpAddrInfoJson): boolean {
  return (
    a.family === 'inet6' &&
    a.scope === 'global' &&
    a.deprecated !== true &&
    a.tentative !== true &&
    a.dadfailed !== true &&
    a.local !== undefined &&
    canonicalIpv6(a.local) !== undefined
  );
}

/** Parses `ip -json addr show` output into interfaces. */
export function parseIpAddr(json: unknown): IfaceInfo[] {
  if (!Array.isArray(json)) return [];
  return (json as IpAddrJson[]).map((l) => {
    const inet = (l.addr_info ?? []).filter((a) => a.family === 'inet' && a.local);
    const inet6 = (l.addr_info ?? []).filter(usableIpv6);
    return {
      name: l.ifname ?? '',
      mtu: l.mtu ?? 1500,
      mac: l.address ?? '',
      addrs: inet.map((a) => a.local as string),
      networks: inet.map((a) => `${a.local as string}/${a.prefixlen ?? 32}`),
      networks6: inet6.map((a) => `${canonicalIpv6(a.local as string)}/${a.prefixlen ?? 128}`),
    };
  });
}

/**
 * The device of the first default route in `ip -json route show default` output (`-4` or `-6`:
 * the family is the listing's).
 */
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

/** The interface's global IPv6 addresses, without their prefix lengths, in the kernel's order. */
function addrs6(iface: IfaceInfo): string[] {
  return (iface.networks6 ?? []).map((n) => n.slice(0, n.lastIndexOf('/')));
}

/**
 * The chosen interface, with its IPv6 address when the request is dual-stack. Like flannel
 * (LookupExtIface: "failed to find IPv6 address for interface"), a dual-stack node whose interface
 * has no usable IPv6 address does not start: IPv6 pods there would be unreachable.
 */
function choose(
  iface: IfaceInfo,
  ip: string,
  req: IfaceRequest,
  ip6: string | undefined = addrs6(iface)[0],
): IfaceChoice {
  const v4 = { iface, ifaceIp: ip, publicIp: req.publicIp ?? ip };
  if (req.ipv6 !== true) return v4;
  if (ip6 === undefined) {
    throw new TwillError(
      'IFACE_NOT_FOUND',
      `failed to find IPv6 address for interface ${iface.name}: EnableIPv6 is set but it has no global IPv6 address that is not deprecated, tentative or a duplicate`,
    );
  }
  return { ...v4, ifaceIp6: ip6, publicIp6: publicIp6Of(req, ip6) };
}

/** An --iface value naming an IPv6 address: the link holding it, and the address (canonical). */
function byIpv6(links: readonly IfaceInfo[], wanted: string): [IfaceInfo, string] | undefined {
  const ip6 = canonicalIpv6(wanted);
  if (ip6 === undefined) return undefined;
  const hit = links.find((l) => addrs6(l).includes(ip6));
  return hit ? [hit, ip6] : undefined;
}

/**
 * Applies flannel's rules: each --iface in order, then each --iface-regex, then the default route
 * (`defaultDev`: the IPv4 default route's device, or with IPv4 off the IPv6 one's).
 */
export function selectInterface(
  links: readonly IfaceInfo[],
  defaultDev: string | undefined,
  req: IfaceRequest,
): IfaceChoice {
  if (req.ipv4 === false) return selectIpv6Only(links, defaultDev, req);
  for (const wanted of req.iface) {
    const v6 = byIpv6(links, wanted);
    if (v6 && v6[0].addrs.length > 0) return choose(v6[0], v6[0].addrs[0] as string, req, v6[1]);
    const hit = isIpv4(wanted)
      ? links.find((l) => l.addrs.includes(wanted))
      : links.find((l) => l.name === wanted);
    if (hit && hit.addrs.length > 0)
      return choose(hit, isIpv4(wanted) ? wanted : (hit.addrs[0] as string), req);
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
      if (ip) return choose(l, ip, req);
    }
    const named = links.find((l) => re.test(l.name) && l.addrs.length > 0);
    if (named) return choose(named, named.addrs[0] as string, req);
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
  // Dual-stack takes the IPv6 address from this same interface, the IPv4 default route's: flannel
  // does so (LookupExtIface uses the IPv6 default route only when IPv4 is off), so a node with its
  // IPv6 default route elsewhere still gets one underlay interface, as a flannel node would.
  return choose(iface, iface.addrs[0] as string, req);
}

/** With IPv4 off, what is chosen: the interface and its IPv6 address, no IPv4 one. */
function chooseIpv6Only(iface: IfaceInfo, ip6: string, req: IfaceRequest): IfaceChoice {
  return { iface, ifaceIp: null, publicIp: null, ifaceIp6: ip6, publicIp6: publicIp6Of(req, ip6) };
}

/** What peers are told in IPv6: --public-ipv6 (canonical; the flag is checked), else `ip6`. */
function publicIp6Of(req: IfaceRequest, ip6: string): string {
  return req.publicIpv6 === undefined ? ip6 : (canonicalIpv6(req.publicIpv6) ?? ip6);
}

/**
 * flannel's rules with IPv4 off (LookupExtIface with only the IPv6 stack): --iface names an
 * interface or one of its IPv6 addresses, --iface-regex matches IPv6 addresses then names, and
 * without either the IPv6 default route's device is used. Only interfaces with a usable global
 * IPv6 address count; none needs an IPv4 one.
 */
function selectIpv6Only(
  links: readonly IfaceInfo[],
  defaultDev: string | undefined,
  req: IfaceRequest,
): IfaceChoice {
  if (req.publicIp !== undefined) {
    throw new TwillError(
      'CONFIG_INVALID',
      `--public-ip ${req.publicIp}: the network config turns IPv4 off ("EnableIPv4": false), so no node has an IPv4 address to publish; use --public-ipv6 for the address peers reach this node at`,
    );
  }
  for (const wanted of req.iface) {
    const v6 = byIpv6(links, wanted);
    if (v6) return chooseIpv6Only(v6[0], v6[1], req);
    const hit = links.find((l) => l.name === wanted);
    const ip6 = hit ? addrs6(hit)[0] : undefined;
    if (hit && ip6 !== undefined) return chooseIpv6Only(hit, ip6, req);
  }
  if (req.iface.length > 0) {
    throw new TwillError(
      'IFACE_NOT_FOUND',
      `--iface ${req.iface.join(',')}: none of these is an interface (by name or IPv6 address) with a global IPv6 address that is not deprecated, tentative or a duplicate; IPv4 is off, so an IPv4 address names no interface`,
    );
  }
  for (const pattern of req.ifaceRegex) {
    const re = new RegExp(pattern);
    for (const l of links) {
      const ip6 = addrs6(l).find((a) => re.test(a));
      if (ip6 !== undefined) return chooseIpv6Only(l, ip6, req);
    }
    const named = links.find((l) => re.test(l.name) && addrs6(l).length > 0);
    if (named) return chooseIpv6Only(named, addrs6(named)[0] as string, req);
  }
  if (req.ifaceRegex.length > 0) {
    throw new TwillError(
      'IFACE_NOT_FOUND',
      `--iface-regex ${req.ifaceRegex.join(',')}: no interface name or global IPv6 address matches (IPv4 is off)`,
    );
  }
  if (!defaultDev) {
    throw new TwillError(
      'IFACE_NOT_FOUND',
      'no IPv6 default route to pick an interface from (IPv4 is off); pass --iface <name|ipv6>',
    );
  }
  const iface = links.find((l) => l.name === defaultDev);
  if (!iface)
    throw new TwillError(
      'IFACE_NOT_FOUND',
      `IPv6 default route device ${defaultDev}: no such interface`,
    );
  const ip6 = addrs6(iface)[0];
  if (ip6 === undefined) {
    throw new TwillError(
      'IFACE_NOT_FOUND',
      `failed to find IPv6 address for interface ${iface.name}: IPv4 is off and it has no global IPv6 address that is not deprecated, tentative or a duplicate`,
    );
  }
  return chooseIpv6Only(iface, ip6, req);
}

/** Reads the kernel's interfaces and default route, then selects. */
export async function discoverInterface(
  runner: Runner,
  req: IfaceRequest,
  signal: AbortSignal,
): Promise<IfaceChoice> {
  const ipv4 = req.ipv4 !== false;
  // without -4 the listing carries the IPv6 addresses a dual-stack or IPv6-only request needs
  const family = ipv4 && req.ipv6 !== true ? ['-4'] : [];
  const needDefault = req.iface.length === 0 && req.ifaceRegex.length === 0;
  // both at once: each is a process start on a cold start's path
  const [addrs, routes] = await Promise.all([
    runJson(runner, 'ip', ['-json', ...family, 'addr', 'show'], { signal }),
    // with IPv4 off, the IPv6 default route's device, as flannel's LookupExtIface
    needDefault
      ? runJson(runner, 'ip', ['-json', ipv4 ? '-4' : '-6', 'route', 'show', 'default'], {
          signal,
        })
      : Promise.resolve([]),
  ]);
  return selectInterface(parseIpAddr(addrs), defaultRouteDevice(routes), req);
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
