// `twill run`, the daemon: read the network config, pick the interface,
// acquire our lease, write subnet.env, then keep the lease, track peers and
// keep the kernel matching them until the signal aborts. Shutdown neither
// revokes the lease nor touches the dataplane, so a restart finds its subnet
// again and pods keep talking meanwhile. Dependencies come in as a plain object.
import { createHash } from 'node:crypto';
import type { NetConfig } from './config/netconf.ts';
import { describeError, hasCode, TwillError } from './errors.ts';
import type { LineWatcher, Runner } from './exec/runner.ts';
import { Desired, podMtu, vxlanDeviceName } from './dataplane/desired.ts';
import { pollChains, runMonitors, type FloodGuard, type Touch } from './dataplane/monitor.ts';
import { detectIptables, type IptablesInfo } from './dataplane/observe.ts';
import type { MasqSpec } from './dataplane/model.ts';
import { Reconciler, type PassReport } from './dataplane/reconciler.ts';
import { DaemonProbe, type StartupProgress } from './health/probe.ts';
import { serveHealth } from './health/server.ts';
import { LeaseKeeper } from './lease/keeper.ts';
import { ReadyMark } from './lease/ready.ts';
import type { PeerContext, Refusal } from './lease/admit.ts';
import { PeerTracker } from './lease/tracker.ts';
import type { Lease, LeaseAttrs, LeaseEvent, LeaseStore } from './lease/types.ts';
import type { Logger } from './log.ts';
import { discoverInterface, linkMac, type IfaceChoice, type IfaceRequest } from './net/iface.ts';
import { formatCidr, sameCidr } from './net/ipv4.ts';
import { readSubnetEnv, writeSubnetEnv, type SubnetEnv } from './subnetenv.ts';
import { Backoff, childController, retry } from './util/abort.ts';

export interface DaemonDeps {
  readonly store: LeaseStore;
  readonly runner: Runner;
  readonly watch: LineWatcher;
  readonly logger: Logger;
  /**
   * sets net.ipv4.ip_forward=1 when it is not (true when it had to); a throw fails the pass's
   * report, not the pass
   */
  readonly ensureForwarding: () => Promise<boolean>;
  /** why bridged traffic would bypass iptables, if it would */
  readonly bridgeNetfilterProblem: () => Promise<string | undefined>;
}

export interface DaemonOptions {
  readonly nodeName: string;
  readonly iface: IfaceRequest;
  readonly subnetFile: string;
  readonly renewMarginMs: number;
  readonly ipMasq: boolean;
  /** period of the safety-net dataplane pass */
  readonly resyncMs: number;
  /** where /healthz, /readyz and /metrics listen; none when undefined */
  readonly healthz?: { readonly ip: string; readonly port: number };
  /** twill's version, for twill_build_info */
  readonly version?: string;
  /** when `nft monitor` output counts as a flood (tests shrink it); default DEFAULT_FLOOD */
  readonly nftFlood?: FloodGuard;
  /** observes the daemon's state, for tests and (later) health and status */
  readonly onState?: (state: DaemonState) => void;
}

export interface DaemonState {
  readonly lease: Lease;
  /** the admitted peers */
  readonly peers: readonly Lease[];
  /** the refused peer records, by key, with why (admit.ts) */
  readonly refused: ReadonlyMap<string, Refusal>;
  /** the last dataplane pass, once one ran */
  readonly pass: PassReport | undefined;
}

/** A stable, locally administered unicast MAC derived from the node name and VNI. */
export function derivedVtepMac(nodeName: string, vni: number): string {
  const bytes = createHash('sha256').update(`twill:${nodeName}:${vni}`).digest().subarray(0, 6);
  bytes[0] = ((bytes[0] ?? 0) & 0xfe) | 0x02;
  return [...bytes].map((b) => b.toString(16).padStart(2, '0')).join(':');
}

/**
 * Retries `fn` while the store is unreachable (or our Node has no podCIDR
 * yet), for as long as it takes, logging each failure. Each attempt that
 * fails is reported to `progress`: that is start-up's heartbeat, so a wait
 * that keeps trying stays alive however long it lasts, and one that stops
 * trying (a call that never returns) does not.
 */
async function whileUnavailable<T>(
  deps: DaemonDeps,
  progress: StartupProgress,
  what: string,
  fn: () => Promise<T>,
  signal: AbortSignal,
): Promise<T> {
  progress.step(what);
  return retry(fn, {
    signal,
    backoff: new Backoff(500, 10_000),
    // an identity conflict ends when the other node's lease does: wait, not ready, saying why
    retryIf: (err) => hasCode(err, 'STORE_UNAVAILABLE') || hasCode(err, 'IDENTITY_CONFLICT'),
    onRetry: (err, retryInMs) => {
      progress.retrying(describeError(err));
      deps.logger.warn(
        { err: describeError(err), retryInMs },
        hasCode(err, 'IDENTITY_CONFLICT')
          ? `${what}: another live node holds our PublicIP's lease; retrying`
          : `${what}: lease store unreachable; retrying`,
      );
    },
  });
}

async function leaseAttrs(
  deps: DaemonDeps,
  o: { config: NetConfig; choice: IfaceChoice; nodeName: string },
  signal: AbortSignal,
): Promise<LeaseAttrs> {
  const backend = o.config.backend;
  if (backend.type === 'host-gw') {
    return {
      publicIp: o.choice.publicIp,
      publicIpv6: null,
      backendType: 'host-gw',
      backendData: null,
    };
  }
  // Peers' FDB entries name our VtepMAC: keep an existing device's MAC, else a stable derived one.
  const existing = await linkMac(deps.runner, vxlanDeviceName(backend.vni), signal);
  const vtepMac = existing ?? derivedVtepMac(o.nodeName, backend.vni);
  return {
    publicIp: o.choice.publicIp,
    publicIpv6: null,
    backendType: 'vxlan',
    backendData: { vni: backend.vni, vtepMac },
  };
}

async function previousSubnet(deps: DaemonDeps, path: string): Promise<SubnetEnv | undefined> {
  try {
    return await readSubnetEnv(path);
  } catch (err) {
    deps.logger.warn({ err: describeError(err), path }, 'ignoring unreadable subnet.env');
    return undefined;
  }
}

function subnetEnvFor(
  config: NetConfig,
  choice: IfaceChoice,
  lease: Lease,
  ipMasq: boolean,
): SubnetEnv {
  const mtu = podMtu(config.backend, choice.iface.mtu);
  return { network: config.network, subnet: lease.subnet, mtu, ipMasq };
}

interface Started {
  readonly config: NetConfig;
  readonly choice: IfaceChoice;
  readonly attrs: LeaseAttrs;
  readonly lease: Lease;
}

/** Config, interface, lease, subnet.env: everything before the loops start. */
async function acquire(
  deps: DaemonDeps,
  opts: DaemonOptions,
  progress: StartupProgress,
  signal: AbortSignal,
): Promise<Started> {
  const { store, logger } = deps;
  const config = await whileUnavailable(
    deps,
    progress,
    'reading network config',
    () => store.getNetworkConfig(signal),
    signal,
  );
  if (config.unknownKeys.length > 0)
    logger.warn(
      { keys: config.unknownKeys },
      'net-conf.json has keys twill does not know; they are ignored',
    );
  progress.step('choosing the interface');
  const choice = await discoverInterface(deps.runner, opts.iface, signal);
  logger.info(
    {
      iface: choice.iface.name,
      ifaceIp: choice.ifaceIp,
      publicIp: choice.publicIp,
      mtu: choice.iface.mtu,
    },
    'using interface',
  );
  const attrs = await leaseAttrs(deps, { config, choice, nodeName: opts.nodeName }, signal);
  const previous = await previousSubnet(deps, opts.subnetFile);
  const prevSubnet =
    previous && sameCidr(previous.network, config.network) ? previous.subnet : undefined;
  const lease = await whileUnavailable(
    deps,
    progress,
    'acquiring lease',
    () =>
      store.acquireLease({ config, attrs, previous: prevSubnet, nodeName: opts.nodeName }, signal),
    signal,
  );
  progress.step('writing subnet.env');
  await writeSubnetEnv(opts.subnetFile, subnetEnvFor(config, choice, lease, opts.ipMasq));
  logger.info(
    {
      key: lease.key,
      subnet: formatCidr(lease.subnet),
      expiresAt: new Date(lease.expiresAt).toISOString(),
      subnetFile: opts.subnetFile,
    },
    'lease acquired',
  );
  return { config, choice, attrs, lease };
}

export async function runDaemon(
  deps: DaemonDeps,
  opts: DaemonOptions,
  signal: AbortSignal,
): Promise<void> {
  const probe = new DaemonProbe({ version: opts.version ?? 'dev', resyncMs: opts.resyncMs });
  const loops: ((s: AbortSignal) => Promise<void>)[] = [
    (s) => runNode(deps, { ...opts, probe }, s),
  ];
  // the health endpoint answers from the very start, while etcd may still be unreachable
  const healthz = opts.healthz;
  if (healthz) loops.unshift((s) => serveHealth({ ...healthz, probe, logger: deps.logger }, s));
  await runTogether(signal, loops);
}

/** What admission checks peers against: our network, our lease, the underlay (admit.ts). */
function peerContext(
  store: LeaseStore,
  lease: Lease,
  config: NetConfig,
  choice: IfaceChoice,
): PeerContext {
  return {
    config,
    self: lease.subnet,
    selfPublicIp: lease.attrs.publicIp,
    ...(lease.attrs.backendData ? { selfVtepMac: lease.attrs.backendData.vtepMac } : {}),
    anySubnetSize: store.anySubnetSize === true,
    underlay: choice.iface,
  };
}

/**
 * The node, once it holds its lease. The parts are built in the order data flows through them —
 * lease keeper, peer tracker (store events → admitted peers), desired state, reconciler (passes:
 * plan and apply) — each given only what it needs; health and the ready mark listen.
 */
async function runNode(
  deps: DaemonDeps,
  opts: DaemonOptions & { probe: DaemonProbe },
  signal: AbortSignal,
): Promise<void> {
  const { store, logger, runner } = deps;
  const { probe } = opts;
  const { config, choice, lease } = await acquire(deps, opts, probe, signal);
  probe.step('detecting iptables');
  const iptables = await detectIptables(runner, signal);
  const brProblem = await deps.bridgeNetfilterProblem();
  if (brProblem !== undefined) logger.warn(brProblem);

  const { renewMarginMs, ipMasq } = opts;
  const onLease = (l: Lease): void => probe.leaseChanged(l);
  const keeper = new LeaseKeeper({ store, lease, renewMarginMs, logger, onLease });
  const peers = new PeerTracker({
    context: peerContext(store, lease, config, choice),
    selfKey: lease.key,
    selfAttrs: () => keeper.current().attrs,
    onSelfLost: (why) => keeper.notifyLost(why),
    logger,
  });
  const { randomFully } = iptables;
  const desired = new Desired({ config, keeper, peers, choice, ipMasq, randomFully });
  const ready = new ReadyMark({ store, keeper, logger }, signal);
  const publish = (): void => {
    const [admitted, refused] = [peers.list(), peers.skipped()];
    probe.peers(admitted, refused);
    opts.onState?.({ lease: keeper.current(), peers: admitted, refused, pass: probe.lastPass() });
  };
  const reconciler = new Reconciler({
    runner,
    logger,
    desired: () => desired.state(),
    ensureForwarding: deps.ensureForwarding,
    resyncMs: opts.resyncMs,
    ready: peers.listed,
    onPassStart: () => probe.passStarted(),
    onPassError: (err) => probe.passFailed(err),
    onPass: (r) => {
      probe.passDone(r);
      publish();
      if (r.converged && r.failures.length === 0) ready.converged();
    },
  });
  peers.subscribe((peersChanged) => {
    if (peersChanged) reconciler.leasesChanged();
    publish();
  });
  const env = subnetEnvFor(config, choice, lease, ipMasq);
  probe.started({ keeper, subnetFile: opts.subnetFile, env, underlay: choice.iface.name });
  publish();
  const onEvent = (ev: LeaseEvent): void => {
    peers.handle(ev);
    probe.storeEvent(ev);
  };
  await runTogether(signal, [
    (s) => store.watchLeases({ signal: s, onEvent }),
    (s) => keeper.run(s),
    (s) => reconciler.run(s),
    ...kernelWatchers({ deps, opts, choice, iptables, reconciler, desired }),
  ]);
}

/**
 * The loops that tell the reconciler what changed in the kernel: `ip monitor` and `nft monitor`,
 * and with iptables-legacy (no event stream for rule changes) a poll of twill's chains.
 */
function kernelWatchers(o: {
  deps: DaemonDeps;
  opts: DaemonOptions;
  choice: IfaceChoice;
  iptables: IptablesInfo;
  reconciler: Reconciler;
  desired: Desired;
}): ((s: AbortSignal) => Promise<void>)[] {
  const { deps, reconciler } = o;
  const { runner, logger } = deps;
  const trigger = (source: string, touch?: Touch): void =>
    touch ? reconciler.touch(source, touch) : reconciler.trigger(source);
  // the poll needs only the chains' inputs, not the whole desired state (5,000 peers every second)
  const masq = (): MasqSpec => o.desired.masq();
  const poll = (s: AbortSignal): Promise<void> =>
    pollChains({ runner, logger, masq, intervalMs: 1_000, onDrift: trigger }, s);
  const monitors = (s: AbortSignal): Promise<void> =>
    runMonitors(
      {
        watch: deps.watch,
        logger,
        ctx: { underlay: o.choice.iface.name },
        nft: o.iptables.nftables,
        onEvent: trigger,
        poll,
        ...(o.opts.nftFlood ? { flood: o.opts.nftFlood } : {}),
      },
      s,
    );
  return o.iptables.nftables ? [monitors] : [monitors, poll];
}

/**
 * Runs loops until `signal` aborts; the first loop to fail stops the others and its error is
 * thrown.
 */
async function runTogether(
  signal: AbortSignal,
  loops: ((s: AbortSignal) => Promise<void>)[],
): Promise<void> {
  const ctl = childController(signal);
  const results = await Promise.allSettled(
    loops.map((loop) => loop(ctl.signal).finally(() => ctl.abort())),
  );
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed)
    throw failed.reason instanceof Error
      ? failed.reason
      : new TwillError('STORE_UNAVAILABLE', String(failed.reason));
}
