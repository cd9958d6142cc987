// `npm run lab -- up`'s options, and which combinations the labs refuse: checked before anything
// is built or made, so a wrong command line costs nothing.
import type { StoreMode } from './cluster.ts';

export interface UpOptions {
  readonly slow?: number;
  readonly nodes: number;
  readonly pods: number;
  readonly backend: 'vxlan' | 'host-gw';
  readonly store: StoreMode;
  readonly kubelet?: boolean;
  readonly etcdMembers?: number;
  readonly vagrant?: boolean;
  readonly spares?: number;
  readonly dualStack?: boolean;
  readonly ipv6Only?: boolean;
  /** twill in nftables mode (`"EnableNFTables": true`): the netns lab, either store */
  readonly nftables?: boolean;
}

/** Why the labs refuse this `up` command line, or undefined when one of them takes it. */
export function upConflict(o: UpOptions): string | undefined {
  if (o.vagrant === true) {
    if (
      o.kubelet === true ||
      o.store !== 'etcd' ||
      o.slow !== undefined ||
      o.etcdMembers !== undefined ||
      o.dualStack === true ||
      o.ipv6Only === true ||
      o.nftables === true
    )
      return '--vagrant runs the etcd lab on Vagrant machines: no --kubelet, --store kube, --slow, --etcd-members, --dual-stack, --ipv6-only or --nftables';
    return undefined;
  }
  if (o.spares !== undefined) return '--spares is for the Vagrant lab (--vagrant)';
  if (o.dualStack === true && o.kubelet === true)
    return '--dual-stack is for the netns lab with either store (--store etcd|kube), not --kubelet: deploy/ as shipped is IPv4';
  if (o.ipv6Only === true) {
    if (o.kubelet === true)
      return '--ipv6-only is for the netns lab with the Kubernetes store (--store kube), not --kubelet: deploy/ as shipped is IPv4';
    if (o.dualStack === true)
      return '--ipv6-only and --dual-stack exclude each other: IPv6 alone, or IPv4 and IPv6';
    if (o.store !== 'kube')
      return "--ipv6-only needs the Kubernetes store (add --store kube): the etcd store, flannel's as twill's, always leases an IPv4 subnet";
  }
  if (o.nftables === true && o.kubelet === true)
    return "--nftables is for the netns lab with either store (--store etcd|kube), not --kubelet: deploy/'s net-conf.json is iptables mode";
  if (o.kubelet === true && (o.slow !== undefined || o.backend !== 'vxlan' || o.store !== 'etcd'))
    return '--kubelet runs deploy/ as shipped (vxlan, the Kubernetes API as store) at full speed: no --backend, --store or --slow';
  return undefined;
}
