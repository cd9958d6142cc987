// CHECK's comparison, pure: what `ip -json addr show` and `ip -json route
// show` print inside the pod against what ADD set up (link up, MTU, the
// address, the route to the cluster network and the default route via the
// gateway; on a dual-stack node the same for IPv6, whose address must also
// be usable: not "tentative" or "dadfailed"; on an IPv6-only node the IPv6
// side alone). Returns every difference as a readable sentence.

export interface Expected {
  readonly ifname: string;
  readonly mtu: number;
  readonly defaultRoute: boolean;
  /** the IPv4 side ("10.244.3.5/24", gateway, "10.244.0.0/16"); not on an IPv6-only node */
  readonly v4?: ExpectedFamily | undefined;
  /** dual-stack, IPv6 only: the IPv6 side ("fd00:0:0:3::2/64", gateway, IPv6 network) */
  readonly v6?: ExpectedFamily | undefined;
}

export interface ExpectedFamily {
  /** the address with its prefix length */
  readonly address: string;
  readonly gateway: string;
  /** the cluster network of that family */
  readonly network: string;
}

interface AddrInfo {
  family?: string;
  local?: string;
  prefixlen?: number;
  tentative?: boolean;
  dadfailed?: boolean;
}

interface AddrLink {
  ifname?: string;
  mtu?: number;
  flags?: string[];
  addr_info?: AddrInfo[];
}

interface Route {
  dst?: string;
  gateway?: string;
  /** set for routes outside the main table (`route show table all`) */
  table?: string;
}

function linkProblems(e: Expected, link: AddrLink | undefined): string[] {
  if (!link) return [`interface ${e.ifname} is missing`];
  const out: string[] = [];
  if (!link.flags?.includes('UP')) out.push(`interface ${e.ifname} is down`);
  if (link.mtu !== e.mtu) out.push(`interface ${e.ifname} has MTU ${link.mtu}, expected ${e.mtu}`);
  if (e.v4) {
    const v4 = (link.addr_info ?? [])
      .filter((a) => a.family === 'inet')
      .map((a) => `${a.local}/${a.prefixlen}`);
    if (!v4.includes(e.v4.address))
      out.push(`interface ${e.ifname} has addresses [${v4.join(', ')}], expected ${e.v4.address}`);
  }
  if (e.v6) out.push(...addr6Problems(e.ifname, e.v6.address, link.addr_info ?? []));
  return out;
}

function addr6Problems(ifname: string, address: string, infos: readonly AddrInfo[]): string[] {
  const v6 = infos.filter((a) => a.family === 'inet6');
  const found = v6.find((a) => `${a.local}/${a.prefixlen}` === address);
  if (!found) {
    const list = v6.map((a) => `${a.local}/${a.prefixlen}`).join(', ');
    return [`interface ${ifname} has IPv6 addresses [${list}], expected ${address}`];
  }
  if (found.dadfailed) return [`IPv6 address ${address} on ${ifname} failed duplicate detection`];
  if (found.tentative) return [`IPv6 address ${address} on ${ifname} is still tentative`];
  return [];
}

function routeProblems(
  e: { network: string; gateway: string; defaultRoute: boolean },
  routes: readonly Route[],
): string[] {
  const has = (dst: string): boolean =>
    routes.some((r) => r.dst === dst && r.gateway === e.gateway);
  const out: string[] = [];
  if (!has(e.network)) out.push(`no route to ${e.network} via ${e.gateway}`);
  if (e.defaultRoute && !has('default')) out.push(`no default route via ${e.gateway}`);
  return out;
}

/** Every way the pod's interface differs from `e`; empty when it matches. */
export function checkProblems(
  e: Expected,
  observed: {
    readonly addrs: unknown[] | undefined;
    /** `route show dev <ifname>` (IPv4 routes; with `e.v4`) */
    readonly routes?: unknown[] | undefined;
    /** `route show table all dev <ifname>` (both families, every table; with `e.v6`) */
    readonly allRoutes?: unknown[] | undefined;
  },
): string[] {
  const link = (observed.addrs ?? []).find((l) => (l as AddrLink).ifname === e.ifname) as
    AddrLink | undefined;
  const out = linkProblems(e, link);
  if (e.v4)
    out.push(
      ...routeProblems(
        { ...e.v4, defaultRoute: e.defaultRoute },
        (observed.routes ?? []) as Route[],
      ),
    );
  if (e.v6) {
    const main = ((observed.allRoutes ?? []) as Route[]).filter(
      (r) => r.table === undefined || r.table === 'main',
    );
    out.push(...routeProblems({ ...e.v6, defaultRoute: e.defaultRoute }, main));
  }
  return out;
}
