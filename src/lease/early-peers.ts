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
//     In etcd mode a key names the lease's subnets, and every admitted subnet is SubnetLen wide.
//     IPv4 only, the listing can be admitted page by page as it is read, without the sweep over
//     every key: a record's neighbours in key order tell the same (EarlyPeers says why);
//   - VtepMAC conflicts (vxlan) are not looked at: the early writer runs with host-gw only.
// A key that does not parse is a refused record, which no admitted peer conflicts with.
// What changes after the listing (a key created, one deleted) comes as events, after the first
// pass, as always.
import type { NetConfig } from '../config/netconf.ts';
import { lastAddress, sameCidr, type Cidr } from '../net/ipv4.ts';
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

/** The run of listed records on one IPv4 subnet that the ordered early admission is in. */
interface Run {
  readonly subnet: Cidr;
  /** the run's only record so far, as it would be written (undefined: refused alone) */
  lease: Lease | undefined;
  /** more than one record claims the subnet: none is written early */
  crowded: boolean;
}

/**
 * The early admission of one listing, either whole (`begin` with every key, then `admit` its
 * records) or in key order as it is read (`begin(undefined)`, IPv4 only); a lease it returns is
 * admitted by admit.ts too once our lease is ours.
 *
 * In key order no key is known before its page comes, so a record's neighbours stand in for the
 * sweep over every key. Only records that pass `checkPeer` take part in admission's set-level
 * stage, each SubnetLen wide: two of them conflict in IPv4 exactly when their subnets are equal
 * (a wider key fails `checkPeer`, and the narrower ones it covers keep their place). Every
 * readable record still forms or crowds a run, refused or not: our own old lease's record is
 * refused here (its PublicIP is ours) but becomes our subnet, which a peer on the same subnet
 * (a dual-stack key) overlaps once the lease is ours, so it must crowd that peer out. Keys are
 * canonical (codec.ts: no leading zeros, no host bits), so an IPv4 subnet has one text, and a key
 * naming it is that text alone or followed by "&" and an IPv6 part; in byte order (etcd's, and
 * MemoryKv's) every key that parses and names it lies between the first and the last of them (a
 * key in between starts with the same text, and the next character is at most "&", so it either
 * names the same subnet or does not parse). So the records of one subnet come one after another,
 * and a record is held until the next readable one shows whether it is alone on its subnet.
 * With IPv6 (dual-stack keys that share an IPv6 subnet need not be neighbours) it says no: the
 * listing is then taken whole.
 */
export class EarlyPeers {
  private crowded = new Set<string>();
  private readonly ctx: PeerContext;
  /** admitting in key order (begin(undefined)) */
  private ordered = false;
  private run: Run | undefined;

  /** `ctx` without our own subnets (we hold none yet); `anySubnetSize` must be off (etcd). */
  constructor(ctx: PeerContext) {
    this.ctx = ctx;
    if (ctx.self || ctx.self6 || ctx.anySubnetSize)
      throw new Error('EarlyPeers: a context without our subnets, in etcd mode');
  }

  /**
   * `keys`: every key of the listing, whose records come next; undefined: its records come in key
   * order with no keys before (false when that cannot be admitted so: IPv6 is in use). Either
   * starts the listing over.
   */
  begin(keys: readonly string[] | undefined): boolean {
    this.run = undefined;
    if (keys !== undefined) {
      this.ordered = false;
      this.crowded = overlappingKeys(keys, this.ctx.config);
      return true;
    }
    if (this.ctx.config.ipv6 || !this.ctx.config.ipv4) return false;
    this.ordered = true;
    this.crowded.clear();
    return true;
  }

  /**
   * The leases of `chunk` (the next records of the listing) as the kernel entries would be built
   * from them, those not to be written now left out. In key order the last readable record is
   * held until the next one comes, or `last` (the listing's last chunk) says none will.
   */
  admit(chunk: readonly LeaseRecord[], last = false): Lease[] {
    const out: Lease[] = [];
    for (const record of chunk) {
      if (!this.ordered) {
        const lease = this.crowded.has(record.key) ? undefined : this.check(record);
        if (lease) out.push(lease);
        continue;
      }
      // an unreadable record takes no part in admission, nor does an IPv4-less one (refused)
      const subnet = record.ok ? record.lease.subnet : null;
      if (!subnet) continue;
      if (this.run && sameCidr(this.run.subnet, subnet)) {
        this.run.crowded = true;
        continue;
      }
      this.flush(out);
      this.run = { subnet, lease: this.check(record), crowded: false };
    }
    if (last) this.flush(out);
    return out;
  }

  private flush(out: Lease[]): void {
    if (this.run?.lease && !this.run.crowded) out.push(this.run.lease);
    this.run = undefined;
  }

  private check(record: LeaseRecord): Lease | undefined {
    if (!record.ok) return undefined;
    const lease = forOurFamilies(record.lease, this.ctx.config);
    return checkPeer(lease, this.ctx) ? undefined : lease;
  }
}
