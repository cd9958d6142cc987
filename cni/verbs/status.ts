// STATUS (CNI 1.1): ready (no output) only when an ADD could succeed now;
// code 50 ("not available") otherwise, with the reason:
// - subnet.env exists and parses, and FLANNEL_SUBNET lies inside
//   FLANNEL_NETWORK (and FLANNEL_IPV6_SUBNET inside FLANNEL_IPV6_NETWORK on a
//   dual-stack node; on an IPv6-only node only the IPv6 pair is there);
// - subnet.env is current: it agrees with the node. The plugin cannot see
//   when the daemon started, so "current" is what it can check on the
//   node: the bridge, when it exists, carries no address of the cluster
//   network other than the gateway subnet.env gives (the subnet's first
//   host, with its prefix). Another one means subnet.env or the bridge is
//   from an older lease, and new pods would get addresses the node no longer
//   routes (or that the bridge does not serve). On a dual-stack node the
//   same holds for the IPv6 network and gateway. A bridge without the IPv6
//   gateway yet (made before the node was dual-stack) is no reason: the next
//   ADD puts it there. An IPv6-only node looks at IPv6 addresses only, as an
//   IPv4-only one looks at IPv4 addresses only;
// - the bridge exists and is a bridge, or one can be created: a bridge of a
//   throwaway name is created and deleted in one `ip` batch (this needs
//   CAP_NET_ADMIN in the netns and the bridge module);
// - when `readyUrl` is configured, the daemon answers it with a 2xx.
import { randomBytes } from 'node:crypto';
import {
  containsAddr,
  containsCidr,
  formatCidr,
  formatIpv4,
  parseIpv4,
  type Cidr,
} from '../../src/net/ipv4.ts';
import {
  containsAddr6,
  containsCidr6,
  formatCidr6,
  formatIpv6,
  parseIpv6,
} from '../../src/net/ipv6.ts';
import { subnetFamilies, type SubnetEnv, type SubnetPair } from '../../src/subnetenv.ts';
import { CNI_CODES, asCniError, fail } from '../errors.ts';
import { poolOf, poolOf6 } from '../ipam/pool.ts';
import { linkAddrs, probeBridge } from '../kernel.ts';
import { loadSubnet, type PluginDeps, type Request } from './common.ts';

const READY_TIMEOUT_MS = 2000;

function notReady(why: string): never {
  fail(CNI_CODES.notAvailable, `twill is not ready: ${why}`);
}

async function daemonReady(url: string, signal: AbortSignal): Promise<string | undefined> {
  try {
    const res = await fetch(url, {
      signal: AbortSignal.any([signal, AbortSignal.timeout(READY_TIMEOUT_MS)]),
    });
    return res.ok ? undefined : `${url} answered ${res.status}`;
  } catch (err) {
    return `${url} did not answer: ${(err as Error).message}`;
  }
}

async function subnetOf(file: string): Promise<SubnetEnv> {
  let env: SubnetEnv;
  try {
    env = await loadSubnet(file);
  } catch (err) {
    notReady(asCniError(err).message);
  }
  const { v4, v6 } = subnetFamilies(env);
  if (v4 && !containsCidr(v4.network, v4.subnet))
    notReady(
      `${file}: FLANNEL_SUBNET ${formatCidr(v4.subnet)} is not inside FLANNEL_NETWORK ${formatCidr(v4.network)}`,
    );
  if (v6 && !containsCidr6(v6.network, v6.subnet))
    notReady(
      `${file}: FLANNEL_IPV6_SUBNET ${formatCidr6(v6.subnet)} is not inside FLANNEL_IPV6_NETWORK ${formatCidr6(v6.network)}`,
    );
  return env;
}

/**
 * The bridge as it is, or a throwaway one created and deleted; the reason it is not usable, if any.
 */
async function bridgeProblem(
  deps: PluginDeps,
  bridge: string,
  env: SubnetEnv,
  file: string,
): Promise<string | undefined> {
  let link;
  try {
    link = await linkAddrs(deps, bridge);
  } catch (err) {
    return `cannot look at bridge ${bridge}: ${asCniError(err).message}`;
  }
  if (link === undefined) {
    const probe = `twp${randomBytes(4).toString('hex')}`;
    try {
      await probeBridge(deps, probe);
      return undefined;
    } catch (err) {
      return `bridge ${bridge} does not exist and cannot be created (trying with ${probe}): ${asCniError(err).message}`;
    }
  }
  if (link.kind !== 'bridge')
    return `"bridge" ${JSON.stringify(bridge)} already exists but is not a bridge (it is a ${link.kind ?? link.linkType ?? 'plain'} device)`;
  const { v4 } = subnetFamilies(env);
  return (
    (v4 ? foreign4Problem(link.inet, v4, bridge, file) : undefined) ??
    foreign6Problem(link.inet6, env, bridge, file)
  );
}

/** The IPv4 side of "current": no address of the network on the bridge but the gateway. */
function foreign4Problem(
  inet: readonly { local: string; prefixlen: number }[],
  v4: SubnetPair<Cidr>,
  bridge: string,
  file: string,
): string | undefined {
  const gw = poolOf(v4.subnet).gateway;
  const foreign = inet.filter((a) => {
    const addr = parseIpv4(a.local);
    return (
      addr !== undefined &&
      containsAddr(v4.network, addr) &&
      !(addr === gw && a.prefixlen === v4.subnet.prefix)
    );
  });
  if (foreign.length === 0) return undefined;
  const list = foreign.map((a) => `${a.local}/${a.prefixlen}`).join(', ');
  return `${file} is not current: it gives the node the subnet ${formatCidr(v4.subnet)} (gateway ${formatIpv4(gw)}/${v4.subnet.prefix}), but ${bridge} carries ${list} from the cluster network ${formatCidr(v4.network)}: ${OLDER_LEASE(bridge)}`;
}

const OLDER_LEASE = (bridge: string): string =>
  `subnet.env or ${bridge} is from an older lease (restart twill run, which rewrites subnet.env; remove the old address with ip addr del <address> dev ${bridge})`;

/** The IPv6 side of "current": no address of the IPv6 network on the bridge but the gateway. */
function foreign6Problem(
  inet6: readonly { local: string; prefixlen: number }[],
  env: SubnetEnv,
  bridge: string,
  file: string,
): string | undefined {
  const { network6, subnet6 } = env;
  if (!network6 || !subnet6) return undefined;
  const gw6 = poolOf6(subnet6).gateway;
  const foreign = inet6.filter((a) => {
    const addr = parseIpv6(a.local);
    return (
      addr !== undefined &&
      containsAddr6(network6, addr) &&
      !(addr === gw6 && a.prefixlen === subnet6.prefix)
    );
  });
  if (foreign.length === 0) return undefined;
  const list = foreign.map((a) => `${a.local}/${a.prefixlen}`).join(', ');
  return `${file} is not current: it gives the node the IPv6 subnet ${formatCidr6(subnet6)} (gateway ${formatIpv6(gw6)}/${subnet6.prefix}), but ${bridge} carries ${list} from the IPv6 cluster network ${formatCidr6(network6)}: ${OLDER_LEASE(bridge)}`;
}

export async function cmdStatus(deps: PluginDeps, req: Request): Promise<void> {
  const { conf } = req;
  const env = await subnetOf(conf.subnetFile);
  const problem = await bridgeProblem(deps, conf.bridge, env, conf.subnetFile);
  if (problem !== undefined) notReady(problem);
  if (conf.readyUrl === undefined) return;
  const unready = await daemonReady(conf.readyUrl, deps.signal);
  if (unready) notReady(unready);
}
