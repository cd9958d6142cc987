// CHECK: the pod's interface is there and up with its MTU, address and
// routes; the IP store holds the address for this container id + ifname;
// and the previous result names that same address. On a dual-stack node
// the same for the IPv6 address and routes; on an IPv6-only node for those
// alone. Any difference fails with code 105 and a message listing them all.
import { formatCidr, formatIpv4, parseIpv4 } from '../../src/net/ipv4.ts';
import { formatCidr6, formatIpv6 } from '../../src/net/ipv6.ts';
import { subnetFamilies } from '../../src/subnetenv.ts';
import { CNI_CODES, fail } from '../errors.ts';
import { podCheckBatch } from '../ip-batch.ts';
import { poolOf, poolOf6 } from '../ipam/pool.ts';
import { isNoDevice } from '../../src/exec/runner.ts';
import { podBatch } from '../kernel.ts';
import { checkProblems, type ExpectedFamily } from '../check-problems.ts';
import { prevAddresses } from '../result.ts';
import { assertNetns, loadSubnet, storeFor, type PluginDeps, type Request } from './common.ts';

async function observe(
  deps: PluginDeps,
  req: Request,
  families: { ipv4: boolean; ipv6: boolean },
): Promise<{
  addrs: unknown[] | undefined;
  routes: unknown[] | undefined;
  allRoutes: unknown[] | undefined;
}> {
  const { env } = req;
  try {
    const [addrs, ...rest] = await podBatch(deps, env.netns, podCheckBatch(env.ifname, families));
    const routes = families.ipv4 ? rest.shift() : undefined;
    const allRoutes = families.ipv6 ? rest.shift() : undefined;
    return { addrs, routes, allRoutes };
  } catch (err) {
    if (isNoDevice(err))
      fail(CNI_CODES.checkFailed, `CHECK: interface ${env.ifname} does not exist in ${env.netns}`);
    throw err;
  }
}

/**
 * One family's side of CHECK: the store holds exactly one address of it for the attachment, and
 * the previous result names it. Returns what CHECK then expects of the pod, if anything.
 */
function familyExpected(
  o: {
    what: '' | 'IPv6 ';
    found: readonly string[];
    prefix: number;
    prev: readonly string[];
    ifname: string;
    gateway: string;
    network: string;
  },
  problems: string[],
): ExpectedFamily | undefined {
  const [ip, ...extra] = o.found;
  if (ip === undefined) {
    problems.push(`the store holds no ${o.what}address for it`);
    return undefined;
  }
  if (extra.length > 0)
    problems.push(`the store holds more than one ${o.what}address for it: ${o.found.join(', ')}`);
  const address = `${ip}/${o.prefix}`;
  if (!o.prev.includes(address))
    problems.push(
      `prevResult gives ${o.ifname} [${o.prev.join(', ')}], the store holds ${address}`,
    );
  return { address, gateway: o.gateway, network: o.network };
}

export async function cmdCheck(deps: PluginDeps, req: Request): Promise<void> {
  const { env, conf } = req;
  if (conf.prevResult === undefined)
    fail(CNI_CODES.invalidConfig, 'network config: CHECK needs "prevResult" (the ADD result)');
  const subnet = await loadSubnet(conf.subnetFile);
  const fam = subnetFamilies(subnet);
  await assertNetns(env.netns);
  const store = storeFor(conf, deps.log);
  const found = await store.find(env.containerId, env.ifname);
  const found4 = found.filter((a) => parseIpv4(a) !== undefined);
  const found6 = found.filter((a) => parseIpv4(a) === undefined);
  // the node's first family (IPv4, or IPv6 on an IPv6-only node) decides whether there is an
  // attachment to check at all
  if ((fam.v4 ? found4 : found6).length === 0)
    fail(
      CNI_CODES.checkFailed,
      `CHECK: no address is reserved in ${store.dir} for container ${env.containerId} ifname ${env.ifname}`,
    );
  const prev = prevAddresses(conf.prevResult, env.ifname) ?? [];
  const problems: string[] = [];
  const common = { prev, ifname: env.ifname };
  const v4 = fam.v4
    ? familyExpected(
        {
          ...common,
          what: '',
          found: found4,
          prefix: fam.v4.subnet.prefix,
          gateway: formatIpv4(poolOf(fam.v4.subnet).gateway),
          network: formatCidr(fam.v4.network),
        },
        problems,
      )
    : undefined;
  if (!fam.v4 && found4.length > 0)
    problems.push(
      `the store holds IPv4 address ${found4.join(', ')} for it, but ${conf.subnetFile} gives the node no IPv4 subnet`,
    );
  const v6 = fam.v6
    ? familyExpected(
        {
          ...common,
          what: 'IPv6 ',
          found: found6,
          prefix: fam.v6.subnet.prefix,
          gateway: formatIpv6(poolOf6(fam.v6.subnet).gateway),
          network: formatCidr6(fam.v6.network),
        },
        problems,
      )
    : undefined;
  if (!fam.v6 && found6.length > 0)
    problems.push(
      `the store holds IPv6 address ${found6.join(', ')} for it, but ${conf.subnetFile} gives the node no IPv6 subnet`,
    );
  const expected = {
    ifname: env.ifname,
    mtu: conf.mtu ?? subnet.mtu,
    defaultRoute: conf.isDefaultGateway,
    v4,
    v6,
  };
  const families = { ipv4: fam.v4 !== undefined, ipv6: fam.v6 !== undefined };
  problems.push(...checkProblems(expected, await observe(deps, req, families)));
  if (problems.length > 0)
    fail(
      CNI_CODES.checkFailed,
      `CHECK of ${env.ifname} in ${env.netns} failed: ${problems.join('; ')}`,
    );
}
