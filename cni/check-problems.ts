// CHECK's comparison, pure: what `ip -json addr show` and `ip -json route
// show` print inside the pod against what ADD set up (link up, MTU, the
// address, the route to the cluster network and the default route via the
// gateway; on a dual-stack node the same for IPv6, whose address must also
// be usable: not "tentative" or "dadfailed"). Returns every difference as a
// readable sentence.

export interface Expected {
  readonly ifname: string;
  /** "10.244.3.5/24" */
  readonly address: string;
  readonly mtu: number;
  readonly gateway: string;
  /** "10.244.0.0/16" */
  readonly network: string;
  readonly defaultRoute: boolean;
  /** dual-stack: the IPv6 side ("fd00:0:0:3::2/64", gateway, IPv6 network) */
  readonly v6?: { readonly address: string; readonly gateway: string; readonly network: string };
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
  const v4 = (link.addr_info ?? [])
    .filter((a) => a.family === 'inet')
    .map((a) => `${a.local}/${a.prefixlen}`);
  if (!v4.includes(e.address))
    out.push(`interface ${e.ifname} has addresses [${v4.join(', ')}], expected ${e.address}`);
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
    readonly routes: unknown[] | undefined;
    /** dual-stack: `route show table all dev <ifname>` (both families, every table) */
    readonly allRoutes?: unknown[] | undefined;
  },
): string[] {
  const link = (observed.addrs ?? []).find((l) => (l as AddrLink).ifname === e.ifname) as
    AddrLink | undefined;
  const out = [...linkProblems(e, link), ...routeProblems(e, (observed.routes ?? []) as Route[])];
  if (e.v6) {
    const main = ((observed.allRoutes ?? []) as Route[]).filter(
      (r) => r.table === undefined || r.table === 'main',
    );
    out.push(...routeProblems({ ...e.v6, defaultRoute: e.defaultRoute }, main));
  }
  return out;
}
