// The cluster's network as the lab and the tests build it in namespaces: a
// router namespace holding the underlay bridge br0 (10.123.0.254/24, every
// host's default gateway) with forwarding on, and a veth to an "outside"
// namespace (203.0.113.2, which knows no pod routes: only masquerade lets
// pods reach it). Each host (etcd at 10.123.0.1, node k at 10.123.0.(10+k))
// is a namespace whose eth0 is a port of br0. Namespaces are made by the
// caller (a NetnsLab, with its own prefix); this wires them. A dual-stack
// underlay adds fd00:123::/64 beside it (router fd00:123::fe, node k at
// fd00:123::<10+k>, its IPv4 address's last number) and the outside host at
// 2001:db8:113::2, every address without duplicate address detection so that
// it is usable at once. An IPv6-only lab wires the same two families: its
// twill and pods use IPv6 alone, the IPv4 half carries only the lab's own
// plumbing (see netns-cluster.ts).
import { run } from '../../src/exec/runner.ts';
import { addVeth, nsRun, vethPair } from './netns.ts';

/** the router's address on the underlay: every host's default gateway */
const UNDERLAY_GATEWAY = '10.123.0.254';
/** where etcd (and in kube mode the kube-apiserver) listens */
export const ETCD_IP = '10.123.0.1';
/** the address every pod must reach outside the cluster */
export const OUTSIDE_IP = '203.0.113.2';
const OUTSIDE_GATEWAY = '203.0.113.1';
/** IPv6 (dual-stack underlay): the router's address, every host's default gateway */
const UNDERLAY_GATEWAY6 = 'fd00:123::fe';
/** IPv6: where etcd listens on a dual-stack underlay */
export const ETCD_IP6 = 'fd00:123::1';
/** IPv6: the outside address every pod must reach on a dual-stack lab */
export const OUTSIDE_IP6 = '2001:db8:113::2';
const OUTSIDE_GATEWAY6 = '2001:db8:113::1';

/** Node k's underlay address (its PublicIP). */
export function nodeIp(k: number): string {
  return `10.123.0.${10 + k}`;
}

/** Node k's IPv6 underlay address on a dual-stack underlay (its PublicIPv6). */
export function nodeIp6(k: number): string {
  return `fd00:123::${10 + k}`;
}

const ip = (args: string[]): Promise<unknown> => run('ip', args, { timeoutMs: 20_000 });

/**
 * Wires router namespace `rt` (br0, forwarding) and the outside namespace `out` beyond it; with
 * `ipv6`, IPv6 on both too.
 */
export async function buildRouter(
  rt: string,
  out: string,
  o: { ipv6?: boolean } = {},
): Promise<void> {
  // a fixed MAC: a bridge otherwise takes its lowest port MAC, which changes as hosts come and go,
  // and every host's cached ARP entry for the gateway then points nowhere for half a minute
  await ip(['-n', rt, 'link', 'add', 'br0', 'address', '02:00:7e:00:00:fe', 'type', 'bridge']);
  await ip(['-n', rt, 'addr', 'add', `${UNDERLAY_GATEWAY}/24`, 'dev', 'br0']);
  await ip(['-n', rt, 'link', 'set', 'br0', 'up']);
  await nsRun(rt, ['sysctl', '-qw', 'net.ipv4.ip_forward=1'], { timeoutMs: 20_000 });
  await vethPair(
    { ns: rt, dev: 'out0', cidr: `${OUTSIDE_GATEWAY}/24` },
    { ns: out, dev: 'eth0', cidr: `${OUTSIDE_IP}/24` },
  );
  await ip(['-n', out, 'route', 'add', 'default', 'via', OUTSIDE_GATEWAY]);
  if (o.ipv6 !== true) return;
  await nsRun(rt, ['sysctl', '-qw', 'net.ipv6.conf.all.forwarding=1'], { timeoutMs: 20_000 });
  await ip(['-n', rt, 'addr', 'add', `${UNDERLAY_GATEWAY6}/64`, 'dev', 'br0', 'nodad']);
  await ip(['-n', rt, 'addr', 'add', `${OUTSIDE_GATEWAY6}/64`, 'dev', 'out0', 'nodad']);
  await ip(['-n', out, 'addr', 'add', `${OUTSIDE_IP6}/64`, 'dev', 'eth0', 'nodad']);
  await ip(['-n', out, '-6', 'route', 'add', 'default', 'via', OUTSIDE_GATEWAY6]);
}

/** The router's end of host `short`'s link (an interface name: at most 15 characters). */
function routerPort(short: string): string {
  return `u-${short}`;
}

/**
 * Puts namespace `ns` on the underlay as host `short`: its eth0 a port of the router's br0, at
 * `address`/24, default route via the router.
 */
export async function attachHost(o: {
  rt: string;
  ns: string;
  short: string;
  address: string;
  /** dual-stack underlay: the host's IPv6 address (/64, default route via the router) */
  address6?: string;
}): Promise<void> {
  const port = routerPort(o.short);
  await addVeth({ ns: o.rt, dev: port, peerNs: o.ns, peerDev: 'eth0' });
  await ip(['-n', o.rt, 'link', 'set', port, 'master', 'br0', 'up']);
  await ip(['-n', o.ns, 'addr', 'add', `${o.address}/24`, 'dev', 'eth0']);
  await ip(['-n', o.ns, 'link', 'set', 'eth0', 'up']);
  await ip(['-n', o.ns, 'route', 'add', 'default', 'via', UNDERLAY_GATEWAY]);
  if (o.address6 === undefined) return;
  await ip(['-n', o.ns, 'addr', 'add', `${o.address6}/64`, 'dev', 'eth0', 'nodad']);
  await ip(['-n', o.ns, '-6', 'route', 'add', 'default', 'via', UNDERLAY_GATEWAY6]);
}

/** Removes host `short`'s port from the router (not its namespace); one gone is no error. */
export async function detachHost(rt: string, short: string): Promise<void> {
  await ip(['-n', rt, 'link', 'del', routerPort(short)]).catch(() => undefined);
}
