// Which overlay this node runs, as far as the facts tell: the backend, VNI
// and UDP port from the network config when the store answered, else from
// an existing twill.<VNI> device, else flannel's defaults. Several checks
// need it (rp_filter, MTU, the vxlan port), so it is worked out once here,
// as is whether the node is dual-stack (IPv6 enabled).
import type { Ipv6NetConfig } from '../config/netconf.ts';
import { DEFAULT_VNI, DEFAULT_VXLAN_PORT } from '../config/netconf.ts';
import { vxlan6DeviceName, vxlanDeviceName } from '../dataplane/desired.ts';
import { DEVICE6_PREFIX, DEVICE_PREFIX } from '../dataplane/model.ts';
import type { DoctorFacts, LinkFact } from './facts.ts';

export interface OverlayView {
  /** undefined when neither the config nor a device says */
  readonly backend: 'vxlan' | 'host-gw' | undefined;
  /** the vxlan device's name (twill.<VNI>) for vxlan, undefined otherwise */
  readonly device: string | undefined;
  /** the IPv6 vxlan device's name (twill-v6.<VNI>) for vxlan, undefined otherwise */
  readonly device6: string | undefined;
  readonly port: number;
  /** Backend.MTU from the config, when set */
  readonly backendMtu: number | undefined;
  /** where the view comes from, for details: "the network config", "device twill.1", "defaults" */
  readonly source: string;
}

/** twill's own vxlan devices (twill.*). */
export function twillDevices(links: readonly LinkFact[]): LinkFact[] {
  return links.filter((l) => l.name.startsWith(DEVICE_PREFIX) && l.kind === 'vxlan');
}

export function overlayView(f: DoctorFacts): OverlayView {
  if (f.store.ok) {
    const b = f.store.value.config.backend;
    if (b.type === 'host-gw')
      return {
        backend: 'host-gw',
        device: undefined,
        device6: undefined,
        port: DEFAULT_VXLAN_PORT,
        backendMtu: undefined,
        source: 'the network config',
      };
    return {
      backend: 'vxlan',
      device: vxlanDeviceName(b.vni),
      device6: vxlan6DeviceName(b.vni),
      port: b.port,
      backendMtu: b.mtu,
      source: 'the network config',
    };
  }
  const dev = f.links.ok ? twillDevices(f.links.value)[0] : undefined;
  if (dev)
    return {
      backend: 'vxlan',
      device: dev.name,
      device6: vxlan6DeviceName(dev.vni ?? DEFAULT_VNI),
      port: dev.port ?? DEFAULT_VXLAN_PORT,
      backendMtu: undefined,
      source: `device ${dev.name}`,
    };
  return {
    backend: undefined,
    device: vxlanDeviceName(DEFAULT_VNI),
    device6: vxlan6DeviceName(DEFAULT_VNI),
    port: DEFAULT_VXLAN_PORT,
    backendMtu: undefined,
    source: 'defaults (store unreachable, no twill device)',
  };
}

/**
 * Whether the node is dual-stack: the network config's EnableIPv6 when the store answered, else
 * what subnet.env or a twill-v6.* device says.
 */
export function dualStack(f: Pick<DoctorFacts, 'store' | 'subnetEnv' | 'links'>): boolean {
  if (f.store.ok) return f.store.value.config.ipv6 !== null;
  if (f.subnetEnv.ok && f.subnetEnv.value?.network6) return true;
  return f.links.ok && f.links.value.some((l) => l.name.startsWith(DEVICE6_PREFIX));
}

/** The IPv6 network config, when the store answered and it enables IPv6. */
export function ipv6Config(f: Pick<DoctorFacts, 'store'>): Ipv6NetConfig | null {
  return f.store.ok ? f.store.value.config.ipv6 : null;
}
