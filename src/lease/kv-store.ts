// The LeaseStore on top of etcd-shaped Kv primitives, in flannel's layout:
// <prefix>/config holds net-conf.json, <prefix>/subnets/<a.b.c.d>-<len> holds
// one lease each, bound to a TTL (24 h) and created only if absent. This file
// owns the acquisition order, renewal, reclaim, and the list+watch loop that
// re-lists whenever changes may have been missed.
import { parseNetConfig, type NetConfig } from '../config/netconf.ts';
import { TwillError, describeError } from '../errors.ts';
import { formatCidr, overlaps, sameCidr, type Cidr } from '../net/ipv4.ts';
import { pause } from '../util/abort.ts';
import { fitsConfig, pickFreeSubnet } from './allocate.ts';
import { decodeLeaseValue, encodeLeaseValue, parseSubnetKey, subnetKey } from './codec.ts';
import { truncated } from './admit.ts';
import type { Kv, KvEntry, KvListing } from './kv.ts';
import { relistLoop } from './relist-loop.ts';
import {
  peerRecord,
  type AcquireRequest,
  type Lease,
  type LeaseAttrs,
  type LeaseEvent,
  type LeaseRecord,
  type LeaseStore,
} from './types.ts';

export const DEFAULT_ETCD_PREFIX = '/coreos.com/network';
export const DEFAULT_LEASE_TTL_SECONDS = 24 * 60 * 60;
const MAX_ACQUIRE_ATTEMPTS = 64;
/** a flannel lease value is ~200 bytes; anything past this is refused unread */
export const MAX_LEASE_VALUE_BYTES = 64 * 1024;

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
    try {
      return parseNetConfig(entry.value);
    } catch (err) {
      if (err instanceof TwillError)
        throw new TwillError(err.code, `${key}: ${err.message}`, { cause: err });
      throw err;
    }
  }

  /** Decodes one stored entry into a lease or the reason it is not one. */
  decode(entry: KvEntry): LeaseRecord {
    const key = entry.key.slice(this.subnetsPrefix.length);
    try {
      const subnet = parseSubnetKey(key);
      const bytes = Buffer.byteLength(entry.value, 'utf8');
      if (bytes > MAX_LEASE_VALUE_BYTES) {
        throw new TwillError(
          'LEASE_INVALID',
          `value is ${bytes} bytes, more than the ${MAX_LEASE_VALUE_BYTES} a lease may hold: ${JSON.stringify(entry.value.slice(0, 64))}…`,
        );
      }
      const attrs = decodeLeaseValue(entry.value);
      const claimedAt =
        entry.createRevision === undefined ? undefined : Number(entry.createRevision);
      return peerRecord({ key, subnet, attrs, version: entry.modRevision, claimedAt });
    } catch (err) {
      // the reason quotes stored text: never a hostile value whole
      return { key, ok: false, reason: truncated(describeError(err), 200) };
    }
  }

  /** Every listed key as a record: unreadable values are invalid records, never a failed list. */
  private records(listing: KvListing): { entry: KvEntry | undefined; record: LeaseRecord }[] {
    return [
      ...listing.entries.map((e) => ({ entry: e, record: this.decode(e) })),
      ...listing.skipped.map((s) => ({
        entry: undefined,
        record: {
          key: s.key.slice(this.subnetsPrefix.length),
          ok: false as const,
          reason: truncated(s.reason, 200),
        },
      })),
    ];
  }

  private toLease(
    subnet: Cidr,
    attrs: LeaseAttrs,
    written: { entry: KvEntry; expiresAt: number },
  ): Lease {
    return {
      key: subnetKey(subnet),
      subnet,
      attrs,
      expiresAt: written.expiresAt,
      version: written.entry.modRevision,
    };
  }

  async acquireLease(req: AcquireRequest, signal: AbortSignal): Promise<Lease> {
    for (let attempt = 0; attempt < MAX_ACQUIRE_ATTEMPTS; attempt++) {
      const lease = await this.tryAcquire(req, signal);
      if (lease) return lease;
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
    // the lease names its node, so a second live node with our PublicIP cannot take it
    const attrs: LeaseAttrs =
      req.nodeName === undefined ? req.attrs : { ...req.attrs, node: req.nodeName };
    const records = this.records(await this.kv.list(this.subnetsPrefix, signal));
    for (const { entry, record } of records) {
      if (!entry || !record.ok || record.lease.attrs.publicIp !== attrs.publicIp) continue;
      const holder = record.lease.attrs.node;
      if (holder !== undefined && attrs.node !== undefined && holder !== attrs.node) {
        // a live lease (etcd drops expired ones) of another node with the same PublicIP: NAT, a
        // clone, a wrong --public-ip
        throw new TwillError(
          'IDENTITY_CONFLICT',
          `PublicIP ${attrs.publicIp} is already held by live node ${truncated(holder)} (subnet ${formatCidr(record.lease.subnet)}, ${this.kv.description}): two nodes cannot share one PublicIP; give this node (${truncated(attrs.node)}) its own --public-ip, or stop the other node (its lease ${subnetKey(record.lease.subnet)} goes when it expires or is deleted)`,
        );
      }
      if (!fitsConfig(config, record.lease.subnet)) {
        // Ours, but from an older config: give the subnet back.
        await this.kv.deleteIf(entry.key, entry.modRevision, signal);
        continue;
      }
      const written = await this.kv.replace({
        key: entry.key,
        value: encodeLeaseValue(attrs),
        expected: entry.modRevision,
        ttlSeconds: this.ttl,
        signal,
      });
      return written ? this.toLease(record.lease.subnet, attrs, written) : undefined;
    }
    // Only keys naming a subnet this config could hand out block it: a hostile
    // "0.0.0.0-0" must not make every other subnet look taken.
    const taken = records
      .flatMap(({ record }) => (record.ok ? [record.lease.subnet] : takenByKey(record.key)))
      .filter((s) => fitsConfig(config, s));
    const prev = req.previous;
    if (prev && fitsConfig(config, prev) && !taken.some((t) => overlaps(t, prev))) {
      const written = await this.kv.create(
        this.fullKey(subnetKey(prev)),
        encodeLeaseValue(attrs),
        this.ttl,
        signal,
      );
      if (written) return this.toLease(prev, attrs, written);
    }
    const pick = pickFreeSubnet(config, taken, this.random);
    if (!pick) {
      throw new TwillError(
        'SUBNETS_EXHAUSTED',
        `out of subnets: all /${config.subnetLen} subnets of ${formatCidr(config.network)} between SubnetMin and SubnetMax are leased (${taken.length} leases)`,
      );
    }
    const written = await this.kv.create(
      this.fullKey(subnetKey(pick)),
      encodeLeaseValue(attrs),
      this.ttl,
      signal,
    );
    return written ? this.toLease(pick, attrs, written) : undefined;
  }

  async renewLease(lease: Lease, signal: AbortSignal): Promise<Lease> {
    const key = this.fullKey(lease.key);
    const written = await this.kv.replace({
      key,
      value: encodeLeaseValue(lease.attrs),
      expected: lease.version,
      ttlSeconds: this.ttl,
      signal,
    });
    if (written) return this.toLease(lease.subnet, lease.attrs, written);
    const current = await this.kv.get(key, signal);
    if (!current)
      throw new TwillError('LEASE_LOST', `lease ${key} is gone from ${this.kv.description}`);
    return this.adopt(lease, current, signal);
  }

  async reclaimLease(lease: Lease, signal: AbortSignal): Promise<Lease> {
    const key = this.fullKey(lease.key);
    for (let attempt = 0; attempt < 3; attempt++) {
      const written = await this.kv.create(key, encodeLeaseValue(lease.attrs), this.ttl, signal);
      if (written) return this.toLease(lease.subnet, lease.attrs, written);
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
    if (
      !record.ok ||
      otherNode ||
      record.lease.attrs.publicIp !== lease.attrs.publicIp ||
      !sameCidr(record.lease.subnet, lease.subnet)
    ) {
      const holder = record.ok
        ? `node ${record.lease.attrs.node !== undefined ? `${truncated(record.lease.attrs.node)} (${record.lease.attrs.publicIp})` : record.lease.attrs.publicIp}`
        : `an unreadable record (${record.reason})`;
      throw new TwillError(
        'LEASE_TAKEN',
        `subnet ${formatCidr(lease.subnet)} is now held by ${holder}; twill will not take it over`,
      );
    }
    const written = await this.kv.replace({
      key: current.key,
      value: encodeLeaseValue(lease.attrs),
      expected: current.modRevision,
      ttlSeconds: this.ttl,
      signal,
    });
    if (written) return this.toLease(lease.subnet, lease.attrs, written);
    throw new TwillError('LEASE_LOST', `lease ${current.key} changed while renewing it`);
  }

  async watchLeases(opts: {
    signal: AbortSignal;
    onEvent: (ev: LeaseEvent) => void;
  }): Promise<void> {
    const { onEvent } = opts;
    await relistLoop<bigint>({
      ...opts,
      relistMs: this.relistMs,
      list: async (signal) => {
        const listing = await this.kv.list(this.subnetsPrefix, signal);
        const unreadable =
          listing.skipped.length > 0 ? ` (${listing.skipped.length} unreadable)` : '';
        return {
          records: this.records(listing).map((r) => r.record),
          detail: `listed ${listing.entries.length + listing.skipped.length} leases at revision ${listing.revision}${unreadable}`,
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

  async close(): Promise<void> {
    await this.kv.close();
  }
}

/** A record whose value is bad still occupies its key, if the key names a subnet. */
function takenByKey(key: string): Cidr[] {
  try {
    return [parseSubnetKey(key)];
  } catch {
    return [];
  }
}
