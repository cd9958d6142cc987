// The admitted peers' subnets and VtepMACs, indexed, so that a peer joining
// is checked for a conflict of its own without a pass over all of them: what
// the tracker asks of each new lease between two whole set-level stages
// (tracker.ts, joined). A lease conflicts when one of its subnets (of a family
// in use) overlaps an admitted peer's, or with vxlan its VtepMAC of a family
// is an admitted peer's of that family; then `withoutConflicts` (admit.ts)
// over the set with it would refuse someone, and the tracker redoes that
// stage. Blocks are found by their base at each prefix length in use (a
// cluster has one or two), so a check costs a few lookups: a scan of 5,000
// peers cost a lease event 3-4 ms on 2 cores.
import type { NetConfig } from '../config/netconf.ts';
import { blockSize, lastAddress, type Cidr } from '../net/ipv4.ts';
import { blockSize6, type Cidr6 } from '../net/ipv6.ts';
import type { Lease } from './types.ts';

/** One family's arithmetic on blocks. */
interface BlockOps<N> {
  /** the last address of a block */
  readonly last: (c: { readonly base: N; readonly prefix: number }) => N;
  /** `addr` with its host bits at `prefix` cleared: the base of the block holding it */
  readonly floor: (addr: N, prefix: number) => N;
  /** a base as a Set key that hashes well, one to one, and its own inverse (key(key(b)) is b) */
  readonly key: (base: N) => N;
}

const OPS4: BlockOps<number> = {
  last: lastAddress,
  floor: (addr, prefix) => addr - (addr % blockSize(prefix)),
  key: (base) => base,
};

/** each IPv6 prefix length's block size, made once (bigint arithmetic allocates) */
const SIZES6: readonly bigint[] = Array.from({ length: 129 }, (_, p) => blockSize6(p));

const size6 = (prefix: number): bigint => SIZES6[prefix] ?? blockSize6(prefix);

const OPS6: BlockOps<bigint> = {
  last: (c) => c.base + size6(c.prefix) - 1n,
  floor: (addr, prefix) => addr - (addr % size6(prefix)),
  // V8 hashes a bigint by its lowest 64 bits, which /64 bases share (all zero): a Set of 5,000 of
  // them took 380 ms to fill and look up, one bucket. The key's low half is both halves xor'ed,
  // its high half the base's: no two bases share a key, and xor'ing again gives the base back.
  key: (base) => base ^ (base >> 64n),
};

/** One family's blocks: by prefix length, by base; and those whose base is not a block's. */
class Blocks<N extends number | bigint> {
  /** prefix length → the keys of its blocks' bases (a Set, not a Map: 5,000 peers' index is RSS) */
  private readonly byPrefix = new Map<number, Set<N>>();
  private readonly odd = new Map<string, { base: N; last: N }>();
  private readonly ops: BlockOps<N>;

  constructor(ops: BlockOps<N>) {
    this.ops = ops;
  }

  add(key: string, c: { base: N; prefix: number }): void {
    if (this.ops.floor(c.base, c.prefix) !== c.base) {
      this.odd.set(key, { base: c.base, last: this.ops.last(c) });
      return;
    }
    const keys = this.byPrefix.get(c.prefix) ?? new Set<N>();
    this.byPrefix.set(c.prefix, keys.add(this.ops.key(c.base)));
  }

  remove(key: string, c: { base: N; prefix: number }): void {
    if (this.odd.delete(key)) return;
    this.byPrefix.get(c.prefix)?.delete(this.ops.key(c.base));
  }

  /** Whether `c` overlaps a block held. */
  overlaps(c: { base: N; prefix: number }): boolean {
    const last = this.ops.last(c);
    for (const o of this.odd.values()) if (o.base <= last && c.base <= o.last) return true;
    const { key } = this.ops;
    for (const [prefix, keys] of this.byPrefix) {
      if (keys.size === 0) continue;
      // a block as wide or wider overlaps c only by holding its first or last address (c spans
      // two such blocks at most, when its base is not a block's)
      if (prefix <= c.prefix) {
        if (keys.has(key(this.ops.floor(c.base, prefix)))) return true;
        if (keys.has(key(this.ops.floor(last, prefix)))) return true;
      } else {
        // narrower blocks: any that meets c's range (rare: peers' subnets of other sizes)
        for (const k of keys) {
          const b = key(k);
          if (b <= last && c.base <= this.ops.last({ base: b, prefix })) return true;
        }
      }
    }
    return false;
  }
}

/** What a peer brings to the index: its subnets of the families in use and their VtepMACs. */
interface Parts {
  readonly s4: Cidr | null;
  readonly s6: Cidr6 | null;
  readonly mac4: string | undefined;
  readonly mac6: string | undefined;
}

export class JoinIndex {
  private readonly config: NetConfig;
  private readonly blocks4 = new Blocks(OPS4);
  private readonly blocks6 = new Blocks(OPS6);
  /** VtepMACs in lower case (a set with no conflicts holds each once) */
  private readonly macs4 = new Set<string>();
  private readonly macs6 = new Set<string>();

  /** `peers`: a set with no conflict among its members (withoutConflicts' admitted). */
  constructor(config: NetConfig, peers: Iterable<Lease>) {
    this.config = config;
    for (const p of peers) this.add(p);
  }

  private parts(lease: Lease): Parts {
    const vxlan = this.config.backend.type === 'vxlan';
    const s4 = this.config.ipv4 ? lease.subnet : null;
    const s6 = this.config.ipv6 ? (lease.subnet6 ?? null) : null;
    return {
      s4,
      s6,
      mac4: s4 && vxlan ? lease.attrs.backendData?.vtepMac?.toLowerCase() : undefined,
      mac6: s6 && vxlan ? lease.attrs.backendData6?.vtepMac?.toLowerCase() : undefined,
    };
  }

  /**
   * Whether `lease` (which passed `checkPeer`) can join the set without a conflict of its own:
   * then withoutConflicts over the set with it admits every member.
   */
  joins(lease: Lease): boolean {
    const p = this.parts(lease);
    if (p.s4 && this.blocks4.overlaps(p.s4)) return false;
    if (p.s6 && this.blocks6.overlaps(p.s6)) return false;
    if (p.mac4 !== undefined && this.macs4.has(p.mac4)) return false;
    return !(p.mac6 !== undefined && this.macs6.has(p.mac6));
  }

  add(lease: Lease): void {
    const p = this.parts(lease);
    if (p.s4) this.blocks4.add(lease.key, p.s4);
    if (p.s6) this.blocks6.add(lease.key, p.s6);
    if (p.mac4 !== undefined) this.macs4.add(p.mac4);
    if (p.mac6 !== undefined) this.macs6.add(p.mac6);
  }

  /** Takes out a member added before (the same lease object or an equal one). */
  remove(lease: Lease): void {
    const p = this.parts(lease);
    if (p.s4) this.blocks4.remove(lease.key, p.s4);
    if (p.s6) this.blocks6.remove(lease.key, p.s6);
    if (p.mac4 !== undefined) this.macs4.delete(p.mac4);
    if (p.mac6 !== undefined) this.macs6.delete(p.mac6);
  }
}
