// flannel's etcd lease format: keys "<a.b.c.d>-<len>", or for a dual-stack
// lease "<a.b.c.d>-<len>&<ipv6>-<len>" (flannel's MakeSubnetKey), and JSON
// values with PublicIP, PublicIPv6, BackendType, BackendData and, for IPv6
// vxlan, BackendV6Data. Decoding treats the text as
// untrusted: anything malformed becomes a LEASE_INVALID error naming the
// field and value, never a half-parsed lease; except that a malformed IPv6
// field (PublicIPv6, BackendV6Data) is kept apart as the lease's `v6Problem`,
// since a node running IPv4 only ignores those fields (admit.ts decides).
// etcd leases always have an IPv4 half (flannel's etcd subnet manager always
// leases IPv4); only the Kubernetes store reads a lease without one, an
// IPv6-only Node's (`decodeLeaseObject` with `ipv4: false`).
import { CiObject } from '../config/json-object.ts';
import { BACKEND_TYPES, type BackendType } from '../config/netconf.ts';
import { TwillError } from '../errors.ts';
import { formatCidr, formatIpv4, isIpv4, parseCidr, type Cidr } from '../net/ipv4.ts';
import { canonicalIpv6, formatCidr6, formatIpv6, parseCidr6, type Cidr6 } from '../net/ipv6.ts';
import type { LeaseAttrs, VxlanLeaseData } from './types.ts';

/** The store key of a lease: flannel's MakeSubnetKey ("10.244.3.0-24&fd00:0:0:3::-64"). */
export function subnetKey(subnet: Cidr, subnet6?: Cidr6 | null): string {
  const v4 = `${formatIpv4(subnet.base)}-${subnet.prefix}`;
  return subnet6 ? `${v4}&${formatIpv6(subnet6.base)}-${subnet6.prefix}` : v4;
}

function invalid(message: string): never {
  throw new TwillError('LEASE_INVALID', message);
}

/** The subnets a lease key names. */
export interface KeySubnets {
  readonly subnet: Cidr;
  readonly subnet6: Cidr6 | null;
}

/**
 * Parses a lease key, IPv4 ("a.b.c.d-len") or dual-stack ("a.b.c.d-len&ipv6-len"); host bits must
 * be zero and the IPv6 part in canonical form, so that one lease has one key.
 */
export function parseLeaseKey(key: string): KeySubnets {
  const amp = key.indexOf('&');
  const subnet = parseCidr(amp < 0 ? key : key.slice(0, amp), { strict: true, separator: '-' });
  const m6 = amp < 0 ? undefined : /^([0-9a-f:]+)-(\d{1,3})$/.exec(key.slice(amp + 1));
  if (!subnet || m6 === null) {
    invalid(
      `key ${JSON.stringify(key.slice(0, 120))} is not a subnet of the form a.b.c.d-len or a.b.c.d-len&ipv6-len`,
    );
  }
  if (m6 === undefined) return { subnet, subnet6: null };
  const subnet6 = parseCidr6(`${m6[1]}/${m6[2]}`, { strict: true, canonical: true });
  if (!subnet6) {
    invalid(
      `key ${JSON.stringify(key.slice(0, 120))}: ${JSON.stringify(`${m6[1]}-${m6[2]}`)} is not a canonical IPv6 subnet with no host bits`,
    );
  }
  return { subnet, subnet6 };
}

/** Parses an IPv4-only lease key; host bits must be zero. */
export function parseSubnetKey(key: string): Cidr {
  const { subnet, subnet6 } = parseLeaseKey(key);
  if (subnet6) invalid(`key ${JSON.stringify(key)} is a dual-stack key, not an IPv4 subnet`);
  return subnet;
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

/** Normalises a MAC to lower case; refuses malformed, multicast and all-zero MACs. */
export function parseUnicastMac(text: string, field: string): string {
  const mac = text.toLowerCase();
  if (!MAC.test(mac)) invalid(`${field} ${JSON.stringify(text)} is not a MAC address`);
  if ((parseInt(mac.slice(0, 2), 16) & 1) === 1)
    invalid(`${field} ${text} is a multicast MAC, not a unicast one`);
  if (mac === '00:00:00:00:00:00') invalid(`${field} ${text} is the all-zero MAC`);
  return mac;
}

/**
 * The exact JSON flannel writes for a lease value (plus `TwillNode`, which flannel ignores, when
 * the lease names its node).
 */
export function encodeLeaseValue(attrs: LeaseAttrs): string {
  const value: Record<string, unknown> = {
    PublicIP: attrs.publicIp,
    PublicIPv6: attrs.publicIpv6,
    BackendType: attrs.backendType,
  };
  if (attrs.backendData)
    value.BackendData = { VNI: attrs.backendData.vni, VtepMAC: attrs.backendData.vtepMac };
  if (attrs.backendData6)
    value.BackendV6Data = { VNI: attrs.backendData6.vni, VtepMAC: attrs.backendData6.vtepMac };
  if (attrs.node !== undefined) value.TwillNode = attrs.node;
  return JSON.stringify(value);
}

/**
 * A lease value's keys as flannel and twill spell them: a value with no other key is read without
 * a case-insensitive index (json-object.ts), 5,000 times in a cold start.
 */
const LEASE_KEYS: ReadonlySet<string> = new Set([
  'PublicIP',
  'PublicIPv6',
  'BackendType',
  'BackendData',
  'BackendV6Data',
  'TwillNode',
]);
const VXLAN_KEYS: ReadonlySet<string> = new Set(['VNI', 'VtepMAC']);

/** Decodes a lease value. Throws LEASE_INVALID naming the field and value. */
export function decodeLeaseValue(text: string): LeaseAttrs {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    invalid(`value is not JSON: ${JSON.stringify(text.slice(0, 80))}`);
  }
  return decodeLeaseObject(raw);
}

/**
 * Decodes an already parsed lease value (Kubernetes annotations are assembled into one). With
 * `ipv4: false` the IPv4 fields (PublicIP, BackendData) are not read at all, and the lease has
 * none (publicIp and backendData null): an IPv6-only lease, as flannel's kube subnet manager
 * reads a Node with EnableIPv4 false.
 */
export function decodeLeaseObject(raw: unknown, o: { ipv4?: boolean } = {}): LeaseAttrs {
  const ipv4 = o.ipv4 !== false;
  const obj = CiObject.from('value', raw, 'LEASE_INVALID', LEASE_KEYS);
  const publicIp = ipv4 ? obj.string('PublicIP') : null;
  if (publicIp === undefined || (publicIp !== null && !isIpv4(publicIp)))
    invalid(`PublicIP ${JSON.stringify(publicIp ?? null)} is not an IPv4 address`);
  const backendType = obj.string('BackendType') ?? '';
  if (!BACKEND_TYPES.includes(backendType as BackendType)) {
    invalid(`BackendType ${JSON.stringify(backendType)} is not one of ${BACKEND_TYPES.join(', ')}`);
  }
  const type = backendType as BackendType;
  const backendData =
    ipv4 && type === 'vxlan' ? decodeVxlanData(obj.get('BackendData'), 'BackendData') : null;
  const { publicIpv6, backendData6, v6Problem } = decodeIpv6Fields(obj, type);
  const node = obj.get('TwillNode');
  if (node !== undefined && (typeof node !== 'string' || node === '' || node.length > 253))
    invalid('TwillNode is not a node name (a string of 1 to 253 characters)');
  return {
    publicIp,
    publicIpv6,
    backendType: type,
    backendData,
    ...(backendData6 ? { backendData6 } : {}),
    ...(v6Problem === undefined ? {} : { v6Problem }),
    ...(node === undefined ? {} : { node }),
  };
}

/**
 * PublicIPv6 and BackendV6Data. A malformed one does not make the lease invalid: its problem is
 * returned apart (both fields then absent), for admission to weigh against our own config.
 */
function decodeIpv6Fields(
  obj: CiObject,
  type: BackendType,
): { publicIpv6: string | null; backendData6: VxlanLeaseData | null; v6Problem?: string } {
  try {
    const publicIpv6 = decodePublicIpv6(obj.get('PublicIPv6'));
    const raw = obj.get('BackendV6Data');
    const backendData6 =
      type === 'vxlan' && raw !== undefined ? decodeVxlanData(raw, 'BackendV6Data') : null;
    return { publicIpv6, backendData6 };
  } catch (err) {
    if (!(err instanceof TwillError)) throw err;
    return { publicIpv6: null, backendData6: null, v6Problem: err.message };
  }
}

/** PublicIPv6: null or absent, or an IPv6 address, kept in canonical form. */
function decodePublicIpv6(raw: unknown): string | null {
  if (raw === undefined || raw === null) return null;
  const text = typeof raw === 'string' ? canonicalIpv6(raw) : undefined;
  if (text === undefined)
    invalid(`PublicIPv6 ${JSON.stringify(raw).slice(0, 80)} is not an IPv6 address`);
  return text;
}

function decodeVxlanData(raw: unknown, field: 'BackendData' | 'BackendV6Data'): VxlanLeaseData {
  if (raw === undefined) invalid(`${field} is missing for a vxlan lease`);
  const obj = CiObject.from(field, raw, 'LEASE_INVALID', VXLAN_KEYS);
  const vni = obj.int('VNI', { min: 0, max: 16_777_215 });
  if (vni === undefined) invalid(`${field}.VNI is missing`);
  const mac = obj.string('VtepMAC');
  if (mac === undefined) invalid(`${field}.VtepMAC is missing`);
  return { vni, vtepMac: parseUnicastMac(mac, `${field}.VtepMAC`) };
}

/** A one-line description of a lease for logs (an IPv6-only lease: its IPv6 half alone). */
export function describeLease(
  subnet: Cidr | null,
  attrs: LeaseAttrs,
  subnet6?: Cidr6 | null,
): string {
  const mac = attrs.backendData ? ` vtep ${attrs.backendData.vtepMac}` : '';
  const v6 = subnet6
    ? `${formatCidr6(subnet6)} via ${attrs.publicIpv6 ?? 'no PublicIPv6'}${attrs.backendData6 ? ` vtep ${attrs.backendData6.vtepMac}` : ''}`
    : undefined;
  const v4 = subnet ? `${formatCidr(subnet)} via ${attrs.publicIp ?? 'no PublicIP'}` : undefined;
  const both = [v4, v6].filter((s) => s !== undefined).join(', ') || 'no subnet';
  return `${both} (${attrs.backendType}${mac})`;
}

/**
 * A lease's subnet in one word, for log lines keyed on it: the IPv4 one, else the IPv6 one (an
 * IPv6-only lease).
 */
export function leaseSubnetText(lease: {
  readonly subnet: Cidr | null;
  readonly subnet6?: Cidr6 | null;
}): string {
  if (lease.subnet) return formatCidr(lease.subnet);
  return lease.subnet6 ? formatCidr6(lease.subnet6) : 'none';
}
