// ADD: reserve an address, wire the host side (bridge, veth pair with the
// peer made straight in the pod's netns, bridge port with hairpin) in one
// `ip` batch and the pod side (lo, address, routes) in one more, and answer
// the result. Whatever fails after the reservation rolls back what this call
// created, and only that.
import { formatCidr, formatIpv4 } from '../../src/net/ipv4.ts';
import type { SubnetEnv } from '../../src/subnetenv.ts';
import { CommandError } from '../../src/exec/runner.ts';
import { CNI_CODES, CniError } from '../errors.ts';
import { bridgeMac, failedLine, hostAddBatch, linkOf, podAddBatch, type HostWiring, type IpLink } from '../ip-batch.ts';
import { poolOf } from '../ipam/pool.ts';
import { deleteLink, enableForwarding, hostBatch, podBatch, type KernelDeps } from '../kernel.ts';
import { hostVethName } from '../names.ts';
import { renderResult, type Attachment, type ResultInterface } from '../result.ts';
import { assertNetns, loadSubnet, storeFor, type PluginDeps, type Request } from './common.ts';

type HostLinks = { bridge: ResultInterface; host: ResultInterface };

/** A host batch failure, and whether the veth pair exists because of it. */
class HostWiringError extends Error {
  readonly vethCreated: boolean;
  constructor(cause: unknown, vethCreated: boolean) {
    super('host wiring failed', { cause });
    this.vethCreated = vethCreated;
  }
}

function asInterface(link: IpLink): ResultInterface {
  return { name: link.ifname, mac: link.address, mtu: link.mtu };
}

function stderrOf(err: unknown): string {
  return err instanceof CommandError ? err.stderr : '';
}

async function tryHost(k: KernelDeps, w: HostWiring, createBridge: boolean): Promise<HostLinks> {
  const { lines, vethLine } = hostAddBatch(w, createBridge);
  try {
    const [bridge, host] = await hostBatch(k, lines);
    return { bridge: asInterface(linkOf(bridge, w.bridge)), host: asInterface(linkOf(host, w.hostVeth)) };
  } catch (err) {
    const line = failedLine(stderrOf(err));
    throw new HostWiringError(err, line === undefined || line > vethLine);
  }
}

/** The host batch; creates the bridge when it is missing (once, tolerating a concurrent creator). */
async function wireHost(k: KernelDeps, w: HostWiring): Promise<HostLinks> {
  const firstLineFailed = (err: unknown, pattern: RegExp): boolean => {
    const cause = err instanceof HostWiringError ? err.cause : err;
    return failedLine(stderrOf(cause)) === 1 && pattern.test(stderrOf(cause));
  };
  try {
    return await tryHost(k, w, false);
  } catch (err) {
    if (!firstLineFailed(err, /Cannot find device/)) throw err;
  }
  try {
    return await tryHost(k, w, true);
  } catch (err) {
    if (!firstLineFailed(err, /File exists/)) throw err;
  }
  return tryHost(k, w, false);
}

function hostWiring(req: Request, subnet: SubnetEnv, mtu: number): HostWiring {
  const { env, conf } = req;
  const gw = poolOf(subnet.subnet).gateway;
  const gateway = conf.isGateway ? { addr: gw, prefix: subnet.subnet.prefix } : undefined;
  return { bridge: conf.bridge, bridgeMac: bridgeMac(gw), hostVeth: hostVethName(env.containerId, env.ifname), ifname: env.ifname, netns: env.netns, mtu, gateway, hairpin: conf.hairpinMode };
}

/** Turns a kernel failure into the answer a runtime should see. */
function explain(err: unknown, w: HostWiring): unknown {
  const cause = err instanceof HostWiringError ? err.cause : err;
  if (err instanceof HostWiringError && !err.vethCreated && /File exists/.test(stderrOf(cause))) {
    return new CniError({
      cniCode: CNI_CODES.exists,
      message: `cannot create veth ${w.hostVeth} with peer ${w.ifname} in ${w.netns}: an interface of that name already exists (${w.ifname} in the pod, or ${w.hostVeth} on the host for this container id and ifname)`,
      cause,
    });
  }
  return cause;
}

async function wire(deps: PluginDeps, req: Request, o: { subnet: SubnetEnv; addr: number; mtu: number }): Promise<Attachment> {
  const { env, conf } = req;
  const w = hostWiring(req, o.subnet, o.mtu);
  const links = await wireHost(deps, w);
  const gateway = poolOf(o.subnet.subnet).gateway;
  const pod = { ifname: env.ifname, address: o.addr, subnet: o.subnet.subnet, gateway, network: o.subnet.network, defaultRoute: conf.isDefaultGateway };
  const [podLink] = await podBatch(deps, env.netns, podAddBatch(pod));
  if (conf.isGateway) await enableForwarding();
  const gw = formatIpv4(gateway);
  const routes = [{ dst: formatCidr(o.subnet.network), gw }, ...(conf.isDefaultGateway ? [{ dst: '0.0.0.0/0', gw }] : [])];
  return {
    ...links,
    pod: { ...asInterface(linkOf(podLink, env.ifname)), sandbox: env.netns },
    address: `${formatIpv4(o.addr)}/${o.subnet.subnet.prefix}`,
    gateway: gw,
    routes,
  };
}

export async function cmdAdd(deps: PluginDeps, req: Request): Promise<Record<string, unknown>> {
  const { env, conf } = req;
  const subnet = await loadSubnet(conf.subnetFile);
  await assertNetns(env.netns);
  const store = storeFor(conf);
  const addr = await store.reserve({ pool: poolOf(subnet.subnet), containerId: env.containerId, ifname: env.ifname });
  const mtu = conf.mtu ?? subnet.mtu;
  try {
    return renderResult(conf.cniVersion, await wire(deps, req, { subnet, addr, mtu }));
  } catch (err) {
    const w = hostWiring(req, subnet, mtu);
    if (!(err instanceof HostWiringError) || err.vethCreated) await deleteLink(deps, w.hostVeth).catch((e: unknown) => deps.log.error('rollback: cannot delete veth', { dev: w.hostVeth, err: String(e) }));
    await store.release(formatIpv4(addr));
    throw explain(err, w);
  }
}
