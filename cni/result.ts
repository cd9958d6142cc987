// ADD results in the shape each spec version asks for (0.3.x and 0.4.0 carry
// `version: "4"` or `"6"` on every IP, 1.1.0 adds interface MTUs; a
// dual-stack pod's IPv6 address follows its IPv4 one, an IPv6-only pod's is
// the only one), and the reading of
// a previous result (CHECK, chained plugins) whatever its version.
import { atLeast, type CniVersion } from './version.ts';

export interface ResultInterface {
  readonly name: string;
  readonly mac: string;
  readonly mtu: number;
  readonly sandbox?: string;
}

export interface Attachment {
  readonly bridge: ResultInterface;
  readonly host: ResultInterface;
  readonly pod: ResultInterface;
  /** the pod's IPv4 address ("10.244.3.5/24") and gateway; not on an IPv6-only node */
  readonly ip4?: ResultIp | undefined;
  /** dual-stack, IPv6 only: the pod's IPv6 address ("fd00:0:0:3::2/64") and gateway */
  readonly ip6?: ResultIp | undefined;
  readonly routes: readonly { readonly dst: string; readonly gw: string }[];
}

export interface ResultIp {
  readonly address: string;
  readonly gateway: string;
}

function iface(v: CniVersion, i: ResultInterface): Record<string, unknown> {
  return {
    name: i.name,
    mac: i.mac,
    ...(atLeast(v, '1.1.0') ? { mtu: i.mtu } : {}),
    ...(i.sandbox !== undefined ? { sandbox: i.sandbox } : {}),
  };
}

/** The ADD result for `version`; the pod interface is index 2, as the bridge plugin has it. */
export function renderResult(version: CniVersion, a: Attachment): Record<string, unknown> {
  const ip = (family: '4' | '6', { address, gateway }: ResultIp) => ({
    ...(atLeast(version, '1.0.0') ? {} : { version: family }),
    interface: 2,
    address,
    gateway,
  });
  return {
    cniVersion: version,
    interfaces: [a.bridge, a.host, a.pod].map((i) => iface(version, i)),
    ips: [...(a.ip4 ? [ip('4', a.ip4)] : []), ...(a.ip6 ? [ip('6', a.ip6)] : [])],
    routes: a.routes.map((r) => ({ dst: r.dst, gw: r.gw })),
    dns: {},
  };
}

/**
 * The addresses ("a.b.c.d/len") a previous result gives the pod's `ifname`, whatever its version.
 */
export function prevAddresses(prev: unknown, ifname: string): string[] | undefined {
  if (typeof prev !== 'object' || prev === null) return undefined;
  const { interfaces, ips } = prev as { interfaces?: unknown; ips?: unknown };
  if (!Array.isArray(ips)) return undefined;
  const names = Array.isArray(interfaces)
    ? interfaces.map((i) => (i as { name?: unknown } | null)?.name)
    : [];
  return ips
    .map((ip) => ip as { address?: unknown; interface?: unknown } | null)
    .filter(
      (ip) =>
        typeof ip?.address === 'string' &&
        (typeof ip.interface !== 'number' || names[ip.interface] === ifname),
    )
    .map((ip) => String(ip?.address));
}
