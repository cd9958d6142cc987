// CHECK: the pod's interface is there and up with its MTU, address and
// routes; the IP store holds the address for this container id + ifname;
// and the previous result names that same address. Any difference fails
// with code 105 and a message listing them all.
import { formatCidr, formatIpv4 } from '../../src/net/ipv4.ts';
import { CNI_CODES, fail } from '../errors.ts';
import { podCheckBatch } from '../ip-batch.ts';
import { poolOf } from '../ipam/pool.ts';
import { isNoDevice } from '../../src/exec/runner.ts';
import { podBatch } from '../kernel.ts';
import { checkProblems } from '../check-problems.ts';
import { prevAddresses } from '../result.ts';
import { assertNetns, loadSubnet, storeFor, type PluginDeps, type Request } from './common.ts';

async function observe(
  deps: PluginDeps,
  req: Request,
): Promise<{ addrs: unknown[] | undefined; routes: unknown[] | undefined }> {
  const { env } = req;
  try {
    const [addrs, routes] = await podBatch(deps, env.netns, podCheckBatch(env.ifname));
    return { addrs, routes };
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
  const [ip, ...extra] = await store.find(env.containerId, env.ifname);
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
  const expected = {
    ifname: env.ifname,
    address,
    mtu: conf.mtu ?? subnet.mtu,
    gateway: formatIpv4(poolOf(subnet.subnet).gateway),
    network: formatCidr(subnet.network),
    defaultRoute: conf.isDefaultGateway,
  };
  problems.push(...checkProblems(expected, await observe(deps, req)));
  if (problems.length > 0)
    fail(
      CNI_CODES.checkFailed,
      `CHECK of ${env.ifname} in ${env.netns} failed: ${problems.join('; ')}`,
    );
}
