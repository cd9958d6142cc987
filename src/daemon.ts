// `twill run`, the daemon: read the network config, pick the interface,
// acquire our lease, write subnet.env, then keep the lease, track peers and
// keep the kernel matching them until the signal aborts. Shutdown neither
// revokes the lease nor touches the dataplane, so a restart finds its subnet
// again and pods keep talking meanwhile. Dependencies come in as a plain object.
// IPv4 only, dual-stack, or IPv6 only (the network config's `ipv4` null: the
// Kubernetes store only, whose lease then has no IPv4 subnet): each half the
// config turns off is simply absent, from the interface choice and the lease
// attributes to subnet.env and the dataplane. The masquerade lives in
// iptables chains, or with "EnableNFTables" in twill's own nftables tables
// (the nft command then required: its monitor is how changes are seen).
import type { NetConfig } from './config/netconf.ts';
import { describeError, hasCode, TwillError } from './errors.ts';
import type { Feeder, LineWatcher, Runner } from './exec/runner.ts';
import { Desired, podMtu, vxlan6DeviceName, vxlanDeviceName } from './dataplane/desired.ts';
import { EarlyRoutes, holdsNoRoutes } from './dataplane/early.ts';
import { MonitorHush, pollChains, runMonitors, type FloodGuard } from './dataplane/monitor.ts';
import type { Touch } from './dataplane/kernel-event.ts';
import { pollNftTables } from './dataplane/nft-monitor.ts';
import { nftUnusable } from './dataplane/nft-observe.ts';
import { detectIptables, nftCommandExists } from './dataplane/observe.ts';
import type { MasqSpec } from './dataplane/model.ts';
import { Reconciler } from './dataplane/reconciler.ts';
import type { PassReport } from './dataplane/pass-report.ts';
import { forwardingSysctls } from './dataplane/sysctl.ts';
import { DaemonProbe, type StartupProgress } from './health/probe.ts';
import { LeaseKeeper } from './lease/keeper.ts';
import { ReadyMark } from './lease/ready.ts';
import type { PeerContext, Refusal } from './lease/admit.ts';
import { EarlyPeers } from './lease/early-peers.ts';
import { PeerTracker } from './lease/tracker.ts';
import type { AcquireRequest, Lease, LeaseAttrs, LeaseEvent, LeaseStore } from './lease/types.ts';
import type { Logger } from './log.ts';
import { discoverInterface, linkMac, type IfaceChoice, type IfaceRequest } from './net/iface.ts';
import { formatCidr, sameCidr, type Cidr } from './net/ipv4.ts';
import { formatCidr6, sameCidr6, type Cidr6 } from './net/ipv6.ts';
import { readSubnetEnv, writeSubnetEnv, type SubnetEnv } from './subnetenv.ts';
import { Backoff, childController, retry } from './util/abort.ts';
import { sha256 } from './util/sha256.ts';

export interface DaemonDeps {
  readonly store: LeaseStore;
  readonly runner: Runner;
  readonly watch: LineWatcher;
  /** starts the kept `ip`/`bridge` batches of lease changes and repairs (exec/kept-batch.ts) */
  readonly feed?: Feeder;
  readonly logger: Logger;
  /**
   * keeps forwarding on: net.ipv4.ip_forward unless IPv4 is off, and net.ipv6.conf.all.forwarding
   * when IPv6 is on (true when it had to set one); a throw fails the pass's report, not the pass
   */
  readonly ensureForwarding: (o: { ipv4: boolean; ipv6: boolean }) => Promise<boolean>;
  /** why bridged traffic would bypass iptables (ip6tables on an IPv6-only node), if it would */
  readonly bridgeNetfilterProblem: (o: { ipv6Only: boolean }) => Promise<string | undefined>;
}

export interface DaemonOptions {
  readonly nodeName: string;
  readonly iface: IfaceRequest;
  readonly subnetFile: string;
  readonly renewMarginMs: number;
  readonly ipMasq: boolean;
  /** the CNI plugin's bridge, the only device whose stale gateways are removed (default cni0) */
  readonly cniBridge?: string;
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

/**
 * A stable, locally administered unicast MAC derived from the node name and VNI; the IPv6 device's
 * (family 6) differs from the IPv4 one's, since peers key FDB entries of both devices by MAC.
 */
export function derivedVtepMac(nodeName: string, vni: number, family: 4 | 6 = 4): string {
  // the IPv4 input is the one twill always used: a restart keeps an existing node's VtepMAC
  const input = family === 4 ? `twill:${nodeName}:${vni}` : `twill:${nodeName}:${vni}:v6`;
  const bytes = sha256(input).subarray(0, 6);
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
  // IPv6 only: no PublicIP (nor BackendData below), as flannel publishes none with IPv4 off
  const publicIp = o.config.ipv4 ? o.choice.publicIp : null;
  const publicIpv6 = o.config.ipv6 ? (o.choice.publicIp6 ?? null) : null;
  if (backend.type === 'host-gw') {
    return { publicIp, publicIpv6, backendType: 'host-gw', backendData: null };
  }
  // Peers' FDB entries name our VtepMAC: keep an existing device's MAC, else a stable derived one.
  // The IPv6 device has its own (flannel's BackendV6Data), kept and derived the same way.
  const vtepMac = o.config.ipv4
    ? ((await linkMac(deps.runner, vxlanDeviceName(backend.vni), signal)) ??
      derivedVtepMac(o.nodeName, backend.vni))
    : undefined;
  const vtepMac6 = o.config.ipv6
    ? ((await linkMac(deps.runner, vxlan6DeviceName(backend.vni), signal)) ??
      derivedVtepMac(o.nodeName, backend.vni, 6))
    : undefined;
  return {
    publicIp,
    publicIpv6,
    backendType: 'vxlan',
    backendData: vtepMac === undefined ? null : { vni: backend.vni, vtepMac },
    ...(vtepMac6 === undefined ? {} : { backendData6: { vni: backend.vni, vtepMac: vtepMac6 } }),
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
  // vxlan with IPv6 on (dual-stack or IPv6 only): the IPv6 tunnel's 70 bytes
  const mtu = podMtu(config.backend, choice.iface.mtu, { ipv6: config.ipv6 !== null });
  // IPv6 only: no FLANNEL_NETWORK / FLANNEL_SUBNET, as flannel's WriteSubnetFile with IPv4 off
  const v4 =
    config.ipv4 && lease.subnet
      ? { network: config.ipv4.network, subnet: lease.subnet }
      : { network: null, subnet: null };
  const v6 =
    config.ipv6 && lease.subnet6 ? { network6: config.ipv6.network, subnet6: lease.subnet6 } : {};
  return { ...v4, ...v6, mtu, ipMasq };
}

/** The subnets subnet.env says we held, when it was written for this same network (each family). */
function previousSubnets(
  config: NetConfig,
  previous: SubnetEnv | undefined,
): Pick<AcquireRequest, 'previous' | 'previous6'> {
  const v4 =
    config.ipv4 &&
    previous?.network &&
    previous.subnet &&
    sameCidr(previous.network, config.ipv4.network)
      ? previous.subnet
      : undefined;
  const v6 =
    config.ipv6 &&
    previous?.network6 &&
    previous.subnet6 &&
    sameCidr6(previous.network6, config.ipv6.network)
      ? { previous6: previous.subnet6 }
      : {};
  return { previous: v4, ...v6 };
}

/**
 * The lease must have a subnet in each family the config runs: without subnet6, IPv6 pods are
 * unroutable; without an IPv4 subnet, IPv4 ones.
 */
function checkLeaseFamilies(config: NetConfig, lease: Lease): void {
  if (config.ipv4 && !lease.subnet)
    throw new TwillError(
      'LEASE_INVALID',
      `the lease store gave lease ${lease.key} without an IPv4 subnet, but the network config has IPv4 (Network ${formatCidr(config.ipv4.network)})`,
    );
  if (config.ipv6 && !lease.subnet6)
    throw new TwillError(
      'LEASE_INVALID',
      `the lease store gave lease ${lease.key} without an IPv6 subnet, but the network config sets EnableIPv6 (IPv6Network ${formatCidr6(config.ipv6.network)})`,
    );
}

interface Started {
  readonly config: NetConfig;
  readonly choice: IfaceChoice;
  readonly attrs: LeaseAttrs;
  readonly lease: Lease;
  /** the routes written while the listing was decoded (early.ts), when there were any to write */
  readonly early: EarlyRoutes | undefined;
  /** the kernel held no route of twill's when the daemon started (early.ts, holdsNoRoutes) */
  readonly cold: Promise<boolean>;
}

/** net-conf.json from the store (waiting while it is unreachable). */
async function readConfig(
  deps: DaemonDeps,
  progress: StartupProgress,
  signal: AbortSignal,
): Promise<NetConfig> {
  const config = await whileUnavailable(
    deps,
    progress,
    'reading network config',
    () => deps.store.getNetworkConfig(signal),
    signal,
  );
  if (config.unknownKeys.length > 0)
    deps.logger.warn(
      { keys: config.unknownKeys },
      'net-conf.json has keys twill does not know; they are ignored',
    );
  return config;
}

/** Interface, lease, subnet.env: everything else before the loops start. */
async function acquire(
  deps: DaemonDeps,
  opts: DaemonOptions,
  config: NetConfig,
  progress: StartupProgress,
  signal: AbortSignal,
): Promise<Started> {
  const { store, logger } = deps;
  // the peers' leases come in while the interface is chosen, and the kernel is looked at for
  // routes of twill's meanwhile (a cold start writes its routes early, and starts `ip monitor`
  // after its first pass)
  store.prefetchListing?.(signal);
  const cold = kernelCold(deps, config, signal);
  progress.step('choosing the interface');
  const ipv4 = config.ipv4 !== null;
  const ipv6 = config.ipv6 !== null;
  if (!ipv6 && opts.iface.publicIpv6 !== undefined)
    logger.warn(
      { publicIpv6: opts.iface.publicIpv6 },
      '--public-ipv6 is ignored: the network config does not set EnableIPv6',
    );
  // IPv6 only: the IPv6 default route's interface, no IPv4 address needed, --public-ip refused
  const choice = await discoverInterface(deps.runner, { ...opts.iface, ipv4, ipv6 }, signal);
  logger.info(
    {
      iface: choice.iface.name,
      ...(ipv4 ? { ifaceIp: choice.ifaceIp, publicIp: choice.publicIp } : {}),
      ...(ipv6 ? { ifaceIp6: choice.ifaceIp6, publicIpv6: choice.publicIp6 } : {}),
      mtu: choice.iface.mtu,
    },
    'using interface',
  );
  if (config.ipv6)
    logger.info(
      { network6: formatCidr6(config.ipv6.network), subnetLen6: config.ipv6.subnetLen },
      ipv4
        ? 'dual-stack: leasing an IPv6 subnet too'
        : 'IPv6 only ("EnableIPv4": false): leasing an IPv6 subnet alone',
    );
  const attrs = await leaseAttrs(deps, { config, choice, nodeName: opts.nodeName }, signal);
  const previous = previousSubnets(config, await previousSubnet(deps, opts.subnetFile));
  const early = writesEarly(deps, config)
    ? earlyRoutes(deps, { config, attrs, choice, cold }, signal)
    : undefined;
  // start-up fails: the routes written early are deleted before we go (no first pass will judge
  // them), whichever try of the acquisition wrote them
  const abandon = async (err: unknown): Promise<never> => {
    early?.end({ failed: true });
    await early?.done();
    throw err;
  };
  const lease = await whileUnavailable(
    deps,
    progress,
    'acquiring lease',
    () =>
      store.acquireLease(
        { config, attrs, ...previous, nodeName: opts.nodeName, ...(early ? { early } : {}) },
        signal,
      ),
    signal,
  ).catch(abandon);
  try {
    checkLeaseFamilies(config, lease);
    progress.step('writing subnet.env');
    await writeSubnetEnv(opts.subnetFile, subnetEnvFor(config, choice, lease, opts.ipMasq));
  } catch (err) {
    await abandon(err);
  }
  logger.info(
    {
      key: lease.key,
      ...(lease.subnet ? { subnet: formatCidr(lease.subnet) } : {}),
      ...(lease.subnet6 ? { subnet6: formatCidr6(lease.subnet6) } : {}),
      expiresAt: new Date(lease.expiresAt).toISOString(),
      subnetFile: opts.subnetFile,
    },
    'lease acquired',
  );
  return { config, choice, attrs, lease, early, cold };
}

/**
 * A cold start's routes may be written while the listing is decoded (dataplane/early.ts): host-gw
 * with a store whose subnets are SubnetLen wide (etcd), when the daemon can feed a batch.
 */
function writesEarly(deps: DaemonDeps, config: NetConfig): boolean {
  return (
    deps.feed !== undefined &&
    config.backend.type === 'host-gw' &&
    deps.store.anySubnetSize !== true
  );
}

/** The early writer's look at the kernel: no route of twill's in a family the config runs. */
function kernelCold(deps: DaemonDeps, config: NetConfig, signal: AbortSignal): Promise<boolean> {
  const families = { v4: config.ipv4 !== null, v6: config.ipv6 !== null };
  return holdsNoRoutes({ runner: deps.runner, logger: deps.logger, signal, ...families });
}

/** The writer of a cold start's routes while the listing is decoded (writesEarly). */
function earlyRoutes(
  deps: DaemonDeps,
  o: { config: NetConfig; attrs: LeaseAttrs; choice: IfaceChoice; cold: Promise<boolean> },
  signal: AbortSignal,
): EarlyRoutes | undefined {
  const { config, choice } = o;
  const feed = deps.feed;
  if (!feed) return undefined;
  const ctx = peerContext(deps.store, { attrs: o.attrs, subnet: null }, config, choice);
  const families = { v4: config.ipv4 !== null, v6: config.ipv6 !== null };
  return new EarlyRoutes({
    runner: deps.runner,
    feed,
    cold: o.cold,
    peers: new EarlyPeers(ctx),
    setup: { choice, backend: config.backend, ...families, vxlan: null, vxlan6: null },
    logger: deps.logger,
    signal,
  });
}

export async function runDaemon(
  deps: DaemonDeps,
  opts: DaemonOptions,
  signal: AbortSignal,
): Promise<void> {
  const probe = new DaemonProbe({ version: opts.version ?? 'dev', resyncMs: opts.resyncMs });
  const loops: Loop[] = [['the node', (s) => runNode(deps, { ...opts, probe }, s)]];
  // the health endpoint answers from the very start, while etcd may still be unreachable; its
  // module (and node:http) is loaded only when it is on: 1.2 MiB of RSS otherwise kept for nothing
  const healthz = opts.healthz;
  if (healthz)
    loops.unshift([
      'the health endpoint',
      async (s) => {
        const { serveHealth } = await import('./health/server.ts');
        await serveHealth({ ...healthz, probe, logger: deps.logger }, s);
      },
    ]);
  await runTogether(signal, loops);
}

/**
 * What admission checks peers against: our network, our lease (`own`; its subnets null before we
 * hold one, for the early writer), the underlay (admit.ts). With IPv4 off, our lease's IPv4 half
 * (none, from a store that follows the config) is not ours to defend.
 */
function peerContext(
  store: LeaseStore,
  own: { attrs: LeaseAttrs; subnet: Cidr | null; subnet6?: Cidr6 | null },
  config: NetConfig,
  choice: IfaceChoice,
): PeerContext {
  const v4 = config.ipv4 !== null;
  const { attrs } = own;
  return {
    config,
    self: v4 ? own.subnet : null,
    ...(v4 && attrs.publicIp !== null ? { selfPublicIp: attrs.publicIp } : {}),
    ...(v4 && attrs.backendData ? { selfVtepMac: attrs.backendData.vtepMac } : {}),
    // (a store that follows the config gives our lease an IPv6 subnet exactly when it has IPv6)
    ...(config.ipv6
      ? {
          self6: own.subnet6 ?? null,
          selfPublicIpv6: attrs.publicIpv6 ?? choice.publicIp6 ?? null,
        }
      : {}),
    ...(attrs.backendData6 ? { selfVtepMac6: attrs.backendData6.vtepMac } : {}),
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
  const config = await readConfig(deps, probe, signal);
  // The netfilter detection (a few iptables or nft runs) needs only the config: it runs while the
  // interface is chosen and the lease acquired, off the start-up's critical path. Awaited below;
  // the catch only keeps a failure from going unhandled while the acquisition fails first.
  const detecting = detectMasq(runner, config, signal);
  detecting.catch(() => undefined);
  const { choice, lease, early, cold } = await acquire(deps, opts, config, probe, signal);
  // big plans (a cold start) run with `ip monitor` stopped: its events would be twill's own; the
  // early routes too, and the first pass reads the entries only once they are written
  const hush = new MonitorHush();
  const earlyDone = early ? hush.during(() => early.done()) : undefined;
  // a cold start's first pass writes every peer's entries, with `ip monitor` stopped: it starts
  // after that pass (its start asks for the full pass that sees what it missed) rather than
  // before, only to be stopped, and waited for, when the pass's batches begin
  let firstPassEnded = (): void => undefined;
  if (await cold) {
    const ended = new Promise<void>((resolve) => (firstPassEnded = resolve));
    signal.addEventListener('abort', firstPassEnded, { once: true });
    void hush.during(() => ended);
  }
  probe.step(config.nftables ? 'detecting nft' : 'detecting iptables');
  const netfilter = await detecting;
  if (config.nftables)
    logger.info('nftables mode ("EnableNFTables"): the masquerade is kept in twill\'s nft tables');
  const brProblem = await deps.bridgeNetfilterProblem({ ipv6Only: config.ipv4 === null });
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
  const { randomFully } = netfilter;
  const families = { ipv4: config.ipv4 !== null, ipv6: config.ipv6 !== null };
  // podRanges defaults the CNI bridge (cni0) when --cni-bridge gave none
  const bridge = opts.cniBridge === undefined ? {} : { cniBridge: opts.cniBridge };
  const desired = new Desired({ config, keeper, peers, choice, ipMasq, randomFully, ...bridge });
  const ready = new ReadyMark({ store, keeper, logger }, signal);
  const publish = (): void => {
    const [admitted, refused] = [peers.list(), peers.skipped()];
    probe.peers(admitted, refused);
    opts.onState?.({ lease: keeper.current(), peers: admitted, refused, pass: probe.lastPass() });
  };
  const reconciler = new Reconciler({
    runner,
    ...(deps.feed ? { feed: deps.feed } : {}),
    logger,
    quietMonitors: (f) => hush.during(f),
    nftables: netfilter.nftables,
    nftCommand: netfilter.nftCommand,
    desired: () => desired.state(),
    ensureForwarding: () => deps.ensureForwarding(families),
    forwardingSysctls: forwardingSysctls(families),
    resyncMs: opts.resyncMs,
    ready: peers.listed,
    ...(earlyDone ? { entriesAfter: earlyDone } : {}),
    onPassStart: () => probe.passStarted(),
    onPassError: (err) => {
      firstPassEnded();
      probe.passFailed(err);
    },
    onPass: (r) => {
      firstPassEnded();
      probe.passDone(r);
      publish();
      if (r.converged && r.failures.length === 0) ready.converged();
      // the next lease event's check and the next kernel event's indexes, made now that nothing
      // waits (tracker.ts, prepareJoins; judge.ts, prepareKnown)
      if (r.converged)
        setImmediate(() => {
          peers.prepareJoins();
          reconciler.prepareIndexes();
        });
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
    ['the lease watch', (s) => store.watchLeases({ signal: s, onEvent })],
    ['the lease keeper', (s) => keeper.run(s)],
    ['the reconciler', (s) => reconciler.run(s)],
    ...kernelWatchers({ deps, opts, choice, netfilter, reconciler, desired, hush, ...families }),
  ]);
}

/**
 * Where the masquerade lives and how its changes are seen: in nftables mode twill's tables, watched
 * by `nft monitor`; in iptables mode iptables' chains, watched by `nft monitor` when iptables
 * drives nf_tables (and nft is installed), else polled.
 */
interface MasqBackend {
  /** "EnableNFTables": twill's nft tables */
  readonly nftables: boolean;
  /** `nft monitor` sees changes of what twill keeps */
  readonly events: boolean;
  /** the nft command runs (iptables mode: an nftables-mode run's tables may be left to remove) */
  readonly nftCommand: boolean;
  /** masquerade --random-fully (fully-random) is available */
  readonly randomFully: boolean;
}

async function detectMasq(
  runner: Runner,
  config: NetConfig,
  signal: AbortSignal,
): Promise<MasqBackend> {
  if (config.nftables) {
    // once, here: an nft that cannot list in JSON would fail every pass
    const problem = await nftUnusable(runner, signal);
    if (problem !== undefined)
      throw new TwillError(
        'CONFIG_UNSUPPORTED',
        `net-conf.json: "EnableNFTables" is true, but ${problem}; or set "EnableNFTables": false to keep the masquerade in iptables`,
      );
    // every nft twill can run has masquerade fully-random (nft 0.9, kernel 4.x)
    return { nftables: true, events: true, nftCommand: true, randomFully: true };
  }
  // IPv6 only: ip6tables is the one twill uses (and may be the one installed)
  const ipt = await detectIptables(runner, signal, { ipv4: config.ipv4 !== null });
  const nftCommand = ipt.nftables || (await nftCommandExists(runner, signal));
  return { nftables: false, events: ipt.nftables, nftCommand, randomFully: ipt.randomFully };
}

/**
 * The loops that tell the reconciler what changed in the kernel: `ip monitor` and `nft monitor`,
 * and with iptables-legacy (no event stream for rule changes) a poll of twill's chains; in
 * nftables mode, `nft monitor` watches twill's tables and nothing is polled.
 */
function kernelWatchers(o: {
  deps: DaemonDeps;
  opts: DaemonOptions;
  choice: IfaceChoice;
  netfilter: MasqBackend;
  reconciler: Reconciler;
  desired: Desired;
  /** stops `ip monitor` while the reconciler applies a big plan */
  hush: MonitorHush;
  /** IPv6 on (dual-stack or IPv6 only): the IPv6 chains are polled, IPv6 underlay events matter */
  ipv6: boolean;
  /** false (IPv6 only): no iptables chain is polled, nor are iptables' events or IPv4 addresses */
  ipv4: boolean;
}): Loop[] {
  const { deps, reconciler } = o;
  const { runner, logger } = deps;
  const trigger = (source: string, touch?: Touch): void =>
    touch ? reconciler.touch(source, touch) : reconciler.trigger(source);
  // the poll needs only the chains' inputs, not the whole desired state (5,000 peers every second)
  const masq = (): MasqSpec | null => o.desired.masq();
  const masq6 = o.ipv6 ? { masq6: () => o.desired.masq6() } : {};
  const pollOptions = { runner, logger, masq, ...masq6, intervalMs: 1_000, onDrift: trigger };
  // nftables mode: the tables, and only where the listing that stands in for a flooded monitor
  // cannot run
  const poll = (s: AbortSignal): Promise<void> =>
    o.netfilter.nftables ? pollNftTables(pollOptions, s) : pollChains(pollOptions, s);
  const monitors = (s: AbortSignal): Promise<void> =>
    runMonitors(
      {
        watch: deps.watch,
        logger,
        ctx: {
          underlay: o.choice.iface.name,
          ipv6: o.ipv6,
          ...(o.ipv4 ? {} : { ipv4: false }),
          ...(o.netfilter.nftables ? { nftables: true } : {}),
        },
        nft: o.netfilter.events,
        onEvent: trigger,
        poll,
        hush: o.hush,
        ...(o.opts.nftFlood ? { flood: o.opts.nftFlood } : {}),
      },
      s,
    );
  const monitorLoop: Loop = ['the kernel monitors', monitors];
  return o.netfilter.events ? [monitorLoop] : [monitorLoop, ['the chain poll', poll]];
}

/** A part of the daemon that runs until its signal aborts, named for the log. */
export type Loop = readonly [name: string, run: (s: AbortSignal) => Promise<void>];

/**
 * Runs loops until `signal` aborts; the first loop to fail stops the others and its error is
 * thrown. A loop that ends on its own before then is a failure too (LOOP_ENDED, naming it): each
 * runs until stopped, so the daemon must not go on without it, nor stop without saying why.
 */
export async function runTogether(signal: AbortSignal, loops: readonly Loop[]): Promise<void> {
  const ctl = childController(signal);
  const results = await Promise.allSettled(
    loops.map(([name, loop]) =>
      loop(ctl.signal)
        .then(() => {
          if (!ctl.signal.aborted)
            throw new TwillError('LOOP_ENDED', `${name} ended on its own; stopping`);
        })
        .finally(() => ctl.abort()),
    ),
  );
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed)
    throw failed.reason instanceof Error
      ? failed.reason
      : new TwillError('STORE_UNAVAILABLE', String(failed.reason));
}
