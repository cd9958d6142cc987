// Which overlay this node runs, as far as the facts tell: the backend, VNI
// and UDP port from the network config when the store answered, else from
// an existing twill.<VNI> device, else flannel's defaults. Several checks
// need it (rp_filter, MTU, the vxlan port), so it is worked out once here,
// as are the address families the node runs (IPv4 only, dual-stack, IPv6
// only), where the masquerade lives (iptables or nftables mode) and which
// leases are ours.
import type { Ipv6NetConfig } from '../config/netconf.ts';
import { DEFAULT_VNI, DEFAULT_VXLAN_PORT } from '../config/netconf.ts';
import { vxlan6DeviceName, vxlanDeviceName } from '../dataplane/desired.ts';
import { DEVICE6_PREFIX, DEVICE_PREFIX } from '../dataplane/model.ts';
import type { Lease } from '../lease/types.ts';
import { subnetFamilies } from '../subnetenv.ts';
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

/** The address families the node runs: IPv4 only, dual-stack, or IPv6 only. */
export interface Families {
  readonly ipv4: boolean;
  readonly ipv6: boolean;
}

/**
 * The node's families: the network config's (EnableIPv4, EnableIPv6) when the store answered;
 * else subnet.env's pairs, IPv6 also when a twill-v6.* device exists; else IPv4, with IPv6 when a
 * twill-v6.* device exists. The gather step and the checks both work it out from the same facts,
 * so they agree on what was read.
 */
export function families(f: Pick<DoctorFacts, 'store' | 'subnetEnv' | 'links'>): Families {
  if (f.store.ok) {
    const c = f.store.value.config;
    return { ipv4: c.ipv4 !== null, ipv6: c.ipv6 !== null };
  }
  const env = f.subnetEnv.ok ? f.subnetEnv.value : undefined;
  const pairs = env ? subnetFamilies(env) : undefined;
  const device6 = f.links.ok && f.links.value.some((l) => l.name.startsWith(DEVICE6_PREFIX));
  return { ipv4: pairs ? pairs.v4 !== undefined : true, ipv6: pairs?.v6 !== undefined || device6 };
}

/**
 * Where twill keeps the masquerade: in its nftables tables ("EnableNFTables": true) or in its
 * iptables chains, as the network config says; undefined when the store did not answer (the config
 * is the only place that tells).
 */
export function masqMode(f: Pick<DoctorFacts, 'store'>): 'nftables' | 'iptables' | undefined {
  if (!f.store.ok) return undefined;
  return f.store.value.config.nftables ? 'nftables' : 'iptables';
}

/** Whether IPv4 is off (an IPv6-only node): the IPv4 checks are n/a or look at IPv6 instead. */
export function ipv6Only(f: Pick<DoctorFacts, 'store' | 'subnetEnv' | 'links'>): boolean {
  return !families(f).ipv4;
}

/**
 * The address peers know us by, and the lease field that carries it: PublicIP, or PublicIPv6 on
 * an IPv6-only node (whose leases have no PublicIP); why it cannot be told otherwise.
 */
export type OwnAddress =
  | { readonly ok: true; readonly field: 'PublicIP' | 'PublicIPv6'; readonly ip: string }
  | { readonly ok: false; readonly field: 'PublicIP' | 'PublicIPv6'; readonly error: string };

export function ownAddress(f: DoctorFacts): OwnAddress {
  if (!ipv6Only(f)) {
    const field = 'PublicIP';
    if (!f.underlay.ok) return { ok: false, field, error: f.underlay.error };
    const ip = f.underlay.value.publicIp;
    return ip === null
      ? { ok: false, field, error: `${f.underlay.value.name} has no IPv4 address` }
      : { ok: true, field, ip };
  }
  const field = 'PublicIPv6';
  const u6 = f.underlay6;
  if (u6 === undefined)
    return { ok: false, field, error: "the underlay's IPv6 address was not read" };
  return u6.ok ? { ok: true, field, ip: u6.value.publicIp } : { ok: false, field, error: u6.error };
}

/** Whether a lease carries our address in the field `a` names. */
export function isOwnLease(lease: Lease, a: OwnAddress): boolean {
  if (!a.ok) return false;
  return (a.field === 'PublicIP' ? lease.attrs.publicIp : lease.attrs.publicIpv6) === a.ip;
}

/** Our leases: the store's valid records with our PublicIP (PublicIPv6 on an IPv6-only node). */
export function ownLeases(f: DoctorFacts): Lease[] {
  if (!f.store.ok) return [];
  const a = ownAddress(f);
  return f.store.value.leases.flatMap((r) => (r.ok && isOwnLease(r.lease, a) ? [r.lease] : []));
}

/** The IPv6 network config, when the store answered and it enables IPv6. */
export function ipv6Config(f: Pick<DoctorFacts, 'store'>): Ipv6NetConfig | null {
  return f.store.ok ? f.store.value.config.ipv6 : null;
}
