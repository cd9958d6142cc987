// Peer admission, pure: which peer leases may become kernel entries, and why
// the others are refused (docs/design.md, rule 6: trust nothing from the store).
// Two stages:
//   - `checkPeer`, one lease against our network config and our own lease:
//     its subnet (size, inside the Network and, in etcd mode, inside
//     SubnetMin..SubnetMax, not over our own), its PublicIP (a unicast host,
//     not ours, not inside the pod Network, on-link for host-gw), its
//     backend type, VNI and VtepMAC (present, not ours); and for a
//     dual-stack peer the same per IPv6 field (subnet6, PublicIPv6,
//     BackendV6Data);
//   - `admitPeers`, the peer set as a whole: subnets that overlap another
//     peer's (a wider one is refused, never the narrower ones it covers) and
//     a subnet or VtepMAC claimed by more than one peer (the first claim, by
//     the store's own order, keeps it; without a clear first, all are
//     refused). Neither depends on the order leases were seen, so every node
//     refuses the same peers. Conflicts are found per family: overlapping
//     in IPv4 or in IPv6 is a conflict.
// A record is admitted or refused whole: a dual-stack peer with a bad IPv6
// half (including unreadable IPv6 fields, its `v6Problem`) is refused with its
// reason, never routed for IPv4 alone (its pods would be half reachable, the
// refusal visible only by an absence). A peer's IPv6 half is ignored when our
// config has no IPv6, and when the peer publishes no PublicIPv6 at all (a node
// not running dual-stack yet, while the cluster already gives it an IPv6
// podCIDR: a rolling upgrade); see forOurFamilies.
// IPv6 only (our config's `ipv4` null): every IPv4 field of a peer (subnet,
// PublicIP, BackendData) is ignored, as an IPv4-only node ignores the IPv6
// ones, and a peer is checked on its IPv6 half alone. A peer with no subnet
// in a family we run (an IPv4-only peer seen from an IPv6-only node, an
// IPv6-only one from an IPv4-only node) is refused as `malformed`, saying so;
// a dual-stack node routes an IPv6-only peer (Kubernetes: a Node with only an
// IPv6 podCIDR) for IPv6, the only family its pods have.
// Every refusal has a short `reason` (the metric's label) and a detail for
// people, with values from the store truncated.
import type { Ipv4NetConfig, NetConfig } from '../config/netconf.ts';
import {
  containsAddr,
  containsCidr,
  formatCidr,
  isUnicastHost,
  lastAddress,
  overlaps,
  parseIpv4,
  type Cidr,
} from '../net/ipv4.ts';
import { onLink, onLink6, type IfaceInfo } from '../net/iface.ts';
import {
  containsAddr6,
  containsCidr6,
  formatCidr6,
  isUnicastHost6,
  lastAddress6,
  overlaps6,
  parseIpv6,
  type Cidr6,
} from '../net/ipv6.ts';
import type { Lease } from './types.ts';

export const REFUSAL_REASONS = [
  'malformed',
  'subnet-size',
  'outside-network',
  'outside-range',
  'overlaps-own',
  'subnet-conflict',
  'public-ip',
  'backend-type',
  'vni',
  'vtep-mac',
  'not-on-link',
] as const;

export type RefusalReason = (typeof REFUSAL_REASONS)[number];

export interface Refusal {
  readonly reason: RefusalReason;
  readonly detail: string;
}

export interface PeerContext {
  readonly config: NetConfig;
  /** our own subnet, when we hold one (null or undefined: none, or an IPv6-only lease) */
  readonly self: Cidr | null | undefined;
  /** our own PublicIP: a peer claiming it would have us route to ourselves (null: IPv6 only) */
  readonly selfPublicIp?: string | null;
  /** our own VtepMAC (vxlan): a peer claiming it would take our FDB entry */
  readonly selfVtepMac?: string;
  /** dual-stack: our own IPv6 subnet, PublicIPv6 and IPv6 VtepMAC, the same checks per family */
  readonly self6?: Cidr6 | null;
  readonly selfPublicIpv6?: string | null;
  readonly selfVtepMac6?: string;
  /**
   * subnets come from elsewhere (Kubernetes podCIDRs): any prefix inside Network, not only
   * SubnetLen
   */
  readonly anySubnetSize?: boolean;
  /**
   * the underlay interface: with host-gw a peer must be on one of its networks (a route via an
   * address that is not on-link is refused by the kernel, and would be wrong if it were not)
   */
  readonly underlay?: Pick<IfaceInfo, 'name' | 'networks' | 'networks6'>;
}

/** A value from the store, cut to a length a log line can carry. */
export function truncated(value: string, max = 64): string {
  return value.length <= max ? value : `${value.slice(0, max)}… (${value.length} chars)`;
}

function refuse(reason: RefusalReason, detail: string): Refusal {
  return { reason, detail };
}

function publicIpProblem(
  raw: string | null,
  subnet4: Cidr,
  ipv4: Ipv4NetConfig,
  ctx: PeerContext,
): Refusal | undefined {
  if (raw === null)
    return refuse(
      'public-ip',
      `subnet ${formatCidr(subnet4)} without a PublicIP to reach it through`,
    );
  const shown = truncated(raw);
  const ip = parseIpv4(raw);
  if (ip === undefined || !isUnicastHost(ip))
    return refuse('public-ip', `PublicIP ${shown} is not a unicast host address`);
  if (ctx.selfPublicIp !== undefined && ctx.selfPublicIp !== null && raw === ctx.selfPublicIp)
    return refuse('public-ip', `PublicIP ${shown} is this node's own address`);
  if (containsAddr(ipv4.network, ip))
    return refuse(
      'public-ip',
      `PublicIP ${shown} is inside the pod Network ${formatCidr(ipv4.network)}`,
    );
  return undefined;
}

/**
 * Why a peer has no subnet in a family our config runs: our IPv6-only node and an IPv4-only peer,
 * our IPv4-only node and an IPv6-only peer, or a lease with no subnet at all.
 */
function noFamily(lease: Lease, config: NetConfig): Refusal {
  const theirs = lease.subnet
    ? `it leases IPv4 only (subnet ${formatCidr(lease.subnet)})`
    : lease.subnet6
      ? `it leases IPv6 only (IPv6 subnet ${formatCidr6(lease.subnet6)})`
      : 'it leases no subnet at all';
  const ours = !config.ipv4
    ? 'this node runs IPv6 only ("EnableIPv4": false) and routes peers over IPv6 alone'
    : !config.ipv6
      ? 'this node runs IPv4 only (no "EnableIPv6")'
      : 'this node routes IPv4 and IPv6';
  return refuse('malformed', `no subnet in a family this node runs: ${theirs}; ${ours}`);
}

/** Why one peer lease must not reach the kernel, or undefined. */
export function checkPeer(lease: Lease, ctx: PeerContext): Refusal | undefined {
  const { config } = ctx;
  // the families this peer is routed for: those it leases that we run (IPv4 fields are ignored on
  // an IPv6-only node, even when the lease was not passed through forOurFamilies)
  const subnet4 = config.ipv4 ? lease.subnet : null;
  const subnet6 = config.ipv6 ? (lease.subnet6 ?? null) : null;
  if (!subnet4 && !subnet6) return noFamily(lease, config);
  if (subnet4 && config.ipv4) {
    const bad = checkSubnet4(lease, subnet4, config.ipv4, ctx);
    if (bad) return bad;
  }
  if (lease.attrs.backendType !== config.backend.type) {
    return refuse(
      'backend-type',
      `BackendType ${truncated(lease.attrs.backendType)} differs from ours (${config.backend.type})`,
    );
  }
  // (checkSubnet4 refused an IPv4 subnet without a PublicIP)
  if (subnet4 && lease.attrs.publicIp !== null) {
    const bad = checkBackend4(lease, lease.attrs.publicIp, ctx);
    if (bad) return bad;
  }
  return subnet6 ? checkPeer6(lease, subnet6, ctx) : undefined;
}

/** The IPv4 subnet and PublicIP of a peer with one, when our config has IPv4. */
function checkSubnet4(
  lease: Lease,
  subnet4: Cidr,
  ipv4: Ipv4NetConfig,
  ctx: PeerContext,
): Refusal | undefined {
  const { self } = ctx;
  // the subnet's text is made for a refusal only (an admitted peer's would never be read)
  if (!ctx.anySubnetSize && subnet4.prefix !== ipv4.subnetLen)
    return refuse(
      'subnet-size',
      `subnet ${formatCidr(subnet4)} is not a /${ipv4.subnetLen} (SubnetLen)`,
    );
  if (!containsCidr(ipv4.network, subnet4))
    return refuse(
      'outside-network',
      `subnet ${formatCidr(subnet4)} is outside Network ${formatCidr(ipv4.network)}`,
    );
  if (!ctx.anySubnetSize && (subnet4.base < ipv4.subnetMin || subnet4.base > ipv4.subnetMax)) {
    return refuse('outside-range', `subnet ${formatCidr(subnet4)} is outside SubnetMin..SubnetMax`);
  }
  if (self && overlaps(self, subnet4))
    return refuse(
      'overlaps-own',
      `subnet ${formatCidr(subnet4)} overlaps our own subnet ${formatCidr(self)}`,
    );
  return publicIpProblem(lease.attrs.publicIp, subnet4, ipv4, ctx);
}

/** The IPv4 backend fields (BackendData; host-gw: PublicIP on-link) of a peer with a PublicIP. */
function checkBackend4(lease: Lease, publicIp: string, ctx: PeerContext): Refusal | undefined {
  const { config } = ctx;
  if (config.backend.type === 'vxlan') {
    const vni = lease.attrs.backendData?.vni;
    if (vni !== config.backend.vni)
      return refuse(
        'vni',
        `BackendData.VNI ${truncated(String(vni))} differs from ours (${config.backend.vni})`,
      );
    const mac = lease.attrs.backendData?.vtepMac;
    // without a VtepMAC a peer needs no FDB entry only when DirectRouting reaches it directly
    const direct = config.backend.directRouting && ctx.underlay && onLink(ctx.underlay, publicIp);
    if (mac === undefined && !direct)
      return refuse('vtep-mac', 'vxlan lease without BackendData.VtepMAC');
    if (
      mac !== undefined &&
      ctx.selfVtepMac !== undefined &&
      mac.toLowerCase() === ctx.selfVtepMac.toLowerCase()
    ) {
      return refuse('vtep-mac', `VtepMAC ${mac} is this node's own`);
    }
  }
  const u = ctx.underlay;
  if (config.backend.type === 'host-gw' && u && !onLink(u, publicIp)) {
    const networks = u.networks.join(', ') || 'no IPv4 networks';
    return refuse(
      'not-on-link',
      `PublicIP ${publicIp} is not on-link on ${u.name} (${networks}); host-gw needs every node on one L2 network`,
    );
  }
  return undefined;
}

/** Our own PublicIPv6 as a number, parsed once for every peer it is compared with. */
let self6: { readonly text: string; readonly addr: bigint | undefined } | undefined;
function parsedSelf6(text: string): bigint | undefined {
  if (self6?.text !== text) self6 = { text, addr: parseIpv6(text) };
  return self6.addr;
}

/**
 * The IPv6 half of `checkPeer`, for a dual-stack or IPv6-only peer when our config has IPv6: the
 * same checks as for IPv4, on subnet6, PublicIPv6 (required: an IPv6 subnet is reached through it)
 * and BackendV6Data.
 */
function checkPeer6(lease: Lease, subnet6: Cidr6, ctx: PeerContext): Refusal | undefined {
  const { config } = ctx;
  const ipv6 = config.ipv6;
  if (!ipv6) return undefined;
  if (lease.attrs.v6Problem !== undefined)
    return refuse('malformed', truncated(lease.attrs.v6Problem, 200));
  // the subnet's text is made for a refusal only (an admitted peer's would never be read)
  if (!ctx.anySubnetSize && subnet6.prefix !== ipv6.subnetLen)
    return refuse(
      'subnet-size',
      `IPv6 subnet ${formatCidr6(subnet6)} is not a /${ipv6.subnetLen} (IPv6SubnetLen)`,
    );
  if (!containsCidr6(ipv6.network, subnet6))
    return refuse(
      'outside-network',
      `IPv6 subnet ${formatCidr6(subnet6)} is outside IPv6Network ${formatCidr6(ipv6.network)}`,
    );
  if (!ctx.anySubnetSize && (subnet6.base < ipv6.subnetMin || subnet6.base > ipv6.subnetMax))
    return refuse(
      'outside-range',
      `IPv6 subnet ${formatCidr6(subnet6)} is outside IPv6SubnetMin..IPv6SubnetMax`,
    );
  if (ctx.self6 && overlaps6(ctx.self6, subnet6))
    return refuse(
      'overlaps-own',
      `IPv6 subnet ${formatCidr6(subnet6)} overlaps our own IPv6 subnet ${formatCidr6(ctx.self6)}`,
    );
  const raw = lease.attrs.publicIpv6;
  if (raw === null || raw === undefined)
    return refuse(
      'public-ip',
      `IPv6 subnet ${formatCidr6(subnet6)} without a PublicIPv6 to reach it through`,
    );
  const shown = truncated(raw);
  const ip = parseIpv6(raw);
  if (ip === undefined || !isUnicastHost6(ip))
    return refuse('public-ip', `PublicIPv6 ${shown} is not a unicast host address`);
  if (ctx.selfPublicIpv6 && ip === parsedSelf6(ctx.selfPublicIpv6))
    return refuse('public-ip', `PublicIPv6 ${shown} is this node's own address`);
  if (containsAddr6(ipv6.network, ip))
    return refuse(
      'public-ip',
      `PublicIPv6 ${shown} is inside the pod IPv6Network ${formatCidr6(ipv6.network)}`,
    );
  if (config.backend.type === 'vxlan') {
    const data = lease.attrs.backendData6;
    const direct = config.backend.directRouting && ctx.underlay && onLink6(ctx.underlay, raw);
    if (!data && !direct)
      return refuse('vtep-mac', 'vxlan lease with an IPv6 subnet but no BackendV6Data.VtepMAC');
    if (data && data.vni !== config.backend.vni)
      return refuse(
        'vni',
        `BackendV6Data.VNI ${truncated(String(data.vni))} differs from ours (${config.backend.vni})`,
      );
    if (
      data &&
      ctx.selfVtepMac6 !== undefined &&
      data.vtepMac.toLowerCase() === ctx.selfVtepMac6.toLowerCase()
    )
      return refuse('vtep-mac', `IPv6 VtepMAC ${data.vtepMac} is this node's own`);
  }
  const u = ctx.underlay;
  if (config.backend.type === 'host-gw' && u?.networks6 && !onLink6(u, raw)) {
    const networks = u.networks6.join(', ') || 'no IPv6 networks';
    return refuse(
      'not-on-link',
      `PublicIPv6 ${shown} is not on-link on ${u.name} (${networks}); host-gw needs every node on one L2 network`,
    );
  }
  return undefined;
}

/**
 * The lease as far as our config can use it: a dual-stack peer's IPv6 half is dropped when our
 * config has no IPv6 (flannel, with EnableIPv6 false, reads only the IPv4 half too), so that it
 * neither routes nor conflicts over a family we do not run; and when the peer publishes no
 * PublicIPv6 (nor an unreadable one): it does not run dual-stack yet, though its Node already has
 * an IPv6 podCIDR (a rolling upgrade), and is reachable over IPv4 as before. Likewise its IPv4 half
 * (subnet, PublicIP, BackendData) is dropped when our config has no IPv4 (IPv6 only, as flannel
 * with EnableIPv4 false). A lease with a single family is left as it is: there is nothing else to
 * route it by, and checkPeer refuses it, naming that family, when we do not run it.
 */
export function forOurFamilies(lease: Lease, config: NetConfig): Lease {
  const v4Fields =
    lease.subnet !== null || lease.attrs.publicIp !== null || !!lease.attrs.backendData;
  const ours =
    config.ipv4 || !lease.subnet6 || !v4Fields
      ? lease
      : { ...lease, subnet: null, attrs: { ...lease.attrs, publicIp: null, backendData: null } };
  if (!ours.subnet6 || !ours.subnet) return ours;
  const published =
    (ours.attrs.publicIpv6 !== null && ours.attrs.publicIpv6 !== undefined) ||
    ours.attrs.v6Problem !== undefined;
  if (config.ipv6 && published) return ours;
  const { subnet6: _, ...v4 } = ours;
  return v4;
}

export interface Admission {
  readonly admitted: Lease[];
  readonly refused: { readonly lease: Lease; readonly refusal: Refusal }[];
}

const byKey = (a: Lease, b: Lease): number => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);

/**
 * Of peers claiming one thing (a subnet, a VtepMAC), the one that claimed it
 * first, if the store says so unambiguously (every claimant has a
 * `claimedAt`, and one is strictly earliest); otherwise none keeps it.
 */
function firstClaim(claimants: readonly Lease[]): Lease | undefined {
  if (claimants.some((c) => c.claimedAt === undefined)) return undefined;
  const sorted = [...claimants].sort((a, b) => (a.claimedAt ?? 0) - (b.claimedAt ?? 0));
  const [first, second] = sorted;
  return first && second && (first.claimedAt ?? 0) < (second.claimedAt ?? 0) ? first : undefined;
}

/**
 * Refuses every claimant of one thing but the first claim (all of them when there is no clear
 * first).
 */
function refuseLaterClaims(
  claimants: readonly Lease[],
  what: string,
  refused: Map<string, Refusal>,
): void {
  const first = firstClaim(claimants);
  const keys = claimants.map((c) => truncated(c.key)).sort();
  for (const c of claimants) {
    if (c === first) continue;
    const detail = first
      ? `${what} was claimed first by peer ${truncated(first.key)}`
      : `${what} is claimed by ${claimants.length} peers (${keys.slice(0, 4).join(', ')}${keys.length > 4 ? ', …' : ''}) and none claimed it first`;
    refused.set(c.key, refuse(/VtepMAC/.test(what) ? 'vtep-mac' : 'subnet-conflict', detail));
  }
}

/** One family's subnet of a lease as numbers (IPv4) or bigints (IPv6), for the conflict sweep. */
interface Span<T extends number | bigint = number | bigint> {
  readonly base: T;
  readonly prefix: number;
  readonly last: T;
}

// IPv4 as numbers: no two bigints made a peer, and the sort compares numbers
function span4(l: Lease): Span<number> | undefined {
  const c = l.subnet;
  return c ? { base: c.base, prefix: c.prefix, last: lastAddress(c) } : undefined;
}

function span6(l: Lease): Span<bigint> | undefined {
  const c = l.subnet6;
  return c ? { base: c.base, prefix: c.prefix, last: lastAddress6(c) } : undefined;
}

/**
 * A span's text, made for a conflict's reason only. Not a closure in each span: the bundle names
 * every function it makes (keepNames), which cost a cold start of 5,000 peers 10 ms.
 */
function spanText(s: Span, family: 4 | 6): string {
  return family === 4
    ? formatCidr({ base: Number(s.base), prefix: s.prefix })
    : formatCidr6({ base: BigInt(s.base), prefix: s.prefix });
}

/**
 * Subnet conflicts among peers that each passed `checkPeer`, in one family
 * (`spanOf`: the IPv4 subnet of peers with one, or the IPv6 one of dual-stack
 * and IPv6-only peers). CIDRs either
 * nest or are disjoint: sorted by base, then wider first, every lease still
 * open on the stack when a later one starts contains it. A container is
 * refused (it would capture the narrower peers' traffic); of peers claiming
 * the very same subnet, the first claim keeps it (all are refused when the
 * store cannot say which came first).
 */
function subnetConflicts<T extends number | bigint>(
  peers: readonly Lease[],
  spanOf: (l: Lease) => Span<T> | undefined,
  family: 4 | 6,
  what: string,
): Map<string, Refusal> {
  const spans = peers.flatMap((lease) => {
    const span = spanOf(lease);
    return span ? [{ lease, span }] : [];
  });
  const sorted = spans.sort(
    (a, b) =>
      (a.span.base < b.span.base ? -1 : a.span.base > b.span.base ? 1 : 0) ||
      a.span.prefix - b.span.prefix ||
      byKey(a.lease, b.lease),
  );
  const refused = new Map<string, Refusal>();
  const same = new Map<string, Lease[]>();
  const open: (typeof spans)[number][] = [];
  for (const peer of sorted) {
    while (open.length > 0 && (open.at(-1) as (typeof spans)[number]).span.last < peer.span.base)
      open.pop();
    for (const outer of open) {
      if (outer.span.prefix === peer.span.prefix) {
        const id = spanText(peer.span, family);
        same.set(id, [...(same.get(id) ?? [outer.lease]), peer.lease]);
      } else if (!refused.has(outer.lease.key)) {
        refused.set(
          outer.lease.key,
          refuse(
            'subnet-conflict',
            `${what} ${spanText(outer.span, family)} covers peer ${truncated(peer.lease.key)}'s ${spanText(peer.span, family)}`,
          ),
        );
      }
    }
    open.push(peer);
  }
  for (const [subnet, claimants] of same)
    refuseLaterClaims(claimants, `${what} ${subnet}`, refused);
  return refused;
}

/**
 * VtepMACs claimed by more than one peer: the first claim keeps it, the later ones are refused
 * (all, without a clear first).
 */
function macConflicts(
  peers: readonly Lease[],
  macOf: (l: Lease) => string | undefined,
  what: string,
): Map<string, Refusal> {
  // each MAC's first claimant, and a list only for a MAC claimed again (no array per peer)
  const first = new Map<string, Lease>();
  const claimants = new Map<string, Lease[]>();
  for (const p of peers) {
    const mac = macOf(p)?.toLowerCase();
    if (mac === undefined) continue;
    const had = first.get(mac);
    if (had === undefined) first.set(mac, p);
    else {
      const owners = claimants.get(mac);
      if (owners) owners.push(p);
      else claimants.set(mac, [had, p]);
    }
  }
  const refused = new Map<string, Refusal>();
  for (const [mac, owners] of claimants) refuseLaterClaims(owners, `${what} ${mac}`, refused);
  return refused;
}

/**
 * The set-level stage alone, over peers that each passed `checkPeer`: subnet and VtepMAC conflicts.
 */
export function withoutConflicts(peers: readonly Lease[], config: NetConfig): Admission {
  const none = new Map<string, Refusal>();
  const vxlan = config.backend.type === 'vxlan';
  // the IPv4 halves, of peers that have one, unless we run IPv6 only (then none is used)
  const conflicts = config.ipv4 ? subnetConflicts(peers, span4, 4, 'subnet') : none;
  const macs =
    config.ipv4 && vxlan
      ? macConflicts(
          peers.filter((p) => p.subnet),
          (l) => l.attrs.backendData?.vtepMac,
          'VtepMAC',
        )
      : none;
  // the IPv6 halves (only peers that kept one: see forOurFamilies), checked the same way
  const conflicts6 = config.ipv6 ? subnetConflicts(peers, span6, 6, 'IPv6 subnet') : none;
  const macs6 =
    config.ipv6 && vxlan
      ? macConflicts(
          peers.filter((p) => p.subnet6),
          (l) => l.attrs.backendData6?.vtepMac,
          'IPv6 VtepMAC',
        )
      : none;
  const admitted: Lease[] = [];
  const refused: { lease: Lease; refusal: Refusal }[] = [];
  for (const p of peers) {
    const r = conflicts.get(p.key) ?? macs.get(p.key) ?? conflicts6.get(p.key) ?? macs6.get(p.key);
    if (r) refused.push({ lease: p, refusal: r });
    else admitted.push(p);
  }
  return { admitted, refused: refused.sort((a, b) => byKey(a.lease, b.lease)) };
}

/**
 * Both stages: the peers that may become kernel entries (in the order given), and the others with
 * why (in key order).
 */
export function admitPeers(peers: readonly Lease[], ctx: PeerContext): Admission {
  const refused: { lease: Lease; refusal: Refusal }[] = [];
  const passed: Lease[] = [];
  for (const peer of peers) {
    const p = forOurFamilies(peer, ctx.config);
    const r = checkPeer(p, ctx);
    if (r) refused.push({ lease: p, refusal: r });
    else passed.push(p);
  }
  const set = withoutConflicts(passed, ctx.config);
  return {
    admitted: set.admitted,
    refused: [...refused, ...set.refused].sort((a, b) => byKey(a.lease, b.lease)),
  };
}
