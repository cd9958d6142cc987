// CHECK's comparison, pure: what `ip -json addr show` and `ip -json route
// show` print inside the pod against what ADD set up (link up, MTU, the
// address, the route to the cluster network and the default route via the
// gateway). Returns every difference as a readable sentence.

export interface Expected {
  readonly ifname: string;
  /** "10.244.3.5/24" */
  readonly address: string;
  readonly mtu: number;
  readonly gateway: string;
  /** "10.244.0.0/16" */
  readonly network: string;
  readonly defaultRoute: boolean;
}

interface AddrLink {
  ifname?: string;
  mtu?: number;
  flags?: string[];
  addr_info?: { family?: string; local?: string; prefixlen?: number }[];
}

interface Route {
  dst?: string;
  gateway?: string;
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
  return out;
}

function routeProblems(e: Expected, routes: readonly Route[]): string[] {
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
  observed: { readonly addrs: unknown[] | undefined; readonly routes: unknown[] | undefined },
): string[] {
  const link = (observed.addrs ?? []).find((l) => (l as AddrLink).ifname === e.ifname) as
    AddrLink | undefined;
  return [...linkProblems(e, link), ...routeProblems(e, (observed.routes ?? []) as Route[])];
}
