// Semantic checks on a decoded peer lease against our network config and our
// own subnet (DESIGN.md rule 6). Returns the reason a lease must be skipped,
// or undefined when it may reach a backend.
import type { NetConfig } from '../config/netconf.ts';
import { containsCidr, formatCidr, isUnicastHost, overlaps, parseIpv4, type Cidr } from '../net/ipv4.ts';
import type { Lease } from './types.ts';

export interface PeerContext {
  readonly config: NetConfig;
  /** our own subnet, when we hold one */
  readonly self: Cidr | undefined;
  /** subnets come from elsewhere (Kubernetes podCIDRs): any prefix inside Network, not only SubnetLen */
  readonly anySubnetSize?: boolean;
}

export function peerProblem(lease: Lease, ctx: PeerContext): string | undefined {
  const { config, self } = ctx;
  const subnet = formatCidr(lease.subnet);
  if (!ctx.anySubnetSize && lease.subnet.prefix !== config.subnetLen) {
    return `subnet ${subnet} is not a /${config.subnetLen} (SubnetLen)`;
  }
  if (!containsCidr(config.network, lease.subnet)) {
    return `subnet ${subnet} is outside Network ${formatCidr(config.network)}`;
  }
  if (self && overlaps(self, lease.subnet)) return `subnet ${subnet} overlaps our own subnet ${formatCidr(self)}`;
  const ip = parseIpv4(lease.attrs.publicIp);
  if (ip === undefined || !isUnicastHost(ip)) return `PublicIP ${lease.attrs.publicIp} is not a unicast host address`;
  if (lease.attrs.backendType !== config.backend.type) {
    return `BackendType ${lease.attrs.backendType} differs from ours (${config.backend.type})`;
  }
  if (config.backend.type === 'vxlan') {
    const vni = lease.attrs.backendData?.vni;
    if (vni !== config.backend.vni) return `BackendData.VNI ${String(vni)} differs from ours (${config.backend.vni})`;
  }
  return undefined;
}
