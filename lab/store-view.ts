// What the drills read from the lease store, in either store mode: every
// node's lease (etcd: flannel's keys under <prefix>/subnets/; kube: the Node
// objects twill annotated, with their podCIDR) and the backend type (etcd:
// the network config; kube: the Nodes' backend-type annotation). An
// IPv6-only lease (kube store, EnableIPv4 false) has no IPv4 half: its subnet
// and PublicIP are null, as twill's Lease's.
import { etcdctl, type Cluster, type LabNode } from './cluster.ts';

export interface LeaseView {
  /** etcd: the key's last part ("10.244.3.0-24"); kube: the Node's name */
  readonly key: string;
  /** "10.244.3.0/24"; null on an IPv6-only lease */
  readonly subnet: string | null;
  /** null on an IPv6-only lease (flannel writes no public-ip annotation with IPv4 off) */
  readonly publicIp: string | null;
  /** a lease with IPv6: its IPv6 subnet ("fd00:10:244:3::/64") and PublicIPv6 */
  readonly subnet6?: string;
  readonly publicIp6?: string;
}

/** flannel's annotation prefix, which the lab's twill uses (the default) */
export const ANNOTATION_PREFIX = 'flannel.alpha.coreos.com';

export interface NodeObject {
  readonly metadata: {
    readonly name: string;
    readonly annotations?: Readonly<Record<string, string>>;
  };
  readonly spec?: { readonly podCIDR?: string; readonly podCIDRs?: readonly string[] };
  readonly status?: {
    readonly conditions?: readonly { readonly type: string; readonly status: string }[];
  };
}

export async function nodeObjects(c: Cluster): Promise<NodeObject[]> {
  return (JSON.parse(await c.kubectl(['get', 'nodes', '-o', 'json'])) as { items: NodeObject[] })
    .items;
}

const annotation = (n: NodeObject, key: string): string | undefined =>
  n.metadata.annotations?.[`${ANNOTATION_PREFIX}/${key}`];

/**
 * The leases of the Nodes twill manages: each family's half where the Node has both its podCIDR
 * and twill's address annotation of that family (IPv4: public-ip; IPv6: public-ipv6); a Node
 * with neither half holds no lease yet.
 */
export function kubeLeaseViews(nodes: readonly NodeObject[]): LeaseView[] {
  const views: LeaseView[] = [];
  for (const n of nodes) {
    if (annotation(n, 'kube-subnet-manager') !== 'true') continue;
    const cidrs = n.spec?.podCIDRs ?? (n.spec?.podCIDR === undefined ? [] : [n.spec.podCIDR]);
    const subnet = cidrs.find((x) => !x.includes(':'));
    const subnet6 = cidrs.find((x) => x.includes(':'));
    const publicIp = annotation(n, 'public-ip');
    const publicIp6 = annotation(n, 'public-ipv6');
    const v4 = subnet !== undefined && publicIp !== undefined;
    const v6 = subnet6 !== undefined && publicIp6 !== undefined;
    if (!v4 && !v6) continue;
    views.push({
      key: n.metadata.name,
      subnet: v4 ? subnet : null,
      publicIp: v4 ? publicIp : null,
      ...(v6 ? { subnet6, publicIp6 } : {}),
    });
  }
  return views;
}

async function kubeLeases(c: Cluster): Promise<LeaseView[]> {
  return kubeLeaseViews(await nodeObjects(c));
}

async function etcdLeases(c: Cluster): Promise<LeaseView[]> {
  const out = await etcdctl(c, ['get', '--prefix', `${c.etcdPrefix}/subnets/`]);
  const lines = out.split('\n').filter(Boolean);
  const views: LeaseView[] = [];
  for (let i = 0; i + 1 < lines.length; i += 2) {
    const key = (lines[i] ?? '').split('/').at(-1) ?? '';
    const value = JSON.parse(lines[i + 1] ?? '{}') as { PublicIP?: string; PublicIPv6?: string };
    // flannel's dual-stack key: "<v4>-<len>&<v6>-<len>"
    const [v4 = '', v6] = key.split('&');
    const cidr = (part: string): string => part.replace(/-(\d+)$/, '/$1');
    views.push({
      key,
      subnet: cidr(v4),
      publicIp: String(value.PublicIP),
      ...(v6 === undefined || value.PublicIPv6 == null
        ? {}
        : { subnet6: cidr(v6), publicIp6: value.PublicIPv6 }),
    });
  }
  return views;
}

/** Every lease in the store: etcd keys, or the Nodes twill manages. */
export function leases(c: Cluster): Promise<LeaseView[]> {
  return c.store === 'kube' ? kubeLeases(c) : etcdLeases(c);
}

/**
 * Whether `l` is node `n`'s lease: its PublicIP is the node's IPv4 underlay address, or (a lease
 * with IPv6, such as an IPv6-only one, which has no PublicIP) its PublicIPv6 the node's IPv6 one.
 */
export function isLeaseOf(l: LeaseView, n: Pick<LabNode, 'ip' | 'ip6'>): boolean {
  return (
    (l.publicIp !== null && l.publicIp === n.ip) ||
    (l.publicIp6 !== undefined && l.publicIp6 === n.ip6)
  );
}

/** The lease of node `node` (isLeaseOf), if any. */
export async function leaseOf(
  c: Cluster,
  node: Pick<LabNode, 'ip' | 'ip6'> | undefined,
): Promise<LeaseView | undefined> {
  if (node === undefined) return undefined;
  return (await leases(c)).find((l) => isLeaseOf(l, node));
}

/** A lease's subnets, IPv4 first, each it has. */
export function subnetsOf(l: Pick<LeaseView, 'subnet' | 'subnet6'>): string[] {
  return [
    ...(l.subnet === null ? [] : [l.subnet]),
    ...(l.subnet6 === undefined ? [] : [l.subnet6]),
  ];
}

export async function backendOf(c: Cluster): Promise<string> {
  if (c.store === 'kube') {
    const types = (await nodeObjects(c))
      .map((n) => annotation(n, 'backend-type'))
      .filter((t) => t !== undefined);
    if (types[0] === undefined)
      throw new Error(`${c.description}: no Node carries ${ANNOTATION_PREFIX}/backend-type yet`);
    return types[0];
  }
  const conf = JSON.parse(
    await etcdctl(c, ['get', '--print-value-only', `${c.etcdPrefix}/config`]),
  ) as { Backend?: { Type?: string } };
  return conf.Backend?.Type ?? 'vxlan';
}
