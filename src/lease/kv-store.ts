// The LeaseStore on top of etcd-shaped Kv primitives, in flannel's layout:
// <prefix>/config holds net-conf.json, <prefix>/subnets/<a.b.c.d>-<len> holds
// one lease each, bound to a TTL (24 h) and created only if absent. With
// "EnableIPv6" a lease is one key naming both subnets,
// <a.b.c.d>-<len>&<ipv6>-<len> (flannel's MakeSubnetKey), so one renewal keeps
// both and a reclaim takes both back. This file
// owns the acquisition order, renewal, reclaim, and the list+watch loop that
// re-lists whenever changes may have been missed. Every lease here has an
// IPv4 subnet: flannel's etcd subnet manager always leases IPv4, so an
// IPv6-only config ("EnableIPv4": false) is refused as soon as it is read
// (CONFIG_UNSUPPORTED, pointing at the Kubernetes store).
import { parseNetConfig, type Ipv4NetConfig, type NetConfig } from '../config/netconf.ts';
import { TwillError, describeError } from '../errors.ts';
import { formatCidr, overlaps, sameCidr, type Cidr } from '../net/ipv4.ts';
import {
  formatCidr6,
  overlaps6,
  parseCidr6,
  sameCidr6,
  sameOptionalCidr6,
  type Cidr6,
} from '../net/ipv6.ts';
import { pause } from '../util/abort.ts';
import {
  fitsConfig,
  fitsConfig6,
  fitsConfigPair,
  pickFreeSubnet,
  pickFreeSubnet6,
} from './allocate.ts';
import {
  decodeLeaseValue,
  encodeLeaseValue,
  parseLeaseKey,
  subnetKey,
  type KeySubnets,
} from './codec.ts';
import { truncated } from './admit.ts';
import type { Kv, KvEntry, KvListing, KvPage } from './kv.ts';
import { relistLoop } from './relist-loop.ts';
import {
  peerRecord,
  type AcquireRequest,
  type EarlyListing,
  type Lease,
  type LeaseAttrs,
  type LeaseEvent,
  type LeaseRecord,
  type LeaseStore,
} from './types.ts';

export const DEFAULT_ETCD_PREFIX = '/coreos.com/network';
/** Why the etcd store refuses an IPv6-only config, and what to do instead. */
const IPV6_ONLY_UNSUPPORTED =
  'IPv6-only ("EnableIPv4": false) needs the Kubernetes store: run twill with --kube-subnet-mgr (net-conf.json from --net-config-path, subnets from the Nodes\' IPv6 podCIDRs), as flannel, whose etcd subnet manager always leases an IPv4 subnet; or, to keep etcd, set "EnableIPv4": true with an IPv4 "Network" and "EnableIPv6": true (dual-stack)';
export const DEFAULT_LEASE_TTL_SECONDS = 24 * 60 * 60;
const MAX_ACQUIRE_ATTEMPTS = 64;
/**
 * Records decoded at a time when an early writer takes them (AcquireRequest.early): each chunk's
 * entries reach `ip` while the next is decoded. The first chunk is small: the kernel is a cold
 * start's longest work, and it starts once the first routes reach it (500 records took 10-16 ms to
 * decode on a slow day).
 */
const EARLY_CHUNK = 500;
const EARLY_FIRST_CHUNK = 50;
/** a flannel lease value is ~200 bytes; anything past this is refused unread */
export const MAX_LEASE_VALUE_BYTES = 64 * 1024;
/**
 * The acquisition's listing stands in for the watch's first list when it is at most this old: the
 * watch starts at its revision + 1, so our own write and anything else since arrive as events.
 */
const PRIMED_MAX_AGE_MS = 10_000;

/**
 * `s` as a string of its own. A lease's key cut from the stored key is, from 13 characters on, a
 * view into it that keeps the whole stored key (prefix and all) for as long as the lease lives:
 * 75 bytes a peer.
 */
function ownCopy(s: string): string {
  return s.length < 13 ? s : s.split('').join('');
}

/** A listed key's record, with its entry (none for a key whose value could not be read). */
interface Primed {
  readonly entry: KvEntry | undefined;
  readonly record: LeaseRecord;
}

/** A listing being read, with its pages as they come (Kv.list's onPage) until a try takes them. */
interface Reading {
  readonly listing: Promise<KvListing>;
  readonly pages: KvPage[];
  /** the listing has resolved or failed: no page comes after those in `pages` */
  readonly settled: boolean;
  /** wakes the try waiting for the next page, or for the listing to settle */
  set wake(w: (() => void) | undefined);
}

export interface KvLeaseStoreOptions {
  readonly kv: Kv;
  /** key prefix, default /coreos.com/network */
  readonly prefix?: string;
  /** TTL of each lease; a test knob, 24 h in production */
  readonly ttlSeconds?: number;
  /** re-list about this often even when the watch is healthy (default 5 min, ±20 %) */
  readonly relistIntervalMs?: number;
  readonly random?: () => number;
}

export class KvLeaseStore implements LeaseStore {
  readonly description: string;
  private readonly kv: Kv;
  private readonly prefix: string;
  private readonly ttl: number;
  private readonly relistMs: number;
  private readonly random: () => number;
  /**
   * The last listing the start-up acquisition read, for the watch's first list (a second full list
   * of every lease, 0.1-0.2 s at 5,000, saved from start-up), with its records as the acquisition
   * decoded them (decoding 5,000 leases again took 50 ms, 100 ms dual-stack); none once the watch
   * has begun.
   */
  private primed:
    { readonly listing: KvListing; readonly records: Primed[]; readonly at: number } | undefined;
  /**
   * the keys of our own leases from an older config this acquisition attempt deleted, or found
   * gone (expired, or deleted by another writer): absent from the primed listing either way
   */
  private deletedOwn: string[] = [];
  private watching = false;
  /** the listing prefetchListing started, for the next acquisition try */
  private prefetched: Reading | undefined;

  constructor(opts: KvLeaseStoreOptions) {
    this.kv = opts.kv;
    this.prefix = (opts.prefix ?? DEFAULT_ETCD_PREFIX).replace(/\/+$/, '');
    this.ttl = opts.ttlSeconds ?? DEFAULT_LEASE_TTL_SECONDS;
    this.relistMs = opts.relistIntervalMs ?? 5 * 60_000;
    this.random = opts.random ?? Math.random;
    this.description = `${this.kv.description} prefix ${this.prefix}`;
  }

  private get subnetsPrefix(): string {
    return `${this.prefix}/subnets/`;
  }

  /**
   * When lease `key` ("10.244.3.0-24") expires unless renewed (epoch ms); undefined when unknown.
   */
  async leaseExpiry(key: string, signal: AbortSignal): Promise<number | undefined> {
    return this.kv.expiresAt(this.fullKey(key), signal);
  }

  private fullKey(key: string): string {
    return this.subnetsPrefix + key;
  }

  async getNetworkConfig(signal: AbortSignal): Promise<NetConfig> {
    const key = `${this.prefix}/config`;
    const entry = await this.kv.get(key, signal);
    if (!entry) {
      throw new TwillError(
        'CONFIG_MISSING',
        `${this.kv.description}: no network config at ${key}; write net-conf.json there, e.g. etcdctl put ${key} '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}'`,
      );
    }
    let config: NetConfig;
    try {
      config = parseNetConfig(entry.value);
    } catch (err) {
      if (err instanceof TwillError)
        throw new TwillError(err.code, `${key}: ${err.message}`, { cause: err });
      throw err;
    }
    // refused here, the first point that knows the config: before the daemon picks an interface
    ipv4Config(config, key);
    return config;
  }

  /** Decodes one stored entry into a lease or the reason it is not one. */
  decode(entry: KvEntry): LeaseRecord {
    const key = ownCopy(entry.key.slice(this.subnetsPrefix.length));
    try {
      const { subnet, subnet6 } = parseLeaseKey(key);
      // a UTF-16 unit is at most 3 UTF-8 bytes: a value that short needs no count
      const bytes =
        entry.value.length * 3 <= MAX_LEASE_VALUE_BYTES
          ? 0
          : Buffer.byteLength(entry.value, 'utf8');
      if (bytes > MAX_LEASE_VALUE_BYTES) {
        throw new TwillError(
          'LEASE_INVALID',
          `value is ${bytes} bytes, more than the ${MAX_LEASE_VALUE_BYTES} a lease may hold: ${JSON.stringify(entry.value.slice(0, 64))}…`,
        );
      }
      const attrs = decodeLeaseValue(entry.value);
      const claimedAt =
        entry.createRevision === undefined ? undefined : Number(entry.createRevision);
      return peerRecord({ key, subnet, subnet6, attrs, version: entry.modRevision, claimedAt });
    } catch (err) {
      // the reason quotes stored text: never a hostile value whole
      return { key, ok: false, reason: truncated(describeError(err), 200) };
    }
  }

  /** Every listed key as a record: unreadable values are invalid records, never a failed list. */
  private records(listing: KvListing): Primed[] {
    return [
      ...listing.entries.map((e) => ({ entry: e, record: this.decode(e) })),
      ...this.skippedRecords(listing),
    ];
  }

  private skippedRecords(listing: KvListing): Primed[] {
    return listing.skipped.map((s) => ({
      entry: undefined,
      record: {
        key: s.key.slice(this.subnetsPrefix.length),
        ok: false as const,
        reason: truncated(s.reason, 200),
      },
    }));
  }

  /** Starts the listing of every lease, keeping its pages as they come for an early writer. */
  private startReading(signal: AbortSignal): Reading {
    const pages: KvPage[] = [];
    let wake: (() => void) | undefined;
    let settled = false;
    // (a store may tell a page before list returns)
    const listing = this.kv.list(this.subnetsPrefix, signal, (page) => {
      pages.push(page);
      wake?.();
    });
    const end = (): void => {
      settled = true;
      wake?.();
    };
    listing.then(end, end);
    return {
      listing,
      pages,
      get settled() {
        return settled;
      },
      set wake(w: (() => void) | undefined) {
        wake = w;
      },
    };
  }

  /**
   * The listing and its records, handed to `early` a chunk at a time as they are decoded (with a
   * turn of the event loop between chunks, so that what it writes reaches its process meanwhile):
   * page by page as the listing is read when the writer takes them so, else once it is whole.
   */
  private async streamed(
    reading: Reading,
    early: EarlyListing,
    signal: AbortSignal,
  ): Promise<{ listing: KvListing; records: Primed[] }> {
    if (!early.begin(undefined)) {
      const listing = await reading.listing;
      const cut = this.subnetsPrefix.length;
      const keys = [...listing.entries, ...listing.skipped].map((e) => e.key.slice(cut));
      if (!early.begin(keys)) return { listing, records: this.records(listing) };
      const out: Primed[] = [];
      await this.decodeInto(out, listing.entries, early, signal);
      early.take([], { last: true });
      return { listing, records: [...out, ...this.skippedRecords(listing)] };
    }
    const out: Primed[] = [];
    let listing: KvListing | undefined;
    for (;;) {
      const page = reading.pages.shift();
      if (page) {
        // a list started over: what the pages before said is void (what was written stays: the
        // first pass judges it, and no try picks its subnets)
        if (page.first && out.length > 0) {
          out.length = 0;
          early.begin(undefined);
        }
        await this.decodeInto(out, page.entries, early, signal);
        continue;
      }
      if (!reading.settled) {
        await new Promise<void>((resolve) => (reading.wake = resolve));
        reading.wake = undefined;
        continue;
      }
      listing = await reading.listing;
      if (out.length === listing.entries.length) break;
      // a store that told fewer pages than it listed: its listing whole, as one page, begun again
      out.length = 0;
      early.begin(undefined);
      reading.pages.push({ entries: listing.entries, first: true });
    }
    const skipped = this.skippedRecords(listing);
    early.take(
      skipped.map((s) => s.record),
      { last: true },
    );
    return { listing, records: [...out, ...skipped] };
  }

  /** Decodes `entries` into `out`, handing each chunk to `early` with a turn between. */
  private async decodeInto(
    out: Primed[],
    entries: readonly KvEntry[],
    early: EarlyListing,
    signal: AbortSignal,
  ): Promise<void> {
    for (let i = 0; i < entries.length;) {
      const size = out.length === 0 ? EARLY_FIRST_CHUNK : EARLY_CHUNK;
      const chunk: Primed[] = [];
      for (const e of entries.slice(i, (i += size)))
        chunk.push({ entry: e, record: this.decode(e) });
      out.push(...chunk);
      early.take(chunk.map((c) => c.record));
      await new Promise((resolve) => setImmediate(resolve));
      signal.throwIfAborted();
    }
  }

  private toLease(
    { subnet, subnet6 }: KeySubnets,
    attrs: LeaseAttrs,
    written: { entry: KvEntry; expiresAt: number },
  ): Lease {
    return {
      key: subnetKey(subnet, subnet6),
      subnet,
      ...(subnet6 ? { subnet6 } : {}),
      attrs,
      expiresAt: written.expiresAt,
      version: written.entry.modRevision,
    };
  }

  prefetchListing(signal: AbortSignal): void {
    if (this.watching || this.prefetched) return;
    const reading = this.startReading(signal);
    // (its failure is seen by the try that takes it)
    reading.listing.catch(() => undefined);
    this.prefetched = reading;
  }

  async acquireLease(req: AcquireRequest, signal: AbortSignal): Promise<Lease> {
    // a config that did not come through getNetworkConfig is refused the same way, before any write
    ipv4Config(req.config, this.description);
    for (let attempt = 0; attempt < MAX_ACQUIRE_ATTEMPTS; attempt++) {
      this.deletedOwn = [];
      // only the first try's listing is streamed: a later one sends nothing; a try that fails
      // (IDENTITY_CONFLICT, subnets exhausted, the store gone) takes back what was written
      const lease = await this.tryAcquire(req, signal).then(
        (l) => (req.early?.end(), l),
        (err: unknown) => {
          req.early?.end({ failed: true });
          throw err;
        },
      );
      if (lease) {
        this.primeWith(lease);
        return lease;
      }
      await pause(Math.round(this.random() * 50), signal);
    }
    throw new TwillError(
      'LEASE_TAKEN',
      `${this.description}: could not acquire a subnet after ${MAX_ACQUIRE_ATTEMPTS} attempts; other nodes kept taking the chosen subnets`,
    );
  }

  /**
   * One pass of the acquisition order; undefined when a race was lost and the caller should retry.
   */
  private async tryAcquire(req: AcquireRequest, signal: AbortSignal): Promise<Lease | undefined> {
    const { config } = req;
    const ipv4 = ipv4Config(config, this.description);
    // the lease names its node, so a second live node with our PublicIP cannot take it
    const attrs: LeaseAttrs =
      req.nodeName === undefined ? req.attrs : { ...req.attrs, node: req.nodeName };
    // a listing read a little earlier is one a slower node would have read now: the create below
    // guards the key, and createDual the keys created since
    const prefetched = this.prefetched;
    this.prefetched = undefined;
    const reading = prefetched ?? this.startReading(signal);
    const { listing, records } = req.early
      ? await this.streamed(reading, req.early, signal)
      : await reading.listing.then((l) => ({ listing: l, records: this.records(l) }));
    if (!this.watching) this.primed = { listing, records, at: Date.now() };
    /**
     * our own lease from an older config, deleted below (or found gone): its subnets are worth
     * keeping
     */
    const replaced: KeySubnets[] = [];
    for (const { entry, record } of records) {
      if (!entry || !record.ok || record.lease.attrs.publicIp !== attrs.publicIp) continue;
      const holder = record.lease.attrs.node;
      if (holder !== undefined && attrs.node !== undefined && holder !== attrs.node) {
        // a live lease (etcd drops expired ones) of another node with the same PublicIP: NAT, a
        // clone, a wrong --public-ip
        throw new TwillError(
          'IDENTITY_CONFLICT',
          `PublicIP ${attrs.publicIp} is already held by live node ${truncated(holder)} (subnet ${formatCidr(subnetsOf(record.lease).subnet)}, ${this.kv.description}): two nodes cannot share one PublicIP; give this node (${truncated(attrs.node)}) its own --public-ip, or stop the other node (its lease ${record.key} goes when it expires or is deleted)`,
        );
      }
      const held = subnetsOf(record.lease);
      if (!fitsConfigPair(config, held.subnet, held.subnet6)) {
        // Ours, but from an older config (in either family: an IPv4-only lease once IPv6 is
        // enabled, a dual one once it is disabled, as flannel's isIPv6SubnetConfigCompat): give
        // the key back. A lease is one key for both families, so a new pair means a new key; the
        // subnets that still fit are tried first below.
        if (await this.kv.deleteIf(entry.key, entry.modRevision, signal)) {
          replaced.push(held);
          this.deletedOwn.push(entry.key);
        }
        continue;
      }
      const written = await this.kv.replace({
        key: entry.key,
        value: encodeLeaseValue(attrs),
        expected: entry.modRevision,
        ttlSeconds: this.ttl,
        signal,
      });
      return written ? this.toLease(held, attrs, written) : undefined;
    }
    // Only keys naming a subnet this config could hand out block it: a hostile
    // "0.0.0.0-0" must not make every other subnet look taken.
    // (our replaced lease's key is gone: its subnets are free for us again)
    const gone = new Set(replaced.map((r) => subnetKey(r.subnet, r.subnet6)));
    // (and a subnet an early writer routed to a peer of an earlier try's listing, gone since,
    // is not ours to pick: its entries stand until the first pass)
    const named = [
      ...records.flatMap(({ record }) =>
        gone.has(record.key) ? [] : record.ok ? [subnetsOf(record.lease)] : takenByKey(record.key),
      ),
      ...(req.early?.written ?? []).map(subnetsOf),
    ];
    const taken = named.map((k) => k.subnet).filter((s) => fitsConfig(ipv4, s));
    const ipv6 = config.ipv6;
    const taken6 = ipv6
      ? named.flatMap((k) => (k.subnet6 && fitsConfig6(ipv6, k.subnet6) ? [k.subnet6] : []))
      : [];
    const free = (s: Cidr | undefined): s is Cidr =>
      s !== undefined && fitsConfig(ipv4, s) && !taken.some((t) => overlaps(t, s));
    const free6 = (s: Cidr6 | null | undefined): s is Cidr6 =>
      !!ipv6 && !!s && fitsConfig6(ipv6, s) && !taken6.some((t) => overlaps6(t, s));
    if (!ipv6) {
      // IPv4 only: our replaced lease's subnet, else subnet.env's, else a random free one
      const prev = [...replaced.map((r) => r.subnet), req.previous].find(free);
      if (prev) {
        const written = await this.create({ subnet: prev, subnet6: null }, attrs, signal);
        if (written) return written;
      }
      const pick = pickFreeSubnet(ipv4, taken, this.random);
      if (!pick) throw exhausted(ipv4, taken.length);
      return this.create({ subnet: pick, subnet6: null }, attrs, signal);
    }
    // Dual-stack: each family keeps the subnet we held if it is still free (our replaced lease's
    // first, then subnet.env's), else takes a random free one: enabling IPv6 keeps the node's
    // IPv4 subnet and its pods' addresses. (flannel then takes a random IPv4 subnet as well.)
    const prev = [...replaced.map((r) => r.subnet), req.previous].find(free);
    const prev6 = [...replaced.map((r) => r.subnet6), req.previous6].find(free6);
    // no key in the listing names a subnet we pick (but ours of an older config, deleted above:
    // should it come back, it was created after the listing): createDual's check for an earlier
    // claim reads only the keys created since
    const listed = listing.revision;
    let lost = false;
    if (prev && prev6) {
      const written = await this.createDual(
        { subnet: prev, subnet6: prev6 },
        attrs,
        listed,
        signal,
      );
      if (written) return written;
      // the pair went to someone else meanwhile: trying it again would lose again
      lost = true;
    }
    // (nor, while another is free, may the random pick fall on the pair that just lost: with a
    // /16 of /24s one chance in about 250, and the etcd test of that race once saw a third create)
    const pick =
      (lost ? undefined : prev) ??
      (lost && prev ? pickFreeSubnet(ipv4, [...taken, prev], this.random) : undefined) ??
      pickFreeSubnet(ipv4, taken, this.random);
    if (!pick) throw exhausted(ipv4, taken.length);
    const pick6 =
      (lost ? undefined : prev6) ??
      (lost && prev6 ? pickFreeSubnet6(ipv6, [...taken6, prev6], this.random) : undefined) ??
      pickFreeSubnet6(ipv6, taken6, this.random);
    if (!pick6) {
      throw new TwillError(
        'SUBNETS_EXHAUSTED',
        `out of IPv6 subnets: all /${ipv6.subnetLen} subnets of ${formatCidr6(ipv6.network)} between IPv6SubnetMin and IPv6SubnetMax are leased (${taken6.length} leases)`,
      );
    }
    return this.createDual({ subnet: pick, subnet6: pick6 }, attrs, listed, signal);
  }

  /** Creates the lease key for `subnets` if absent; undefined when it exists (a lost race). */
  private async create(
    subnets: KeySubnets,
    attrs: LeaseAttrs,
    signal: AbortSignal,
  ): Promise<Lease | undefined> {
    const key = this.fullKey(subnetKey(subnets.subnet, subnets.subnet6));
    const written = await this.kv.create(key, encodeLeaseValue(attrs), this.ttl, signal);
    return written ? this.toLease(subnets, attrs, written) : undefined;
  }

  /**
   * `create` for a dual-stack pair. Create-if-absent guards one key, but two nodes racing for one
   * IPv4 subnet with different IPv6 subnets write two keys ("10.244.3.0-24&fd00::-64" and
   * "10.244.3.0-24&fd00:0:0:1::-64"), and likewise for one IPv6 subnet. So after creating, the
   * keys created since the listing are read: when another key that was created first claims one
   * of ours, ours is deleted and the race counts as lost (the caller tries again). Peers admit the
   * first claim meanwhile (admit.ts), so the loser's brief key routes nothing. `listed`: the
   * revision of the listing the subnets were picked from, none of whose keys names them.
   */
  private async createDual(
    subnets: KeySubnets & { subnet6: Cidr6 },
    attrs: LeaseAttrs,
    listed: bigint,
    signal: AbortSignal,
  ): Promise<Lease | undefined> {
    const lease = await this.create(subnets, attrs, signal);
    if (!lease) return undefined;
    if (!(await this.claimedEarlier(lease, listed, signal))) return lease;
    await this.kv.deleteIf(this.fullKey(lease.key), lease.version, signal);
    return undefined;
  }

  /**
   * The key of another lease, created before our just-written `lease`, that claims its IPv4 or its
   * IPv6 subnet; undefined when there is none. Only a key naming the very same subnet counts: our
   * subnets fit the config (aligned blocks of SubnetLen / IPv6SubnetLen), so of the keys that fit
   * it (the only ones `taken` counts) those are the ones that overlap ours; a hostile "0.0.0.0-0"
   * or "10.244.200.0-24&::-0" overlaps every lease but fits no config, and must not make every
   * acquisition lose. Only keys created after revision `listed` are read: those of a listing at
   * it were judged when ours were picked (a key deleted and created again since is read again),
   * and with 5,000 leases, listing every one again cost a dual-stack cold start tens of
   * milliseconds. Keys only: the key names the subnets.
   */
  private async claimedEarlier(
    lease: Lease,
    listed: bigint,
    signal: AbortSignal,
  ): Promise<string | undefined> {
    const ours = BigInt(lease.version);
    // a store wiped or restored since the listing counts revisions anew: read every key then
    const after = ours > listed ? listed : 0n;
    const keys = await this.kv.keysCreatedBetween(
      this.subnetsPrefix,
      { after, before: ours },
      signal,
    );
    const earlier = keys.find((k) => {
      const key = k.slice(this.subnetsPrefix.length);
      return takenByKey(key).some(
        (other) =>
          (!!lease.subnet && sameCidr(other.subnet, lease.subnet)) ||
          (!!other.subnet6 && !!lease.subnet6 && sameCidr6(other.subnet6, lease.subnet6)),
      );
    });
    return earlier?.slice(this.subnetsPrefix.length);
  }

  async renewLease(lease: Lease, signal: AbortSignal): Promise<Lease> {
    const subnets = subnetsOf(lease);
    const key = this.fullKey(lease.key);
    const written = await this.kv.replace({
      key,
      value: encodeLeaseValue(lease.attrs),
      expected: lease.version,
      ttlSeconds: this.ttl,
      signal,
    });
    if (written) return this.toLease(subnets, lease.attrs, written);
    const current = await this.kv.get(key, signal);
    if (!current)
      throw new TwillError('LEASE_LOST', `lease ${key} is gone from ${this.kv.description}`);
    return this.adopt(lease, current, signal);
  }

  async reclaimLease(lease: Lease, signal: AbortSignal): Promise<Lease> {
    const subnets = subnetsOf(lease);
    const key = this.fullKey(lease.key);
    for (let attempt = 0; attempt < 3; attempt++) {
      const written = await this.kv.create(key, encodeLeaseValue(lease.attrs), this.ttl, signal);
      if (written) {
        const back = this.toLease(subnets, lease.attrs, written);
        // A dual key guards only its own pair: while ours was gone, another node may have taken
        // our IPv4 (or IPv6) subnet under a key with another half. The first claim keeps it, as
        // a taken IPv4-only key does.
        if (!back.subnet6) return back;
        const holder = await this.claimedEarlier(back, 0n, signal);
        if (holder === undefined) return back;
        await this.kv.deleteIf(key, back.version, signal);
        throw new TwillError(
          'LEASE_TAKEN',
          `subnet ${formatCidr(subnets.subnet)} or ${formatCidr6(back.subnet6)} is now held by lease ${truncated(holder)}; twill will not take it over`,
        );
      }
      const current = await this.kv.get(key, signal);
      if (current) return this.adopt(lease, current, signal);
    }
    throw new TwillError(
      'STORE_UNAVAILABLE',
      `lease ${key} kept appearing and vanishing while reclaiming it`,
    );
  }

  /** The key exists: it is ours again if it carries our PublicIP, else another node took it. */
  private async adopt(lease: Lease, current: KvEntry, signal: AbortSignal): Promise<Lease> {
    const record = this.decode(current);
    const otherNode =
      record.ok &&
      record.lease.attrs.node !== undefined &&
      lease.attrs.node !== undefined &&
      record.lease.attrs.node !== lease.attrs.node;
    const ours = subnetsOf(lease);
    if (
      !record.ok ||
      otherNode ||
      record.lease.attrs.publicIp !== lease.attrs.publicIp ||
      !sameCidr(subnetsOf(record.lease).subnet, ours.subnet) ||
      !sameOptionalCidr6(record.lease.subnet6, ours.subnet6)
    ) {
      const holder = record.ok
        ? `node ${record.lease.attrs.node !== undefined ? `${truncated(record.lease.attrs.node)} (${record.lease.attrs.publicIp})` : record.lease.attrs.publicIp}`
        : `an unreadable record (${record.reason})`;
      throw new TwillError(
        'LEASE_TAKEN',
        `subnet ${formatCidr(ours.subnet)} is now held by ${holder}; twill will not take it over`,
      );
    }
    const written = await this.kv.replace({
      key: current.key,
      value: encodeLeaseValue(lease.attrs),
      expected: current.modRevision,
      ttlSeconds: this.ttl,
      signal,
    });
    if (written) return this.toLease(subnetsOf(lease), lease.attrs, written);
    throw new TwillError('LEASE_LOST', `lease ${current.key} changed while renewing it`);
  }

  async watchLeases(opts: {
    signal: AbortSignal;
    onEvent: (ev: LeaseEvent) => void;
  }): Promise<void> {
    const { onEvent } = opts;
    this.watching = true;
    await relistLoop<bigint>({
      ...opts,
      relistMs: this.relistMs,
      list: async (signal) => {
        const primed = this.takePrimed();
        const listing = primed?.listing ?? (await this.kv.list(this.subnetsPrefix, signal));
        const records = primed?.records ?? this.records(listing);
        const unreadable =
          listing.skipped.length > 0 ? ` (${listing.skipped.length} unreadable)` : '';
        return {
          records: records.map((r) => r.record),
          detail: `listed ${records.length} leases at revision ${listing.revision}${unreadable}`,
          cursor: listing.revision + 1n,
        };
      },
      watch: async (w) => {
        const end = await this.kv.watch(this.subnetsPrefix, {
          fromRevision: w.cursor,
          signal: w.signal,
          onChanges: (changes) => {
            w.progress();
            for (const c of changes) {
              if (c.type === 'put') onEvent({ type: 'put', record: this.decode(c.entry) });
              else onEvent({ type: 'delete', key: c.key.slice(this.subnetsPrefix.length) });
            }
          },
          onConnectivity: (connected, detail) =>
            onEvent({ type: 'connectivity', connected, detail }),
        });
        return end.reason === 'aborted'
          ? end
          : {
              reason: end.reason === 'failed' ? 'failed' : 'relist',
              kind: end.reason,
              detail: end.detail,
            };
      },
    });
  }

  /**
   * The primed records as the tracker must see them (the listing keeps only its revision and
   * unreadable keys for the watch): with the lease just written (a snapshot without
   * our own key reads as a lost lease) and without our old-config leases deleted meanwhile (each
   * would show as a peer with our PublicIP). The watch from the listing's revision + 1 replays
   * those writes, and every other change since, as events.
   */
  private primeWith(lease: Lease): void {
    if (!this.primed) return;
    const key = this.fullKey(lease.key);
    const drop = new Set([key, ...this.deletedOwn]);
    const { listing, records, at } = this.primed;
    const before = records.find((r) => r.entry?.key === key)?.entry;
    const entry: KvEntry = {
      key,
      value: encodeLeaseValue(lease.attrs),
      modRevision: lease.version,
      createRevision: before?.createRevision ?? lease.version,
    };
    // an unreadable key (no entry) is never one of ours
    const kept = records.filter((r) => !r.entry || !drop.has(r.entry.key));
    kept.push({ entry, record: this.decode(entry) });
    this.primed = { listing, records: kept, at };
  }

  /** The acquisition's listing and records, once, if fresh enough to start the watch from. */
  private takePrimed(): { listing: KvListing; records: Primed[] } | undefined {
    const primed = this.primed;
    this.primed = undefined;
    return primed && Date.now() - primed.at <= PRIMED_MAX_AGE_MS ? primed : undefined;
  }

  async close(): Promise<void> {
    await this.kv.close();
  }
}

/**
 * A record whose value is bad still occupies its key, if the key names subnets. A dual key whose
 * IPv6 half is not canonical (flannel reads it, twill's peers refuse it) still holds its IPv4
 * subnet, and its IPv6 one when that half is a subnet at all.
 */
function takenByKey(key: string): KeySubnets[] {
  try {
    return [parseLeaseKey(key)];
  } catch {
    const m = /^([0-9.]+-\d{1,2})&([0-9a-fA-F:]+)-(\d{1,3})$/.exec(key);
    if (!m) return [];
    try {
      const { subnet } = parseLeaseKey(m[1] ?? '');
      return [{ subnet, subnet6: parseCidr6(`${m[2]}/${m[3]}`, { strict: true }) ?? null }];
    } catch {
      return [];
    }
  }
}

/**
 * The subnets a lease of this store names in its key. Its IPv4 subnet is always there (every key
 * names one); a lease without one is an IPv6-only lease, which only the Kubernetes store makes.
 */
function subnetsOf(lease: Lease): KeySubnets {
  if (!lease.subnet)
    throw new TwillError(
      'CONFIG_UNSUPPORTED',
      `lease ${truncated(lease.key)} has no IPv4 subnet: ${IPV6_ONLY_UNSUPPORTED}`,
    );
  return { subnet: lease.subnet, subnet6: lease.subnet6 ?? null };
}

/** The config's IPv4 network; CONFIG_UNSUPPORTED for an IPv6-only config (`where`: its source). */
function ipv4Config(config: NetConfig, where: string): Ipv4NetConfig {
  if (!config.ipv4)
    throw new TwillError('CONFIG_UNSUPPORTED', `${where}: ${IPV6_ONLY_UNSUPPORTED}`);
  return config.ipv4;
}

function exhausted(config: Ipv4NetConfig, leases: number): TwillError {
  return new TwillError(
    'SUBNETS_EXHAUSTED',
    `out of subnets: all /${config.subnetLen} subnets of ${formatCidr(config.network)} between SubnetMin and SubnetMax are leased (${leases} leases)`,
  );
}
