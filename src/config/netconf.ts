// net-conf.json: flannel's network configuration, parsed and validated with
// flannel's rules (keys case-insensitive, SubnetLen/SubnetMin/SubnetMax
// defaults, EnableNFTables false), except that the default backend is vxlan
// rather than flannel's accidental udp. Pure: text in, NetConfig or a
// CONFIG_* error out.
import { TwillError } from '../errors.ts';
import {
  blockSize,
  formatCidr,
  formatIpv4,
  lastAddress,
  parseCidr,
  parseIpv4,
  type Cidr,
} from '../net/ipv4.ts';
import {
  blockSize6,
  formatCidr6,
  formatIpv6,
  lastAddress6,
  parseCidr6,
  parseIpv6,
  type Cidr6,
} from '../net/ipv6.ts';
import { CiObject } from './json-object.ts';

export interface VxlanBackend {
  readonly type: 'vxlan';
  readonly vni: number;
  readonly port: number;
  /** underlay MTU to derive the device MTU from; undefined = the interface's */
  readonly mtu: number | undefined;
  readonly directRouting: boolean;
  readonly gbp: boolean;
  readonly learning: boolean;
}

export interface HostGwBackend {
  readonly type: 'host-gw';
}

export type BackendConfig = VxlanBackend | HostGwBackend;
export type BackendType = BackendConfig['type'];
export const BACKEND_TYPES: readonly BackendType[] = ['vxlan', 'host-gw'];

/** The IPv6 pod network (flannel's IPv6Network, IPv6SubnetLen, IPv6SubnetMin/Max). */
export interface Ipv6NetConfig {
  readonly network: Cidr6;
  readonly subnetLen: number;
  /** base addresses of the first and last IPv6 subnet that may be leased */
  readonly subnetMin: bigint;
  readonly subnetMax: bigint;
}

/** The IPv4 pod network (flannel's Network, SubnetLen, SubnetMin/Max). */
export interface Ipv4NetConfig {
  readonly network: Cidr;
  readonly subnetLen: number;
  /** base addresses of the first and last subnet that may be leased */
  readonly subnetMin: number;
  readonly subnetMax: number;
}

/** At least one of the two families is set: IPv4 only, dual-stack, or IPv6 only. */
export interface NetConfig {
  /** the IPv4 network unless "EnableIPv4" is false (IPv6 only) */
  readonly ipv4: Ipv4NetConfig | null;
  /** the IPv6 network when "EnableIPv6" is true; null: IPv4 only */
  readonly ipv6: Ipv6NetConfig | null;
  readonly backend: BackendConfig;
  /**
   * "EnableNFTables" (flannel's key, default false): the masquerade and forward rules live in
   * twill's own nftables tables (src/dataplane/nft.ts) instead of iptables chains
   */
  readonly nftables: boolean;
  /** keys that were present but that twill does not know (for a warning) */
  readonly unknownKeys: readonly string[];
}

export const DEFAULT_VNI = 1;
export const DEFAULT_VXLAN_PORT = 8472;

const WHERE = 'net-conf.json';

function invalid(message: string): never {
  throw new TwillError('CONFIG_INVALID', `${WHERE}: ${message}`);
}

function unsupported(message: string): never {
  throw new TwillError('CONFIG_UNSUPPORTED', `${WHERE}: ${message}`);
}

/** Parses the text of net-conf.json. Throws CONFIG_INVALID / CONFIG_UNSUPPORTED. */
export function parseNetConfig(text: string): NetConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    invalid(`not valid JSON (${(err as Error).message})`);
  }
  const obj = CiObject.from(WHERE, raw, 'CONFIG_INVALID');
  const ipv4 = parseIpv4Config(obj);
  const ipv6 = parseIpv6Config(obj);
  if (!ipv4 && !ipv6)
    invalid(
      '"EnableIPv4" is false and "EnableIPv6" is not true: no pod network is left; enable at least one family',
    );
  const backendObj = obj.get('Backend');
  const backend = parseBackend(
    backendObj === undefined
      ? undefined
      : CiObject.from(`${WHERE}: "Backend"`, backendObj, 'CONFIG_INVALID'),
  );
  // a value that is not true or false stops start-up, naming the key and the value (read before
  // the unknown keys are listed)
  const nftables = obj.bool('EnableNFTables') ?? false;
  return {
    ipv4,
    ipv6,
    backend: backend.config,
    nftables,
    unknownKeys: [...obj.unknownKeys(), ...backend.unknown],
  };
}

/**
 * flannel's IPv4 keys: read unless "EnableIPv4" is false (IPv6 only). Set while it is false, they
 * are a mistake rather than something to ignore silently (as the IPv6 keys without EnableIPv6).
 */
function parseIpv4Config(obj: CiObject): Ipv4NetConfig | null {
  if (obj.bool('EnableIPv4') === false) {
    for (const key of ['Network', 'SubnetLen', 'SubnetMin', 'SubnetMax']) {
      if (obj.has(key))
        invalid(
          `"${key}" is set but "EnableIPv4" is false (IPv6 only); remove "${key}", or set "EnableIPv4": true for dual-stack`,
        );
    }
    return null;
  }
  const network = parseNetwork(obj);
  const subnetLen = subnetLenOf({
    len: obj.int('SubnetLen', { min: 0, max: 32 }),
    key: 'SubnetLen',
    netKey: 'Network',
    prefix: network.prefix,
    netText: formatCidr(network),
    bits: 32,
  });
  const subnetMin = parseBound(obj, {
    name: 'SubnetMin',
    network,
    subnetLen,
    fallback: network.base + blockSize(subnetLen),
  });
  const subnetMax = parseBound(obj, {
    name: 'SubnetMax',
    network,
    subnetLen,
    fallback: lastAddress(network) + 1 - blockSize(subnetLen),
  });
  if (subnetMin > subnetMax) {
    invalid(`"SubnetMin" ${formatIpv4(subnetMin)} is above "SubnetMax" ${formatIpv4(subnetMax)}`);
  }
  return { network, subnetLen, subnetMin, subnetMax };
}

/** flannel's IPv6 keys: read only when "EnableIPv6" is true, as flannel does. */
function parseIpv6Config(obj: CiObject): Ipv6NetConfig | null {
  const enabled = obj.bool('EnableIPv6') ?? false;
  for (const key of ['IPv6Network', 'IPv6SubnetLen', 'IPv6SubnetMin', 'IPv6SubnetMax']) {
    if (!enabled && obj.has(key))
      invalid(
        `"${key}" is set but "EnableIPv6" is not true; set "EnableIPv6": true for dual-stack`,
      );
  }
  if (!enabled) return null;
  const text = obj.string('IPv6Network');
  if (text === undefined)
    invalid(
      '"EnableIPv6" is true, so "IPv6Network" is required (an IPv6 CIDR such as "fd00:10:244::/56")',
    );
  const masked = parseCidr6(text, { strict: false });
  if (!masked) {
    invalid(
      `"IPv6Network" must be an IPv6 CIDR such as "fd00:10:244::/56", got ${JSON.stringify(text)}`,
    );
  }
  // any valid spelling (upper case, leading zeros, "0" groups) is the network flannel reads;
  // host bits set are a mistake, as for "Network"
  const network = parseCidr6(text, { strict: true });
  if (!network) {
    invalid(
      `"IPv6Network" ${JSON.stringify(text)} has host bits set; did you mean "${formatCidr6(masked)}"?`,
    );
  }
  if (network.prefix > 124)
    invalid(`"IPv6Network" ${formatCidr6(network)} is too small: it must be /124 or larger`);
  // 0 is unset, as flannel reads it
  const len6 = obj.int('IPv6SubnetLen', { min: 0, max: 128 });
  const subnetLen = subnetLenOf({
    len: len6 === 0 ? undefined : len6,
    key: 'IPv6SubnetLen',
    netKey: 'IPv6Network',
    prefix: network.prefix,
    netText: formatCidr6(network),
    bits: 128,
  });
  const size = blockSize6(subnetLen);
  const subnetMin = parseBound6(obj, 'IPv6SubnetMin', network, subnetLen) ?? network.base + size;
  const subnetMax =
    parseBound6(obj, 'IPv6SubnetMax', network, subnetLen) ?? lastAddress6(network) + 1n - size;
  if (subnetMin > subnetMax) {
    invalid(
      `"IPv6SubnetMin" ${formatIpv6(subnetMin)} is above "IPv6SubnetMax" ${formatIpv6(subnetMax)}`,
    );
  }
  return { network, subnetLen, subnetMin, subnetMax };
}

function parseBound6(
  obj: CiObject,
  name: string,
  network: Cidr6,
  subnetLen: number,
): bigint | undefined {
  const text = obj.string(name);
  if (text === undefined) return undefined;
  const addr = parseIpv6(text);
  if (addr === undefined)
    invalid(
      `"${name}" must be an IPv6 address such as "fd00:10:244:1::", got ${JSON.stringify(text)}`,
    );
  // any valid spelling; named canonically from here on
  const shown = formatIpv6(addr);
  if (addr < network.base || addr > lastAddress6(network))
    invalid(`"${name}" ${shown} is not inside "IPv6Network" ${formatCidr6(network)}`);
  if ((addr - network.base) % blockSize6(subnetLen) !== 0n)
    invalid(`"${name}" ${shown} is not the start of a /${subnetLen} subnet ("IPv6SubnetLen")`);
  return addr;
}

function parseNetwork(obj: CiObject): Cidr {
  const text = obj.string('Network');
  if (text === undefined) invalid('"Network" is required (an IPv4 CIDR such as "10.244.0.0/16")');
  const network = parseCidr(text, { strict: false });
  if (!network)
    invalid(`"Network" must be an IPv4 CIDR such as "10.244.0.0/16", got ${JSON.stringify(text)}`);
  if (formatCidr(network) !== text) {
    invalid(
      `"Network" ${JSON.stringify(text)} has host bits set; did you mean "${formatCidr(network)}"?`,
    );
  }
  if (network.prefix > 28) invalid(`"Network" ${text} is too small: it must be /28 or larger`);
  return network;
}

/**
 * SubnetLen or IPv6SubnetLen: unset, a /24 (IPv6: /64) when the network has room for four of
 * them, else four subnets' worth; at most 2 bits short of an address (room for a gateway and a
 * pod), at least the network's prefix + 2.
 */
function subnetLenOf(o: {
  len: number | undefined;
  key: string;
  netKey: string;
  prefix: number;
  netText: string;
  bits: 32 | 128;
}): number {
  const usual = o.bits === 32 ? 24 : 64;
  if (o.len === undefined) return o.prefix <= usual - 2 ? usual : o.prefix + 2;
  if (o.len > o.bits - 2) invalid(`"${o.key}" is ${o.len}; it must be ${o.bits - 2} or less`);
  if (o.len < o.prefix + 2) {
    invalid(
      `"${o.key}" is ${o.len}; with "${o.netKey}" ${o.netText} it must be at least ${o.prefix + 2} (room for four subnets)`,
    );
  }
  return o.len;
}

function parseBound(
  obj: CiObject,
  o: { name: string; network: Cidr; subnetLen: number; fallback: number },
): number {
  const text = obj.string(o.name);
  if (text === undefined) return o.fallback;
  const addr = parseIpv4(text);
  if (addr === undefined)
    invalid(
      `"${o.name}" must be an IPv4 address such as "10.244.1.0", got ${JSON.stringify(text)}`,
    );
  if (addr < o.network.base || addr > lastAddress(o.network)) {
    invalid(`"${o.name}" ${text} is not inside "Network" ${formatCidr(o.network)}`);
  }
  if ((addr - o.network.base) % blockSize(o.subnetLen) !== 0) {
    invalid(`"${o.name}" ${text} is not the start of a /${o.subnetLen} subnet ("SubnetLen")`);
  }
  return addr;
}

function parseBackend(obj: CiObject | undefined): { config: BackendConfig; unknown: string[] } {
  const type = obj?.string('Type') ?? 'vxlan';
  if (type === 'host-gw')
    return {
      config: { type: 'host-gw' },
      unknown: (obj?.unknownKeys() ?? []).map((k) => `Backend.${k}`),
    };
  if (type !== 'vxlan') {
    unsupported(
      `"Backend"."Type" ${JSON.stringify(type)} is not supported; use "vxlan" or "host-gw"`,
    );
  }
  const config: VxlanBackend = {
    type: 'vxlan',
    vni: obj?.int('VNI', { min: 0, max: 16_777_215 }) ?? DEFAULT_VNI,
    port: obj?.int('Port', { min: 1, max: 65_535 }) ?? DEFAULT_VXLAN_PORT,
    mtu: obj?.int('MTU', { min: 118, max: 65_535 }),
    directRouting: obj?.bool('DirectRouting') ?? false,
    gbp: obj?.bool('GBP') ?? false,
    learning: obj?.bool('Learning') ?? false,
  };
  return { config, unknown: (obj?.unknownKeys() ?? []).map((k) => `Backend.${k}`) };
}
