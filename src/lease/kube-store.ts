// The LeaseStore over the Kubernetes API (`twill run --kube-subnet-mgr`), in
// flannel's format: our subnet is our Node's spec.podCIDR (allocated by the
// controller-manager, never by twill), our lease attributes are annotations
// on our Node patched through nodes/status, and peers are the other Nodes
// that carry `<prefix>/kube-subnet-manager: "true"`. A lease's key is the
// node name. The network config is net-conf.json from a file (the ConfigMap).
// Leases do not expire: "renewing" re-reads our Node and re-publishes the
// annotations when someone changed them. Dual-stack: our IPv6 subnet is the
// Node's IPv6 podCIDR, published with flannel's public-ipv6 and
// backend-v6-data annotations (kube-node.ts says what a Node without one
// means). IPv6-only ("EnableIPv4": false): the IPv6 podCIDR alone, no IPv4
// subnet, PublicIP or BackendData published or read (kube-node.ts).
import { readFile } from 'node:fs/promises';
import { parseNetConfig, type NetConfig } from '../config/netconf.ts';
import { TwillError } from '../errors.ts';
import { formatCidr, sameCidr, type Cidr } from '../net/ipv4.ts';
import { formatCidr6, sameCidr6, type Cidr6 } from '../net/ipv6.ts';
import { pause, type Backoff } from '../util/abort.ts';
import { relistLoop } from './relist-loop.ts';
import type { KubeApi, NodeWatchEnd } from './kube-api.ts';
import {
  DEFAULT_ANNOTATION_PREFIX,
  annotationNames,
  annotationValues,
  isManaged,
  networkAvailablePatch,
  nodeRecord,
  ownSubnet,
  ownSubnet6,
  podCidr,
  podCidr6,
  publicIpOverwrite,
  publicIpv6Overwrite,
  publishedVtepMac,
  publishes,
  type Annotations,
  type NodeView,
} from './kube-node.ts';
import type { AcquireRequest, Lease, LeaseAttrs, LeaseEvent, LeaseStore } from './types.ts';

/** How often our Node is re-checked without a reason (the watch reports changes sooner). */
const RECHECK_MS = 24 * 3600_000;

export interface KubeLeaseStoreOptions {
  readonly api: KubeApi;
  readonly nodeName: string;
  readonly netConfigPath: string;
  /** annotation prefix, default flannel.alpha.coreos.com */
  readonly annotationPrefix?: string;
  /**
   * re-list about this often even when the watch is healthy (default 30 min, ±20 %; the watch
   * resumes every 25 s and re-lists on 410 anyway)
   */
  readonly relistIntervalMs?: number;
  /**
   * each watch request ends after this long and resumes from its last resourceVersion (default 25
   * s: kube-api.ts gives up on a watch silent for 30 s, WATCH_SILENCE_MS)
   */
  readonly watchTimeoutSeconds?: number;
}

export class KubeLeaseStore implements LeaseStore {
  readonly description: string;
  /** podCIDRs come from the controller-manager, whatever SubnetLen says */
  readonly anySubnetSize = true;
  private readonly api: KubeApi;
  private readonly nodeName: string;
  private readonly names: Annotations;
  private readonly netConfigPath: string;
  private readonly relistMs: number;
  private readonly watchTimeout: number;
  /**
   * Whether peers' IPv4 half is read: not when the config is IPv6 only, which ignores it as
   * flannel's kube subnet manager with enableIPv4 false (kube-node.ts). Learnt from the config this
   * store parsed (getNetworkConfig, which the daemon, status and doctor call before listing) or
   * was given (acquireLease); until then both halves are read.
   */
  private readIpv4 = true;
  /**
   * The resourceVersion of our Node as we last published it: the next list must be at least that
   * new. It comes from the apiserver's watch cache, which follows etcd a little behind; a list
   * from before our write would lack our lease (the tracker would take it for lost) on a slow day.
   */
  private listFloor: string | undefined;

  constructor(o: KubeLeaseStoreOptions) {
    this.api = o.api;
    this.nodeName = o.nodeName;
    this.netConfigPath = o.netConfigPath;
    this.names = annotationNames(o.annotationPrefix ?? DEFAULT_ANNOTATION_PREFIX);
    this.relistMs = o.relistIntervalMs ?? 30 * 60_000;
    this.watchTimeout = o.watchTimeoutSeconds ?? 25;
    this.description = `Kubernetes API ${o.api.server} node ${o.nodeName}`;
  }

  async getNetworkConfig(): Promise<NetConfig> {
    let text: string;
    try {
      text = await readFile(this.netConfigPath, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT')
        throw new TwillError(
          'CONFIG_MISSING',
          `--net-config-path ${this.netConfigPath}: no such file; mount net-conf.json there (deploy/ mounts the twill-cfg ConfigMap) or pass the right path`,
        );
      throw new TwillError(
        'CONFIG_MISSING',
        `--net-config-path ${this.netConfigPath}: ${(err as Error).message}`,
      );
    }
    try {
      const config = parseNetConfig(text);
      this.readIpv4 = config.ipv4 !== null;
      return config;
    } catch (err) {
      if (err instanceof TwillError)
        throw new TwillError(err.code, `${this.netConfigPath}: ${err.message}`, { cause: err });
      throw err;
    }
  }

  /** Our Node, or STORE_UNAVAILABLE while it is not registered (twill waits for the kubelet). */
  private async ownNode(signal: AbortSignal): Promise<NodeView> {
    const node = await this.api.readNode(this.nodeName, signal);
    if (node) return node;
    throw new TwillError(
      'STORE_UNAVAILABLE',
      `node ${this.nodeName} does not exist in the Kubernetes API (yet): the kubelet registers it; check --node-name / NODE_NAME`,
    );
  }

  /**
   * The attributes we publish: ours, with the node's public-ip-overwrite and already published
   * VtepMAC. IPv6 only (`ipv4` false): no PublicIP nor BackendData, whatever `attrs` says, and
   * public-ip-overwrite is not read, as flannel with enableIPv4 false: our lease is then what
   * peers (and our own watch) read back from the Node.
   */
  private ownAttrs(node: NodeView, attrs: LeaseAttrs, ipv4: boolean): LeaseAttrs {
    const publicIp = ipv4 ? (publicIpOverwrite(node, this.names) ?? attrs.publicIp) : null;
    const data = ipv4 ? attrs.backendData : null;
    const vtepMac = data
      ? (publishedVtepMac(node, this.names, data.vni) ?? data.vtepMac)
      : undefined;
    const own = {
      ...attrs,
      publicIp,
      backendData: data && vtepMac ? { vni: data.vni, vtepMac } : data,
    };
    if (attrs.publicIpv6 === null || attrs.publicIpv6 === undefined) return own;
    // dual-stack: the same for PublicIPv6 (public-ipv6-overwrite) and the IPv6 VtepMAC
    const publicIpv6 = publicIpv6Overwrite(node, this.names) ?? attrs.publicIpv6;
    const data6 = attrs.backendData6;
    const vtepMac6 = data6
      ? (publishedVtepMac(node, this.names, data6.vni, 6) ?? data6.vtepMac)
      : undefined;
    return {
      ...own,
      publicIpv6,
      ...(data6 && vtepMac6 ? { backendData6: { vni: data6.vni, vtepMac: vtepMac6 } } : {}),
    };
  }

  /** Patches our annotations when they differ; the lease as it now stands. */
  private async publish(
    node: NodeView,
    subnet: Cidr | null,
    subnet6: Cidr6 | null | undefined,
    attrs: LeaseAttrs,
    signal: AbortSignal,
  ): Promise<Lease> {
    const values = annotationValues(attrs, this.names);
    const current = publishes(node, values)
      ? node
      : await this.api.patchNodeStatus(
          this.nodeName,
          { metadata: { annotations: values } },
          signal,
        );
    this.listFloor = current.resourceVersion || this.listFloor;
    return {
      key: this.nodeName,
      subnet,
      ...(subnet6 ? { subnet6 } : {}),
      attrs,
      expiresAt: Date.now() + RECHECK_MS,
      version: current.resourceVersion,
    };
  }

  async acquireLease(req: AcquireRequest, signal: AbortSignal): Promise<Lease> {
    const ipv4 = req.config.ipv4 !== null;
    this.readIpv4 = ipv4;
    const node = await this.ownNode(signal);
    const subnet = ownSubnet(node, req.config);
    const subnet6 = ownSubnet6(node, req.config);
    return this.publish(node, subnet, subnet6, this.ownAttrs(node, req.attrs, ipv4), signal);
  }

  /**
   * The node still has the podCIDR we hold: none yet (re-registered) is a wait, another one
   * LEASE_TAKEN. Nothing to check for an IPv6-only lease (no IPv4 subnet).
   */
  private sameSubnet(node: NodeView, lease: Lease): void {
    const held = lease.subnet;
    if (!held) return;
    const now = podCidr(node);
    if (now && sameCidr(now, held)) return;
    if (!now)
      throw new TwillError(
        'STORE_UNAVAILABLE',
        `node ${this.nodeName} has no spec.podCIDR (registered again, not yet allocated); waiting for ${formatCidr(held)}`,
      );
    throw new TwillError(
      'LEASE_TAKEN',
      `node ${this.nodeName} now has spec.podCIDR ${formatCidr(now)}, not ${formatCidr(held)}; restart twill to take the node's new subnet`,
    );
  }

  /**
   * The same for the IPv6 podCIDR of a dual-stack or IPv6-only lease (a dual-stack one's IPv4
   * podCIDR was checked first, so only an IPv6-only lease gets here with no podCIDR at all).
   */
  private sameSubnet6(node: NodeView, lease: Lease): void {
    if (!lease.subnet6) return;
    const now = podCidr6(node);
    if (now && sameCidr6(now, lease.subnet6)) return;
    if (!now && node.podCidrs.length === 0)
      throw new TwillError(
        'STORE_UNAVAILABLE',
        `node ${this.nodeName} has no spec.podCIDRs (registered again, not yet allocated); waiting for ${formatCidr6(lease.subnet6)}`,
      );
    throw new TwillError(
      'LEASE_TAKEN',
      `node ${this.nodeName} now has ${now ? `IPv6 spec.podCIDRs ${formatCidr6(now)}` : 'no IPv6 spec.podCIDRs'}, not ${formatCidr6(lease.subnet6)}; restart twill to take the node's new subnets`,
    );
  }

  async renewLease(lease: Lease, signal: AbortSignal): Promise<Lease> {
    const node = await this.api.readNode(this.nodeName, signal);
    if (!node)
      throw new TwillError(
        'LEASE_LOST',
        `node ${this.nodeName} was deleted from the Kubernetes API`,
      );
    this.sameSubnet(node, lease);
    this.sameSubnet6(node, lease);
    return this.publish(node, lease.subnet, lease.subnet6, lease.attrs, signal);
  }

  async reclaimLease(lease: Lease, signal: AbortSignal): Promise<Lease> {
    const node = await this.ownNode(signal);
    this.sameSubnet(node, lease);
    this.sameSubnet6(node, lease);
    return this.publish(node, lease.subnet, lease.subnet6, lease.attrs, signal);
  }

  /** A Kubernetes lease never expires (twill status shows "never"). */
  async leaseExpiry(): Promise<number> {
    return Number.POSITIVE_INFINITY;
  }

  /** Sets NetworkUnavailable=False on our Node: the dataplane is up. */
  async markReady(_lease: Lease, signal: AbortSignal): Promise<void> {
    // already False: patching again would only move lastTransitionTime
    if ((await this.api.readNode(this.nodeName, signal))?.networkUnavailable === 'False') return;
    await this.api.patchNodeStatus(this.nodeName, networkAvailablePatch(new Date()), signal);
  }

  async watchLeases(opts: {
    signal: AbortSignal;
    onEvent: (ev: LeaseEvent) => void;
  }): Promise<void> {
    const { onEvent } = opts;
    // managed nodes reported so far: a Node that stops being managed is a delete
    let known = new Set<string>();
    await relistLoop<string>({
      ...opts,
      relistMs: this.relistMs,
      list: async (signal) => {
        const floor = this.listFloor;
        const listing = await this.api.listNodes(
          signal,
          floor === undefined ? {} : { notOlderThan: floor },
        );
        // (later lists may come from the cache as it stands: it has caught up with us once)
        if (this.listFloor === floor) this.listFloor = undefined;
        const managed = listing.nodes.filter((n) => isManaged(n, this.names));
        known = new Set(managed.map((n) => n.name));
        return {
          records: managed.map((n) => nodeRecord(n, this.names, { ipv4: this.readIpv4 })),
          detail: `listed ${listing.nodes.length} nodes`,
          cursor: listing.resourceVersion,
        };
      },
      watch: async (w) => {
        const end = await this.follow({ ...w, onEvent, known });
        if (!('detail' in end)) return { reason: 'aborted' };
        return end.reason === 'gone'
          ? {
              reason: 'relist',
              kind: 'gone',
              detail: `resourceVersion expired (410): ${end.detail}`,
            }
          : { reason: 'failed', kind: 'failed', detail: end.detail };
      },
    });
  }

  /**
   * Watches from `cursor` (a resourceVersion), resuming after each server-side close, until
   * `signal` ends the round.
   */
  private async follow(o: {
    cursor: string;
    signal: AbortSignal;
    progress: () => void;
    backoff: Backoff;
    onEvent: (ev: LeaseEvent) => void;
    known: Set<string>;
  }): Promise<NodeWatchEnd> {
    let rv = o.cursor;
    try {
      for (;;) {
        const started = Date.now();
        // a watch asked for after the abort ends 'aborted' at once
        const end = await this.api.watchNodes({
          resourceVersion: rv,
          timeoutSeconds: this.watchTimeout,
          signal: o.signal,
          onEvent: (ev) => {
            o.progress();
            if (ev.type === 'bookmark') rv = ev.resourceVersion || rv;
            else rv = ev.node.resourceVersion || rv;
            if (ev.type !== 'bookmark') this.nodeChanged(ev.type, ev.node, o);
          },
        });
        if (end.reason !== 'closed') return end;
        // a server (or proxy) that ends every watch at once must not make this a busy loop
        if (Date.now() - started < 1_000) await pause(o.backoff.next(), o.signal);
      }
    } catch (err) {
      // the round's signal (the periodic re-list, or the stop) cut the pause short
      if (o.signal.aborted) return { reason: 'aborted' };
      throw err;
    }
  }

  /**
   * One Node event as lease events: a managed node is a put; a deleted or no longer managed one, a
   * delete.
   */
  private nodeChanged(
    type: 'put' | 'delete',
    node: NodeView,
    o: { onEvent: (ev: LeaseEvent) => void; known: Set<string> },
  ): void {
    const wasKnown = o.known.has(node.name) || node.name === this.nodeName;
    if (type === 'put' && isManaged(node, this.names)) {
      o.known.add(node.name);
      o.onEvent({ type: 'put', record: nodeRecord(node, this.names, { ipv4: this.readIpv4 }) });
    } else if (wasKnown) {
      // a deleted Node is gone for good; one that lost its annotation may be re-published by its
      // twill at once
      o.known.delete(node.name);
      o.onEvent({ type: 'delete', key: node.name, ...(type === 'delete' ? { gone: true } : {}) });
    }
  }

  async close(): Promise<void> {
    // the API client's idle keep-alive connections do not hold the process open (Node unrefs
    // them); watches end with their signals
  }
}
