// The lease data model and the LeaseStore contract that the etcd store and
// the Kubernetes store implement. A lease is one node's subnet plus the
// attributes peers need to reach it.
import type { BackendType, NetConfig } from '../config/netconf.ts';
import type { Cidr } from '../net/ipv4.ts';
import type { Cidr6 } from '../net/ipv6.ts';

export interface VxlanLeaseData {
  readonly vni: number;
  /** lower-case colon-separated unicast MAC of the node's vxlan device */
  readonly vtepMac: string;
}

export interface LeaseAttrs {
  /** the node's IPv4 underlay address; null on an IPv6-only lease (no PublicIP, as flannel) */
  readonly publicIp: string | null;
  readonly publicIpv6: string | null;
  readonly backendType: BackendType;
  /** vxlan: VNI + VtepMAC; host-gw: null */
  readonly backendData: VxlanLeaseData | null;
  /** vxlan with IPv6: the VNI + VtepMAC of the node's IPv6 vxlan device (BackendV6Data) */
  readonly backendData6?: VxlanLeaseData | null;
  /**
   * Why a peer's IPv6 fields (PublicIPv6, BackendV6Data) could not be read, when they could not:
   * they are then absent above. Kept apart from the IPv4 fields because a node running IPv4 only
   * ignores them (as flannel does); admission refuses the peer for it only when our config has
   * IPv6 (admit.ts). Never encoded.
   */
  readonly v6Problem?: string;
  /**
   * etcd mode: the name of the twill node holding the lease (`TwillNode`
   * in the value, a key flannel ignores); absent in leases flannel wrote.
   * Two live nodes with one PublicIP are told apart by it.
   */
  readonly node?: string;
}

export interface Lease {
  /** the store's key for this lease, e.g. "10.244.3.0-24" or "10.244.3.0-24&fd00:0:0:3::-64" */
  readonly key: string;
  /** the IPv4 subnet; null on an IPv6-only lease (Kubernetes store only) */
  readonly subnet: Cidr | null;
  /** the IPv6 subnet of a dual-stack or IPv6-only lease; absent or null: IPv4 only */
  readonly subnet6?: Cidr6 | null;
  readonly attrs: LeaseAttrs;
  /** epoch milliseconds when the store drops the lease unless renewed */
  readonly expiresAt: number;
  /** the store's opaque version of the record, for compare-and-swap */
  readonly version: string;
  /**
   * when the record was first claimed, in the store's own order (etcd: the
   * key's create revision; Kubernetes: the Node's creation time, ms): of
   * peers claiming one VtepMAC or one subnet, the first claim keeps it
   */
  readonly claimedAt?: number;
}

/** One record as read from the store: a decoded lease or why it is not one. */
export type LeaseRecord =
  | { readonly key: string; readonly ok: true; readonly lease: Lease }
  | { readonly key: string; readonly ok: false; readonly reason: string };

/**
 * A peer's record as the store read it (no expiry known: only our own lease's is tracked);
 * `claimedAt` is kept only when it is a number.
 */
export function peerRecord(o: {
  key: string;
  subnet: Cidr | null;
  subnet6?: Cidr6 | null;
  attrs: LeaseAttrs;
  version: string;
  claimedAt: number | undefined;
}): LeaseRecord {
  const { key, subnet, attrs, version, claimedAt } = o;
  const claimed = claimedAt !== undefined && Number.isFinite(claimedAt) ? { claimedAt } : {};
  const v6 = o.subnet6 ? { subnet6: o.subnet6 } : {};
  return { key, ok: true, lease: { key, subnet, ...v6, attrs, expiresAt: 0, version, ...claimed } };
}

export type LeaseEvent =
  /** the complete set of records (after a list or re-list) */
  | { readonly type: 'snapshot'; readonly records: readonly LeaseRecord[]; readonly reason: string }
  | { readonly type: 'put'; readonly record: LeaseRecord }
  /**
   * `gone`: its owner is gone for good (a deleted Node), so peers drop it without the short grace
   */
  | { readonly type: 'delete'; readonly key: string; readonly gone?: boolean }
  /** the store connection went down or came back */
  | { readonly type: 'connectivity'; readonly connected: boolean; readonly detail: string };

export interface AcquireRequest {
  readonly config: NetConfig;
  readonly attrs: LeaseAttrs;
  /** the subnet we held before (from subnet.env), tried before a random one */
  readonly previous: Cidr | undefined;
  /** the IPv6 subnet we held before (subnet.env's FLANNEL_IPV6_SUBNET), with `previous` */
  readonly previous6?: Cidr6 | undefined;
  /**
   * this node's name: stores that can (etcd) record it with the lease and refuse to share one
   * PublicIP's lease with another live node
   */
  readonly nodeName?: string;
  /**
   * told the first try's listing as it is decoded, so that the kernel entries of peers nothing
   * can refuse are written while the rest is read (dataplane/early.ts); etcd mode only, as the
   * Kubernetes store ignores it
   */
  readonly early?: EarlyListing;
}

/**
 * What the acquisition tells a writer of early entries (dataplane/early.ts): the first try's
 * records in chunks as they are decoded, then the end; either page by page as the listing is read
 * (`begin(undefined)`), or once it is whole, with every key first. A later try (the first lost its
 * create) streams nothing, and picks no subnet `written` holds.
 */
export interface EarlyListing {
  /**
   * `keys`: every key of the try's listing, before a value is decoded. Undefined: the records
   * come while the listing is still being read, with no keys before, in key order (begun again
   * when the list starts over at a fresh revision: what came before is void). False: send no
   * chunks; after `begin(undefined)`, not that way (the caller waits for the whole listing and
   * begins again with its keys).
   */
  begin(keys: readonly string[] | undefined): boolean;
  /** the next chunk of that listing's records, decoded; `last`: the listing's last chunk */
  take(chunk: readonly LeaseRecord[], o?: { readonly last?: boolean }): void;
  /**
   * no more chunks: the try ended (won or lost), or `failed` (it threw: the entries written are
   * taken back, since no first pass may come to judge them)
   */
  end(o?: { failed?: boolean }): void;
  /** the leases whose entries were written (their subnets are no later try's to pick) */
  readonly written: readonly Lease[];
}

export interface LeaseStore {
  /** A description of where leases live, for logs ("etcd http://…/coreos.com/network"). */
  readonly description: string;
  /** The network configuration; CONFIG_MISSING / CONFIG_INVALID when absent or bad. */
  getNetworkConfig(signal: AbortSignal): Promise<NetConfig>;
  /**
   * Starts reading what the acquisition's first try reads (etcd: the listing of every lease), so
   * that it comes in while the daemon picks its interface; its failure is that try's.
   */
  prefetchListing?(signal: AbortSignal): void;
  /** Our lease, in the order: existing lease for our IP, previous subnet, random free subnet. */
  acquireLease(req: AcquireRequest, signal: AbortSignal): Promise<Lease>;
  /** Extends the lease; LEASE_LOST when the store no longer holds it for us. */
  renewLease(lease: Lease, signal: AbortSignal): Promise<Lease>;
  /** Takes the same subnet back after the record vanished; LEASE_TAKEN if another node holds it. */
  reclaimLease(lease: Lease, signal: AbortSignal): Promise<Lease>;
  /**
   * Lists every lease record, then reports changes until `signal` aborts.
   * Whenever changes may have been missed (compaction, a watch that cannot
   * resume, a store that was wiped) it re-lists and reports a new snapshot.
   */
  watchLeases(opts: { signal: AbortSignal; onEvent: (ev: LeaseEvent) => void }): Promise<void>;
  /** When lease `key` expires unless renewed (epoch ms; Infinity: never), where the store knows. */
  leaseExpiry?(key: string, signal: AbortSignal): Promise<number | undefined>;
  /**
   * True when subnets are allocated outside twill (Kubernetes podCIDRs): any size inside Network is
   * valid.
   */
  readonly anySubnetSize?: boolean;
  /**
   * Tells the store the dataplane is up (Kubernetes: NetworkUnavailable=False); called after the
   * first converged pass.
   */
  markReady?(lease: Lease, signal: AbortSignal): Promise<void>;
  close(): Promise<void>;
}
