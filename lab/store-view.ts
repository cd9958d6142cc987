// What the drills read from the lease store, in either store mode: every
// node's lease (etcd: flannel's keys under <prefix>/subnets/; kube: the Node
// objects twill annotated, with their podCIDR) and the backend type (etcd:
// the network config; kube: the Nodes' backend-type annotation).
import { etcdctl, type Cluster } from './cluster.ts';

export interface LeaseView {
  /** etcd: the key's last part ("10.244.3.0-24"); kube: the Node's name */
  readonly key: string;
  /** "10.244.3.0/24" */
  readonly subnet: string;
  readonly publicIp: string;
  /** a dual-stack lease: its IPv6 subnet ("fd00:10:244:3::/64") and PublicIPv6 */
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

async function kubeLeases(c: Cluster): Promise<LeaseView[]> {
  const views: LeaseView[] = [];
  for (const n of await nodeObjects(c)) {
    const publicIp = annotation(n, 'public-ip');
    if (
      annotation(n, 'kube-subnet-manager') !== 'true' ||
      publicIp === undefined ||
      n.spec?.podCIDR === undefined
    )
      continue;
    const subnet6 = n.spec.podCIDRs?.find((c) => c.includes(':'));
    const publicIp6 = annotation(n, 'public-ipv6');
    views.push({
      key: n.metadata.name,
      subnet: n.spec.podCIDR,
      publicIp,
      ...(subnet6 === undefined || publicIp6 === undefined ? {} : { subnet6, publicIp6 }),
    });
  }
  return views;
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

/** The lease of the node at `ip`, if any. */
export async function leaseOf(c: Cluster, ip: string): Promise<LeaseView | undefined> {
  return (await leases(c)).find((l) => l.publicIp === ip);
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
