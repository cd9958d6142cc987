// Which peers of a listing nothing can refuse, before the node holds its lease (pure): what a
// cold start may write to the kernel while the rest of the listing is still being decoded
// (dataplane/early.ts). A subset of what admission (admit.ts) admits once the lease is ours,
// never more (docs/design.md, rule 6), in etcd mode with host-gw:
//   - each peer passes `checkPeer` against our config, our PublicIP(s) and the underlay, with no
//     subnet of our own yet. Our subnet is either our own old lease's (its PublicIP is ours, so
//     `checkPeer` refuses it here) or one the allocator picks free of every listed key that fits
//     the config; so no listed peer that passes `checkPeer` can overlap it (a key that does not
//     fit is refused, and the keys it overlaps are crowded, below);
//   - its key overlaps no other listed key in any family we run, valid or not: admission's
//     set-level stage refuses only peers whose subnets overlap another's (the first claim of one
//     subnet keeps it), so a peer overlapping nothing keeps its place whatever the others are.
//     In etcd mode a key names the lease's subnets, and every admitted subnet is SubnetLen wide;
//   - VtepMAC conflicts (vxlan) are not looked at: the early writer runs with host-gw only.
// A key that does not parse is a refused record, which no admitted peer conflicts with.
// What changes after the listing (a key created, one deleted) comes as events, after the first
// pass, as always.
import type { NetConfig } from '../config/netconf.ts';
import { lastAddress } from '../net/ipv4.ts';
import { lastAddress6 } from '../net/ipv6.ts';
import { checkPeer, forOurFamilies, type PeerContext } from './admit.ts';
import { parseLeaseKey } from './codec.ts';
import type { Lease, LeaseRecord } from './types.ts';

/** One family's subnet as a closed range of addresses. */
interface Range<T extends number | bigint> {
  readonly first: T;
  readonly last: T;
  readonly index: number;
}

/**
 * The indexes of ranges that overlap at least one other. Sorted by start: a range overlaps an
 * earlier one exactly when some earlier range ends at or after its start, and a later one exactly
 * when the next range starts at or before its end.
 */
function overlapping<T extends number | bigint>(ranges: Range<T>[]): Set<number> {
  const sorted = ranges.sort((a, b) => (a.first < b.first ? -1 : a.first > b.first ? 1 : 0));
  const hit = new Set<number>();
  let reach: T | undefined;
  for (let i = 0; i < sorted.length; i++) {
    const r = sorted[i] as Range<T>;
    const next = sorted[i + 1];
    if ((reach !== undefined && reach >= r.first) || (next && next.first <= r.last))
      hit.add(r.index);
    if (reach === undefined || r.last > reach) reach = r.last;
  }
  return hit;
}

/** The keys of `keys` whose subnets overlap another key's, in the families `config` runs. */
export function overlappingKeys(keys: readonly string[], config: NetConfig): Set<string> {
  const v4: Range<number>[] = [];
  const v6: Range<bigint>[] = [];
  keys.forEach((key, index) => {
    let parsed;
    try {
      parsed = parseLeaseKey(key);
    } catch {
      return;
    }
    const { subnet, subnet6 } = parsed;
    if (config.ipv4) v4.push({ first: subnet.base, last: lastAddress(subnet), index });
    if (config.ipv6 && subnet6)
      v6.push({ first: subnet6.base, last: lastAddress6(subnet6), index });
  });
  const hit = new Set([...overlapping(v4), ...overlapping(v6)]);
  return new Set([...hit].map((i) => keys[i] as string));
}

/**
 * The early admission of one listing: `begin` with every key, then `admit` each record; a lease
 * it returns is admitted by admit.ts too once our lease is ours.
 */
export class EarlyPeers {
  private crowded = new Set<string>();
  private readonly ctx: PeerContext;

  /** `ctx` without our own subnets (we hold none yet); `anySubnetSize` must be off (etcd). */
  constructor(ctx: PeerContext) {
    this.ctx = ctx;
    if (ctx.self || ctx.self6 || ctx.anySubnetSize)
      throw new Error('EarlyPeers: a context without our subnets, in etcd mode');
  }

  begin(keys: readonly string[]): void {
    this.crowded = overlappingKeys(keys, this.ctx.config);
  }

  /** The lease as the kernel entries would be built from it, or undefined: not now. */
  admit(record: LeaseRecord): Lease | undefined {
    if (!record.ok || this.crowded.has(record.key)) return undefined;
    const lease = forOurFamilies(record.lease, this.ctx.config);
    return checkPeer(lease, this.ctx) ? undefined : lease;
  }
}
