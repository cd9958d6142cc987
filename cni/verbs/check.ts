// CHECK: the pod's interface is there and up with its MTU, address and
// routes; the IP store holds the address for this container id + ifname;
// and the previous result names that same address. On a dual-stack node
// the same for the IPv6 address and routes. Any difference fails with code
// 105 and a message listing them all.
import { formatCidr, formatIpv4, parseIpv4 } from '../../src/net/ipv4.ts';
import { formatCidr6, formatIpv6 } from '../../src/net/ipv6.ts';
import { CNI_CODES, fail } from '../errors.ts';
import { podCheckBatch } from '../ip-batch.ts';
import { poolOf, poolOf6 } from '../ipam/pool.ts';
import { isNoDevice } from '../../src/exec/runner.ts';
import { podBatch } from '../kernel.ts';
import { checkProblems } from '../check-problems.ts';
import { prevAddresses } from '../result.ts';
import { assertNetns, loadSubnet, storeFor, type PluginDeps, type Request } from './common.ts';

async function observe(
  deps: PluginDeps,
  req: Request,
  dualStack: boolean,
): Promise<{
  addrs: unknown[] | undefined;
  routes: unknown[] | undefined;
  allRoutes: unknown[] | undefined;
}> {
  const { env } = req;
  try {
    const [addrs, routes, allRoutes] = await podBatch(
      deps,
      env.netns,
      podCheckBatch(env.ifname, dualStack),
    );
    return { addrs, routes, allRoutes };
  } catch (err) {
    if (isNoDevice(err))
      fail(CNI_CODES.checkFailed, `CHECK: interface ${env.ifname} does not exist in ${env.netns}`);
    throw err;
  }
}

export async function cmdCheck(deps: PluginDeps, req: Request): Promise<void> {
  const { env, conf } = req;
  if (conf.prevResult === undefined)
    fail(CNI_CODES.invalidConfig, 'network config: CHECK needs "prevResult" (the ADD result)');
  const subnet = await loadSubnet(conf.subnetFile);
  await assertNetns(env.netns);
  const store = storeFor(conf, deps.log);
  const found = await store.find(env.containerId, env.ifname);
  const [ip, ...extra] = found.filter((a) => parseIpv4(a) !== undefined);
  const [ip6, ...extra6] = found.filter((a) => parseIpv4(a) === undefined);
  if (ip === undefined)
    fail(
      CNI_CODES.checkFailed,
      `CHECK: no address is reserved in ${store.dir} for container ${env.containerId} ifname ${env.ifname}`,
    );
  const address = `${ip}/${subnet.subnet.prefix}`;
  const problems =
    extra.length > 0
      ? [`the store holds more than one address for it: ${[ip, ...extra].join(', ')}`]
      : [];
  const prev = prevAddresses(conf.prevResult, env.ifname) ?? [];
  if (!prev.includes(address))
    problems.push(
      `prevResult gives ${env.ifname} [${prev.join(', ')}], the store holds ${address}`,
    );
  const { subnet6, network6 } = subnet;
  let v6: { address: string; gateway: string; network: string } | undefined;
  if (subnet6 && network6) {
    if (ip6 === undefined) problems.push('the store holds no IPv6 address for it');
    else if (extra6.length > 0)
      problems.push(
        `the store holds more than one IPv6 address for it: ${[ip6, ...extra6].join(', ')}`,
      );
    const address6 = ip6 === undefined ? undefined : `${ip6}/${subnet6.prefix}`;
    if (address6 !== undefined && !prev.includes(address6))
      problems.push(
        `prevResult gives ${env.ifname} [${prev.join(', ')}], the store holds ${address6}`,
      );
    if (address6 !== undefined)
      v6 = {
        address: address6,
        gateway: formatIpv6(poolOf6(subnet6).gateway),
        network: formatCidr6(network6),
      };
  } else if (ip6 !== undefined) {
    problems.push(
      `the store holds IPv6 address ${[ip6, ...extra6].join(', ')} for it, but ${conf.subnetFile} gives the node no IPv6 subnet`,
    );
  }
  const expected = {
    ifname: env.ifname,
    address,
    mtu: conf.mtu ?? subnet.mtu,
    gateway: formatIpv4(poolOf(subnet.subnet).gateway),
    network: formatCidr(subnet.network),
    defaultRoute: conf.isDefaultGateway,
    ...(v6 ? { v6 } : {}),
  };
  problems.push(...checkProblems(expected, await observe(deps, req, subnet6 != null)));
  if (problems.length > 0)
    fail(
      CNI_CODES.checkFailed,
      `CHECK of ${env.ifname} in ${env.netns} failed: ${problems.join('; ')}`,
    );
}
