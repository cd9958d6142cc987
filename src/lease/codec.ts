// flannel's etcd lease format: keys "<a.b.c.d>-<len>" and JSON values with
// PublicIP, PublicIPv6, BackendType, BackendData. Decoding treats the text as
// untrusted: anything malformed becomes a LEASE_INVALID error naming the
// field and value, never a half-parsed lease.
import { CiObject } from '../config/json-object.ts';
import { BACKEND_TYPES, type BackendType } from '../config/netconf.ts';
import { TwillError } from '../errors.ts';
import { formatCidr, formatIpv4, isIpv4, parseCidr, type Cidr } from '../net/ipv4.ts';
import type { LeaseAttrs, VxlanLeaseData } from './types.ts';

export function subnetKey(subnet: Cidr): string {
  return `${formatIpv4(subnet.base)}-${subnet.prefix}`;
}

function invalid(message: string): never {
  throw new TwillError('LEASE_INVALID', message);
}

/** Parses a lease key; host bits must be zero. */
export function parseSubnetKey(key: string): Cidr {
  const m = /^([0-9.]+)-(\d{1,2})$/.exec(key);
  const cidr = m ? parseCidr(`${m[1]}/${m[2]}`, { strict: true }) : undefined;
  if (!cidr) invalid(`key ${JSON.stringify(key)} is not a subnet of the form a.b.c.d-len`);
  return cidr;
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
  if (attrs.node !== undefined) value.TwillNode = attrs.node;
  return JSON.stringify(value);
}

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

/** Decodes an already parsed lease value (Kubernetes annotations are assembled into one). */
export function decodeLeaseObject(raw: unknown): LeaseAttrs {
  const obj = CiObject.from('value', raw, 'LEASE_INVALID');
  const publicIp = obj.string('PublicIP');
  if (publicIp === undefined || !isIpv4(publicIp))
    invalid(`PublicIP ${JSON.stringify(publicIp ?? null)} is not an IPv4 address`);
  const publicIpv6 = obj.string('PublicIPv6') ?? null;
  const backendType = obj.string('BackendType') ?? '';
  if (!BACKEND_TYPES.includes(backendType as BackendType)) {
    invalid(`BackendType ${JSON.stringify(backendType)} is not one of ${BACKEND_TYPES.join(', ')}`);
  }
  const type = backendType as BackendType;
  const backendData = type === 'vxlan' ? decodeVxlanData(obj.get('BackendData')) : null;
  const node = obj.get('TwillNode');
  if (node !== undefined && (typeof node !== 'string' || node === '' || node.length > 253))
    invalid('TwillNode is not a node name (a string of 1 to 253 characters)');
  return {
    publicIp,
    publicIpv6,
    backendType: type,
    backendData,
    ...(node === undefined ? {} : { node }),
  };
}

function decodeVxlanData(raw: unknown): VxlanLeaseData {
  if (raw === undefined) invalid('BackendData is missing for a vxlan lease');
  const obj = CiObject.from('BackendData', raw, 'LEASE_INVALID');
  const vni = obj.int('VNI', { min: 0, max: 16_777_215 });
  if (vni === undefined) invalid('BackendData.VNI is missing');
  const mac = obj.string('VtepMAC');
  if (mac === undefined) invalid('BackendData.VtepMAC is missing');
  return { vni, vtepMac: parseUnicastMac(mac, 'BackendData.VtepMAC') };
}

/** A one-line description of a lease for logs. */
export function describeLease(subnet: Cidr, attrs: LeaseAttrs): string {
  const mac = attrs.backendData ? ` vtep ${attrs.backendData.vtepMac}` : '';
  return `${formatCidr(subnet)} via ${attrs.publicIp} (${attrs.backendType}${mac})`;
}
