// flannel's Kubernetes format, pure: a Node object as twill sees it (name,
// podCIDRs, annotations, resourceVersion), the lease record a Node stands
// for, and the status patches twill publishes (the annotations under the
// prefix, and the NetworkUnavailable=False condition). Node objects are
// untrusted input: a malformed annotation makes a LEASE_INVALID record
// naming the annotation and its value, never a half-read lease.
//
// Dual-stack: spec.podCIDRs lists one CIDR per family, IPv4 or IPv6 first
// (the controller-manager allocates both with a dual --cluster-cidr), and
// flannel's annotations public-ipv6 and backend-v6-data carry PublicIPv6 and
// BackendV6Data. A Node without an IPv6 podCIDR while IPv6 is enabled:
//   - our own Node: CONFIG_INVALID naming the fix (podCIDRs are set once and
//     never change, so waiting would wait forever; flannel fails too);
//   - a peer: its IPv4 half alone (a lease without subnet6: routed for IPv4,
//     as flannel does with an empty IPv6 subnet), so a node that joined
//     before the cluster went dual-stack keeps its IPv4 reachability.
// A peer with an IPv6 podCIDR but no public-ipv6 annotation (its twill or
// flannel does not run dual-stack yet, in a rolling upgrade, while the
// cluster already allocates both families) is routed for IPv4 alone too:
// admission drops its IPv6 subnet (admit.ts forOurFamilies). A malformed
// public-ipv6 or backend-v6-data annotation does not make the record
// invalid: it is the lease's v6Problem, a refusal only where our config has
// IPv6 (a node running IPv4 only ignores those annotations, as flannel does).
//
// IPv6-only ("EnableIPv4": false; spec.podCIDRs is one IPv6 CIDR): our own
// Node must have an IPv6 podCIDR (none yet: a wait; only IPv4 ones:
// CONFIG_INVALID naming the fix); our lease has no IPv4 subnet and no
// PublicIP, and we publish backend-type, public-ipv6, backend-v6-data and
// kube-subnet-manager but not public-ip or backend-data, as flannel's kube
// subnet manager with enableIPv4 false. Peers are read the same way there
// (`ipv4: false`): their IPv4 podCIDR and annotations are ignored, never
// checked (subnet null, PublicIP null), and a peer without an IPv6 podCIDR is
// an invalid record naming why. On a node running IPv4, a peer Node with no
// IPv4 podCIDR but an IPv6 one (an IPv6-only node) is read as such an
// IPv6-only lease too, not as an invalid record: a dual-stack node routes its
// IPv6 half (its pods have IPv6 addresses only, so nothing is half
// reachable; the mirror of a peer without an IPv6 podCIDR routed for IPv4),
// and an IPv4-only node refuses it in admission, saying it is IPv6 only
// (admit.ts). flannel with IPv4 on skips such a Node with an error instead.
import type { NetConfig } from '../config/netconf.ts';
import { TwillError } from '../errors.ts';
import { containsCidr, formatCidr, isIpv4, parseCidr, type Cidr } from '../net/ipv4.ts';
import { canonicalIpv6, containsCidr6, formatCidr6, parseCidr6, type Cidr6 } from '../net/ipv6.ts';
import { decodeLeaseObject } from './codec.ts';
import { peerRecord, type LeaseAttrs, type LeaseRecord } from './types.ts';

export const DEFAULT_ANNOTATION_PREFIX = 'flannel.alpha.coreos.com';

/** The parts of a Node twill reads. */
export interface NodeView {
  readonly name: string;
  readonly resourceVersion: string;
  /** metadata.creationTimestamp, ms (the typed client gives a Date, raw watch JSON a string) */
  readonly createdAt?: number;
  /** spec.podCIDRs, else [spec.podCIDR], else [] */
  readonly podCidrs: readonly string[];
  readonly annotations: Readonly<Record<string, string>>;
  /** the status of the NetworkUnavailable condition ("True", "False"), when the Node has one */
  readonly networkUnavailable: string | undefined;
}

export interface Annotations {
  readonly backendType: string;
  readonly backendData: string;
  readonly publicIp: string;
  readonly publicIpOverwrite: string;
  readonly subnetManager: string;
  /** dual-stack (flannel's): PublicIPv6, BackendV6Data, and the PublicIPv6 override */
  readonly publicIpv6: string;
  readonly backendV6Data: string;
  readonly publicIpv6Overwrite: string;
}

/** The annotation names under `prefix` (flannel's: flannel.alpha.coreos.com/backend-type …). */
export function annotationNames(prefix: string): Annotations {
  const p = prefix.replace(/\/+$/, '');
  return {
    backendType: `${p}/backend-type`,
    backendData: `${p}/backend-data`,
    publicIp: `${p}/public-ip`,
    publicIpOverwrite: `${p}/public-ip-overwrite`,
    subnetManager: `${p}/kube-subnet-manager`,
    publicIpv6: `${p}/public-ipv6`,
    backendV6Data: `${p}/backend-v6-data`,
    publicIpv6Overwrite: `${p}/public-ipv6-overwrite`,
  };
}

function record(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

/**
 * Reads a Node from the API (typed client object or raw watch JSON, which share these field names).
 */
export function nodeView(obj: unknown): NodeView | undefined {
  const meta = record(record(obj).metadata);
  const spec = record(record(obj).spec);
  if (typeof meta.name !== 'string' || meta.name === '') return undefined;
  const annotations = Object.fromEntries(
    Object.entries(record(meta.annotations)).filter(
      (e): e is [string, string] => typeof e[1] === 'string',
    ),
  );
  const list = strings(spec.podCIDRs);
  const single = typeof spec.podCIDR === 'string' && spec.podCIDR !== '' ? [spec.podCIDR] : [];
  const conditions = record(record(obj).status).conditions;
  const network = (Array.isArray(conditions) ? conditions : [])
    .map(record)
    .find((c) => c.type === 'NetworkUnavailable');
  const created =
    meta.creationTimestamp instanceof Date
      ? meta.creationTimestamp.getTime()
      : typeof meta.creationTimestamp === 'string'
        ? Date.parse(meta.creationTimestamp)
        : Number.NaN;
  return {
    name: meta.name,
    resourceVersion: typeof meta.resourceVersion === 'string' ? meta.resourceVersion : '',
    ...(Number.isFinite(created) ? { createdAt: created } : {}),
    podCidrs: list.length > 0 ? list : single,
    annotations,
    networkUnavailable: typeof network?.status === 'string' ? network.status : undefined,
  };
}

/** True when twill (or flannel) runs on the node in Kubernetes mode: only such nodes are peers. */
export function isManaged(node: NodeView, names: Annotations): boolean {
  return node.annotations[names.subnetManager] === 'true';
}

/**
 * The node's IPv4 pod CIDR (dual-stack nodes list an IPv6 one too); undefined when none is
 * allocated.
 */
export function podCidr(node: NodeView): Cidr | undefined {
  for (const text of node.podCidrs) {
    const cidr = parseCidr(text, { strict: true });
    if (cidr) return cidr;
  }
  return undefined;
}

/** The node's IPv6 pod CIDR (a dual-stack node's second family); undefined when it has none. */
export function podCidr6(node: NodeView): Cidr6 | undefined {
  for (const text of node.podCidrs) {
    const cidr = parseCidr6(text, { strict: true });
    if (cidr) return cidr;
  }
  return undefined;
}

function invalid(message: string): never {
  throw new TwillError('LEASE_INVALID', message);
}

/**
 * Which of a Node's families a reader takes: `ipv4: false` on an IPv6-only node (net-conf.json's
 * "EnableIPv4": false), which ignores the IPv4 podCIDR, public-ip and backend-data of every Node,
 * as flannel's kube subnet manager with enableIPv4 false. Default: both.
 */
export interface NodeReadOptions {
  readonly ipv4?: boolean;
}

/**
 * The lease attributes a managed Node publishes; LEASE_INVALID naming the annotation when one is
 * bad. With `ipv4: false` public-ip and backend-data are not read (publicIp, backendData null).
 */
export function nodeAttrs(node: NodeView, names: Annotations, o: NodeReadOptions = {}): LeaseAttrs {
  const ipv4 = o.ipv4 !== false;
  const a = node.annotations;
  const publicIp = ipv4 ? a[names.publicIp] : null;
  if (publicIp === undefined || (publicIp !== null && !isIpv4(publicIp)))
    invalid(
      `annotation ${names.publicIp} ${JSON.stringify(publicIp ?? null)} is not an IPv4 address`,
    );
  const backendType = a[names.backendType] ?? '';
  const data = ipv4 ? jsonAnnotation(a, names.backendData) : null;
  const publicIpv6 = a[names.publicIpv6];
  // the IPv6 annotations' problems are kept apart (the lease's v6Problem), as the codec does
  let data6: unknown = null;
  let problem6: string | undefined;
  try {
    data6 = jsonAnnotation(a, names.backendV6Data);
  } catch (err) {
    problem6 = (err as Error).message;
  }
  let attrs: LeaseAttrs;
  try {
    attrs = decodeLeaseObject(
      {
        ...(publicIp === null ? {} : { PublicIP: publicIp }),
        BackendType: backendType,
        ...(data === null ? {} : { BackendData: data }),
        // an empty public-ipv6 is flannel's "none" (it writes the annotations only with IPv6 on)
        ...(publicIpv6 === undefined || publicIpv6 === '' ? {} : { PublicIPv6: publicIpv6 }),
        ...(data6 === null ? {} : { BackendV6Data: data6 }),
      },
      { ipv4 },
    );
  } catch (err) {
    const read = ipv4 ? `${names.backendType}, ${names.backendData}` : names.backendType;
    throw new TwillError('LEASE_INVALID', `node annotations (${read}): ${(err as Error).message}`);
  }
  const v6Problem =
    problem6 ??
    (attrs.v6Problem === undefined
      ? undefined
      : `node annotations (${names.publicIpv6}, ${names.backendV6Data}): ${attrs.v6Problem}`);
  if (v6Problem === undefined) return attrs;
  const { backendData6: _data6, v6Problem: _problem, ...v4 } = attrs;
  return { ...v4, publicIpv6: null, v6Problem };
}

/** A JSON annotation's value; null when absent, empty or "null". */
function jsonAnnotation(a: Readonly<Record<string, string>>, name: string): unknown {
  const text = a[name];
  if (text === undefined || text === '') return null;
  try {
    return JSON.parse(text);
  } catch {
    invalid(`annotation ${name} is not JSON: ${JSON.stringify(text.slice(0, 80))}`);
  }
}

/**
 * The lease record a Node stands for; its key is the node name. `ipv4: false` (an IPv6-only node
 * reading): the Node's IPv4 half is ignored. A Node with an IPv6 podCIDR but no IPv4 one is an
 * IPv6-only lease (subnet null) for every reader (see the top of this file).
 */
export function nodeRecord(
  node: NodeView,
  names: Annotations,
  o: NodeReadOptions = {},
): LeaseRecord {
  const key = node.name;
  const ipv4 = o.ipv4 !== false;
  const subnet = ipv4 ? (podCidr(node) ?? null) : null;
  // a peer without an IPv6 podCIDR is IPv4 only (see the top of this file)
  const subnet6 = podCidr6(node) ?? null;
  // an IPv4 podCIDR that does not parse (host bits set, say) keeps the Node a bad record, as before
  // IPv6-only existed: its IPv4 half is not silently dropped to route it as IPv6-only
  const badV4 = ipv4 && !subnet ? node.podCidrs.find((t) => !t.includes(':')) : undefined;
  if (badV4 !== undefined)
    return {
      key,
      ok: false,
      reason: `node ${key}: spec.podCIDRs ${JSON.stringify(badV4.slice(0, 80))} is not an IPv4 network CIDR`,
    };
  if (!subnet && !subnet6) {
    const listed = node.podCidrs.join(', ');
    const what =
      node.podCidrs.length === 0
        ? 'has no spec.podCIDR'
        : ipv4
          ? `has no IPv4 (nor IPv6) spec.podCIDRs (${listed})`
          : `has no IPv6 spec.podCIDRs (${listed}), and this node runs IPv6 only ("EnableIPv4": false)`;
    return { key, ok: false, reason: `node ${key} ${what}` };
  }
  try {
    // no IPv4 subnet: the Node's IPv4 annotations are not ours to read (flannel writes none then)
    const attrs = nodeAttrs(node, names, { ipv4: subnet !== null });
    const version = node.resourceVersion;
    return peerRecord({ key, subnet, subnet6, attrs, version, claimedAt: node.createdAt });
  } catch (err) {
    return { key, ok: false, reason: `node ${key}: ${(err as Error).message}` };
  }
}

/**
 * Our subnet: the node's podCIDR, which must lie inside Network and leave
 * room for pods. No podCIDR yet is STORE_UNAVAILABLE (the daemon waits and
 * retries); a podCIDR outside Network is CONFIG_INVALID (an operator fixes it).
 * null when the config has no IPv4 (IPv6-only: an IPv4 podCIDR is ignored).
 */
export function ownSubnet(node: NodeView, config: NetConfig): Cidr | null {
  const ipv4 = config.ipv4;
  if (!ipv4) return null;
  const subnet = podCidr(node);
  if (!subnet) {
    throw new TwillError(
      'STORE_UNAVAILABLE',
      `node ${node.name} has no IPv4 spec.podCIDR yet: the controller-manager must allocate node CIDRs (kube-controller-manager --allocate-node-cidrs=true --cluster-cidr=${formatCidr(ipv4.network)}), or set spec.podCIDR when creating the Node; twill waits for it`,
    );
  }
  if (!containsCidr(ipv4.network, subnet)) {
    throw new TwillError(
      'CONFIG_INVALID',
      `node ${node.name} spec.podCIDR ${formatCidr(subnet)} is outside Network ${formatCidr(ipv4.network)} of net-conf.json; make the controller-manager's --cluster-cidr and Network agree`,
    );
  }
  if (subnet.prefix > 30)
    throw new TwillError(
      'CONFIG_INVALID',
      `node ${node.name} spec.podCIDR ${formatCidr(subnet)} is too small for pods (at most /30)`,
    );
  return subnet;
}

/**
 * Our IPv6 subnet when IPv6 is enabled: the node's IPv6 podCIDR, which must lie inside IPv6Network.
 * null when the config has no IPv6. A node with an IPv4 podCIDR but no IPv6 one is CONFIG_INVALID:
 * spec.podCIDRs is set once, so it will not gain one by waiting (see the top of this file). IPv6
 * only: a node with no podCIDR at all is STORE_UNAVAILABLE (not allocated yet), as `ownSubnet`'s.
 */
export function ownSubnet6(node: NodeView, config: NetConfig): Cidr6 | null {
  const ipv6 = config.ipv6;
  if (!ipv6) return null;
  const subnet6 = podCidr6(node);
  const network6 = formatCidr6(ipv6.network);
  if (!subnet6 && !config.ipv4 && node.podCidrs.length === 0) {
    throw new TwillError(
      'STORE_UNAVAILABLE',
      `node ${node.name} has no IPv6 spec.podCIDRs yet, and net-conf.json is IPv6 only ("EnableIPv4": false): the controller-manager must allocate IPv6 node CIDRs (kube-controller-manager --allocate-node-cidrs=true --cluster-cidr=${network6}), or set spec.podCIDRs when creating the Node; twill waits for it`,
    );
  }
  if (!subnet6 && !config.ipv4) {
    throw new TwillError(
      'CONFIG_INVALID',
      `node ${node.name} has no IPv6 spec.podCIDRs (${node.podCidrs.join(', ')}), but net-conf.json is IPv6 only ("EnableIPv4": false); give the controller-manager an IPv6 --cluster-cidr (e.g. --cluster-cidr=${network6}) and re-create the Node, or set "EnableIPv4": true with the IPv4 "Network"`,
    );
  }
  if (!subnet6) {
    const v4 = config.ipv4 ? `${formatCidr(config.ipv4.network)},` : '';
    throw new TwillError(
      'CONFIG_INVALID',
      `node ${node.name} has no IPv6 spec.podCIDRs (${node.podCidrs.join(', ') || 'none'}), but net-conf.json has "EnableIPv6": true; give the controller-manager a dual-stack --cluster-cidr (e.g. --cluster-cidr=${v4}${network6}) and re-create the Node, or remove "EnableIPv6"`,
    );
  }
  if (!containsCidr6(ipv6.network, subnet6)) {
    throw new TwillError(
      'CONFIG_INVALID',
      `node ${node.name} IPv6 spec.podCIDRs ${formatCidr6(subnet6)} is outside IPv6Network ${formatCidr6(ipv6.network)} of net-conf.json; make the controller-manager's --cluster-cidr and IPv6Network agree`,
    );
  }
  if (subnet6.prefix > 126)
    throw new TwillError(
      'CONFIG_INVALID',
      `node ${node.name} IPv6 spec.podCIDRs ${formatCidr6(subnet6)} is too small for pods (at most /126)`,
    );
  return subnet6;
}

/**
 * The public-ipv6-overwrite annotation of our own Node, when set; CONFIG_INVALID when it is not an
 * IPv6 address. Canonical text.
 */
export function publicIpv6Overwrite(node: NodeView, names: Annotations): string | undefined {
  const value = node.annotations[names.publicIpv6Overwrite];
  if (value === undefined || value === '') return undefined;
  const canonical = canonicalIpv6(value);
  if (canonical === undefined)
    throw new TwillError(
      'CONFIG_INVALID',
      `node ${node.name} annotation ${names.publicIpv6Overwrite} ${JSON.stringify(value.slice(0, 80))} is not an IPv6 address`,
    );
  return canonical;
}

/**
 * The public-ip-overwrite annotation of our own Node, when set; CONFIG_INVALID when it is not an
 * address.
 */
export function publicIpOverwrite(node: NodeView, names: Annotations): string | undefined {
  const value = node.annotations[names.publicIpOverwrite];
  if (value === undefined || value === '') return undefined;
  if (!isIpv4(value))
    throw new TwillError(
      'CONFIG_INVALID',
      `node ${node.name} annotation ${names.publicIpOverwrite} ${JSON.stringify(value)} is not an IPv4 address`,
    );
  return value;
}

/** The VtepMAC our own Node already publishes for this VNI: peers' FDB entries hold it. */
export function publishedVtepMac(
  node: NodeView,
  names: Annotations,
  vni: number,
  family: 4 | 6 = 4,
): string | undefined {
  try {
    // decoding checked and normalised the MAC; only the family asked for is read (an IPv6-only
    // Node publishes no IPv4 annotations)
    const attrs = nodeAttrs(node, names, { ipv4: family === 4 });
    const data = family === 4 ? attrs.backendData : attrs.backendData6;
    return data?.vni === vni ? data.vtepMac : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The annotation values twill publishes for `attrs`, exactly as flannel writes them: the IPv4 pair
 * (public-ip, backend-data) only with a PublicIP (none on an IPv6-only node, as flannel with
 * enableIPv4 false), the IPv6 pair only with a PublicIPv6.
 */
export function annotationValues(attrs: LeaseAttrs, names: Annotations): Record<string, string> {
  const json = (d: LeaseAttrs['backendData'] | undefined): string =>
    d ? JSON.stringify({ VNI: d.vni, VtepMAC: d.vtepMac }) : 'null';
  const v4 =
    attrs.publicIp !== null
      ? { [names.backendData]: json(attrs.backendData), [names.publicIp]: attrs.publicIp }
      : {};
  // the IPv6 pair only on a dual-stack or IPv6-only node (flannel writes them only with EnableIPv6)
  const v6 =
    attrs.publicIpv6 !== null && attrs.publicIpv6 !== undefined
      ? {
          [names.backendV6Data]: json(attrs.backendData6),
          [names.publicIpv6]: attrs.publicIpv6,
        }
      : {};
  return {
    [names.backendType]: attrs.backendType,
    ...v4,
    ...v6,
    [names.subnetManager]: 'true',
  };
}

/** True when the node already carries exactly these values. */
export function publishes(node: NodeView, values: Record<string, string>): boolean {
  return Object.entries(values).every(([k, v]) => node.annotations[k] === v);
}

/**
 * The strategic-merge patch of nodes/status that sets NetworkUnavailable=False (merged by type).
 */
export function networkAvailablePatch(now: Date): unknown {
  const time = now.toISOString().replace(/\.\d+Z$/, 'Z');
  return {
    status: {
      conditions: [
        {
          type: 'NetworkUnavailable',
          status: 'False',
          reason: 'TwillIsUp',
          message: 'twill programmed the pod network on this node',
          lastTransitionTime: time,
          lastHeartbeatTime: time,
        },
      ],
    },
  };
}
