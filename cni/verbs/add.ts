// ADD: look at the host first (the host veth must not exist; the bridge, if
// it exists, must be a bridge: nothing is touched otherwise), reserve an
// address (and on a dual-stack node an IPv6 one, in the same hold of the
// store's lock), wire the host side (bridge, veth pair with its peer created
// straight in the pod's netns, bridge port with hairpin, gateway addresses)
// in one `ip` batch and the pod side (lo, addresses, routes) in one more,
// and answer the result. Both batch processes start, once what needs no
// process is checked (subnet.env, the netns, the veth's name), before their
// lines are known, and wait for them (kernel.ts, LiveBatch): the host one
// first shows an existing bridge (the look costs no process of its own); the
// pod one is started early on a node without IPv6 only. An ADD runs two
// processes, `ip` and `nsenter` (which execs `ip`): ADD_PROCESSES.
// Dual-stack adds lines to those batches, no process.
// An IPv6-only node (subnet.env without the IPv4 pair) runs the dual-stack
// ADD without its IPv4 lines: no IPv4 address is reserved, none is put on the
// bridge or the pod, and IPv4 forwarding is left alone.
// Whatever fails after the reservation rolls back what this call created,
// and only that: the host veth did not exist when the call began (and the
// runtime runs no other operation for this container meanwhile), so a veth
// of that name is this call's. Rollback runs under its own time limit, not
// the call's signal, so that a SIGTERM still cleans up.
import { formatCidr, formatIpv4 } from '../../src/net/ipv4.ts';
import { formatCidr6, formatIpv6 } from '../../src/net/ipv6.ts';
import { subnetFamilies, type SubnetEnv } from '../../src/subnetenv.ts';
import { firstFailedLine } from '../../src/exec/batch-errors.ts';
import { CommandError } from '../../src/exec/runner.ts';
import { CNI_CODES, CniError, fail } from '../errors.ts';
import {
  bridgeMac,
  bridgeMac6,
  hostAddBatch,
  linkOf,
  podAddBatch,
  type HostWiring,
  type IpLink,
} from '../ip-batch.ts';
import type { IpStore, Reserved } from '../ipam/store.ts';
import { poolOf, poolOf6 } from '../ipam/pool.ts';
import {
  deleteLink,
  hostBatch,
  linkKind,
  linkNames,
  openHostSession,
  openPodSession,
  podBatch,
  type HostSession,
  type KernelDeps,
  type LiveBatch,
  type LinkKind,
} from '../kernel.ts';
import { ensureIpForward, ensureIpv6Forward, PROC_SYS_NET } from '../../src/dataplane/sysctl.ts';
import { hostVethName } from '../names.ts';
import { renderResult, type Attachment, type ResultInterface } from '../result.ts';
import { assertNetns, loadSubnet, storeFor, type PluginDeps, type Request } from './common.ts';

const ROLLBACK_TIMEOUT_MS = 5000;

/**
 * The processes one ADD starts (IPv4, dual-stack or IPv6-only alike, bridge there or not): the
 * host side's `ip -batch`, and `nsenter` for the pod side's. A bridge created by a concurrent ADD
 * between the look and the batch costs one or two more (rare).
 */
export const ADD_PROCESSES = 2;

type HostLinks = { bridge: ResultInterface; host: ResultInterface };

/**
 * A host batch failure, and whether it failed at or before the line creating the veth pair (so none
 * was made).
 */
class HostWiringError extends Error {
  readonly vethNotCreated: boolean;
  constructor(cause: unknown, vethNotCreated: boolean) {
    super('host wiring failed', { cause });
    this.vethNotCreated = vethNotCreated;
  }
}

function asInterface(link: IpLink): ResultInterface {
  return { name: link.ifname, mac: link.address, mtu: link.mtu };
}

function stderrOf(err: unknown): string {
  return err instanceof CommandError ? err.stderr : '';
}

function existsError(w: HostWiring, cause?: unknown): CniError {
  return new CniError({
    cniCode: CNI_CODES.exists,
    message: `cannot create veth ${w.hostVeth} with peer ${w.ifname} in ${w.netns}: an interface of that name already exists (${w.ifname} in the pod, or ${w.hostVeth} on the host for this container id and ifname)`,
    cause,
  });
}

function describeKind(k: LinkKind): string {
  if (k.kind !== undefined) return `it is a ${k.kind} device`;
  return `it is a ${k.linkType ?? 'plain'} device`;
}

/**
 * True when `bridge` exists and is a bridge, false when it does not exist; code 7 when it is
 * something else.
 */
async function checkBridge(k: KernelDeps, bridge: string): Promise<boolean> {
  const kind = await linkKind(k, bridge);
  if (kind === undefined) return false;
  refuseNonBridge(bridge, kind);
  return true;
}

/** Code 7 unless `kind` is a bridge's. */
function refuseNonBridge(bridge: string, kind: LinkKind): void {
  if (kind.kind !== 'bridge')
    fail(
      CNI_CODES.invalidConfig,
      `network config: "bridge" ${JSON.stringify(bridge)}: ${bridge} already exists but is not a bridge (${describeKind(kind)}); twill leaves it alone`,
    );
}

interface Inspected {
  readonly bridgeExists: boolean;
  /** when the bridge exists: the `ip` that looked at it, waiting for the host batch */
  readonly session?: HostSession;
}

/**
 * Before anything is changed: code 7 when the bridge is not a bridge; whether the bridge exists.
 * `session` (there when the bridge was among the host's links) is showing the bridge.
 */
async function inspectHost(w: HostWiring, session: HostSession | undefined): Promise<Inspected> {
  if (!session) return { bridgeExists: false };
  const kind = await session.bridge;
  if (kind === undefined) return { bridgeExists: false }; // gone meanwhile: ip has ended
  refuseNonBridge(w.bridge, kind);
  return { bridgeExists: true, session };
}

async function tryHost(
  k: KernelDeps,
  w: HostWiring,
  createBridge: boolean,
  session?: HostSession,
): Promise<HostLinks> {
  const { lines, vethLine } = hostAddBatch(w, createBridge);
  try {
    const [bridge, host] = await (session ? session.finish(lines) : hostBatch(k, lines));
    return {
      bridge: asInterface(linkOf(bridge, w.bridge)),
      host: asInterface(linkOf(host, w.hostVeth)),
    };
  } catch (err) {
    const line = firstFailedLine(stderrOf(err));
    throw new HostWiringError(err, line !== undefined && line <= vethLine);
  }
}

/**
 * The host batch, creating the bridge when it was missing (tolerating a concurrent creator, once it
 * is checked to be a bridge).
 */
async function wireHost(k: KernelDeps, w: HostWiring, host: Inspected): Promise<HostLinks> {
  if (host.bridgeExists) return tryHost(k, w, false, host.session);
  try {
    return await tryHost(k, w, true);
  } catch (err) {
    const cause = err instanceof HostWiringError ? err.cause : err;
    if (!(firstFailedLine(stderrOf(cause)) === 1 && /File exists/.test(stderrOf(cause)))) throw err;
    if (!(await checkBridge(k, w.bridge))) throw err;
  }
  return tryHost(k, w, false);
}

/** The bridge's MAC: from the IPv4 gateway, or the IPv6 one on an IPv6-only node. */
function macOf(subnet: SubnetEnv): string {
  const { v4, v6 } = subnetFamilies(subnet);
  if (v4) return bridgeMac(poolOf(v4.subnet).gateway);
  if (v6) return bridgeMac6(poolOf6(v6.subnet).gateway);
  throw new Error('subnet.env gives the node no subnet');
}

function hostWiring(req: Request, subnet: SubnetEnv, mtu: number): HostWiring {
  const { env, conf } = req;
  const { v4, v6 } = subnetFamilies(subnet);
  const gateway =
    conf.isGateway && v4
      ? { addr: poolOf(v4.subnet).gateway, prefix: v4.subnet.prefix }
      : undefined;
  const gateway6 =
    conf.isGateway && v6
      ? { addr: poolOf6(v6.subnet).gateway, prefix: v6.subnet.prefix }
      : undefined;
  return {
    bridge: conf.bridge,
    bridgeMac: macOf(subnet),
    hostVeth: hostVethName(env.containerId, env.ifname),
    ifname: env.ifname,
    netns: env.netns,
    mtu,
    gateway,
    ...(gateway6 ? { gateway6 } : {}),
    hairpin: conf.hairpinMode,
  };
}

/** Turns a kernel failure into the answer a runtime should see. */
function explain(err: unknown, w: HostWiring): unknown {
  const cause = err instanceof HostWiringError ? err.cause : err;
  if (err instanceof HostWiringError && err.vethNotCreated && /File exists/.test(stderrOf(cause)))
    return existsError(w, cause);
  return cause;
}

async function wire(
  deps: PluginDeps,
  req: Request,
  o: {
    subnet: SubnetEnv;
    addrs: Reserved;
    w: HostWiring;
    host: Inspected;
    pod: LiveBatch | undefined;
  },
): Promise<Attachment> {
  const { env, conf } = req;
  const fam = subnetFamilies(o.subnet);
  const { addr, addr6 } = o.addrs;
  const links = await wireHost(deps, o.w, o.host);
  const v4 =
    fam.v4 && addr !== undefined
      ? {
          address: addr,
          subnet: fam.v4.subnet,
          gateway: poolOf(fam.v4.subnet).gateway,
          network: fam.v4.network,
        }
      : undefined;
  const v6 =
    fam.v6 && addr6 !== undefined
      ? {
          address: addr6,
          subnet: fam.v6.subnet,
          gateway: poolOf6(fam.v6.subnet).gateway,
          network: fam.v6.network,
        }
      : undefined;
  const pod = { ifname: env.ifname, defaultRoute: conf.isDefaultGateway, v4, v6 };
  const [podLink] = await (o.pod && !v6
    ? o.pod.finish(podAddBatch(pod))
    : podBatch(deps, env.netns, podAddBatch(pod), { ipv6Ifname: v6 ? env.ifname : undefined }));
  const readOnly = {
    readOnlyHint: 'read-only: the runtime must run CNI plugins with a writable /proc/sys',
  };
  if (conf.isGateway && v4) await ensureIpForward(PROC_SYS_NET, readOnly);
  if (conf.isGateway && v6) await ensureIpv6Forward(PROC_SYS_NET, readOnly);
  const gw = v4 ? formatIpv4(v4.gateway) : '';
  const gw6 = v6 ? formatIpv6(v6.gateway) : '';
  const routes = [
    ...(v4 ? [{ dst: formatCidr(v4.network), gw }] : []),
    ...(v4 && conf.isDefaultGateway ? [{ dst: '0.0.0.0/0', gw }] : []),
    ...(v6 ? [{ dst: formatCidr6(v6.network), gw: gw6 }] : []),
    ...(v6 && conf.isDefaultGateway ? [{ dst: '::/0', gw: gw6 }] : []),
  ];
  return {
    ...links,
    pod: { ...asInterface(linkOf(podLink, env.ifname)), sandbox: env.netns },
    ...(v4
      ? { ip4: { address: `${formatIpv4(v4.address)}/${v4.subnet.prefix}`, gateway: gw } }
      : {}),
    ...(v6
      ? { ip6: { address: `${formatIpv6(v6.address)}/${v6.subnet.prefix}`, gateway: gw6 } }
      : {}),
    routes,
  };
}

/**
 * Undoes this call: its veth (unless the batch provably failed before making it) and its address.
 */
async function rollback(
  deps: PluginDeps,
  o: { err: unknown; w: HostWiring; store: IpStore; addrs: Reserved },
): Promise<void> {
  const k: KernelDeps = { runner: deps.runner, signal: AbortSignal.timeout(ROLLBACK_TIMEOUT_MS) };
  const madeNoVeth = o.err instanceof HostWiringError && o.err.vethNotCreated;
  if (!madeNoVeth) {
    await deleteLink(k, o.w.hostVeth).catch((e: unknown) =>
      deps.log.error('rollback: cannot delete veth', { dev: o.w.hostVeth, err: String(e) }),
    );
  }
  const ips = [
    ...(o.addrs.addr === undefined ? [] : [formatIpv4(o.addrs.addr)]),
    ...(o.addrs.addr6 === undefined ? [] : [formatIpv6(o.addrs.addr6)]),
  ];
  await o.store
    .releaseAll(ips)
    .catch((e: unknown) =>
      deps.log.error('rollback: cannot release address', { ip: ips.join(', '), err: String(e) }),
    );
}

/**
 * twill creates the pod's interface: it is the first plugin of a conflist and gets no prevResult.
 */
function refusePrevResult(req: Request): void {
  if (req.conf.prevResult === undefined) return;
  fail(
    CNI_CODES.invalidConfig,
    'network config: "prevResult" is set, but twill creates the pod\'s interface and address and must be the first plugin of the conflist (put it before the plugin whose result this is)',
  );
}

export async function cmdAdd(deps: PluginDeps, req: Request): Promise<Record<string, unknown>> {
  const { env, conf } = req;
  refusePrevResult(req);
  const subnet = await loadSubnet(conf.subnetFile);
  await assertNetns(env.netns);
  const w = hostWiring(req, subnet, conf.mtu ?? subnet.mtu);
  const names = await linkNames();
  if (names.has(w.hostVeth)) throw existsError(w);
  const { v4, v6 } = subnetFamilies(subnet);
  // both started now so that they are up when their lines come; until then the host one has only
  // been asked to show the bridge and the pod one nothing, so a call that stops has changed nothing
  let session: HostSession | undefined;
  let pod: LiveBatch | undefined;
  try {
    session = names.has(w.bridge) ? openHostSession(deps, w.bridge) : undefined;
    pod = v6 ? undefined : openPodSession(deps, env.netns);
    const host = await inspectHost(w, session);
    const store = storeFor(conf, deps.log);
    const addrs = await store.reserveAll({
      pool: v4 ? poolOf(v4.subnet) : undefined,
      pool6: v6 ? poolOf6(v6.subnet) : undefined,
      containerId: env.containerId,
      ifname: env.ifname,
    });
    try {
      return renderResult(conf.cniVersion, await wire(deps, req, { subnet, addrs, w, host, pod }));
    } catch (err) {
      await rollback(deps, { err, w, store, addrs });
      throw explain(err, w);
    }
  } finally {
    // no-ops once finished; otherwise they end with nothing sent
    await Promise.all([session?.close(), pod?.close()]);
  }
}
