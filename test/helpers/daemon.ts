// runDaemon in-process for tests: one node in a network namespace of its own
// (its dataplane work runs there through nsenter, never on the host), with a
// captured log, its latest state, and a stop that aborts it, waits for it,
// closes its store and removes the namespace.
import { onTestFinished } from 'vitest';
import { runDaemon, type DaemonState } from '../../src/daemon.ts';
import type { LeaseStore } from '../../src/lease/types.ts';
import { captureLog, type CapturedLog } from './log.ts';
import { nsFamilyForwarding } from './sysctl.ts';
import { NetnsLab, nsFeeder, nsRunner, nsWatch } from '../../lab/kit/netns.ts';

export interface TestNode {
  state: () => DaemonState | undefined;
  log: CapturedLog;
  done: Promise<void>;
  stop: () => Promise<void>;
  /** the node's namespace */
  ns: string;
}

let counter = 0;

/**
 * Starts a daemon on `store` in a fresh namespace (or in `ns`, which the
 * caller owns), using loopback (or `iface`) as its interface and `publicIp`
 * (`publicIpv6`) as its address. Forwarding is kept for the families the
 * network config runs. Call it inside a test: it is stopped when the test
 * finishes.
 */
export async function startTestDaemon(o: {
  store: LeaseStore;
  nodeName: string;
  /** --public-ip; none on an IPv6-only node, where it is an error */
  publicIp?: string;
  /** --public-ipv6 */
  publicIpv6?: string;
  /** --iface (default: lo); an IPv6-only node needs one with a global IPv6 address */
  iface?: string[];
  subnetFile: string;
  ipMasq?: boolean;
  ns?: string;
}): Promise<TestNode> {
  const lab = new NetnsLab();
  const ns = o.ns ?? (await lab.add(`d${++counter}`));
  const log = captureLog();
  let last: DaemonState | undefined;
  const ctl = new AbortController();
  const done = runDaemon(
    {
      store: o.store,
      runner: nsRunner(ns),
      watch: nsWatch(ns),
      feed: nsFeeder(ns),
      logger: log.logger,
      ensureForwarding: nsFamilyForwarding(ns),
      bridgeNetfilterProblem: async () => undefined,
    },
    {
      nodeName: o.nodeName,
      iface: {
        iface: o.iface ?? ['lo'],
        ifaceRegex: [],
        publicIp: o.publicIp,
        ...(o.publicIpv6 === undefined ? {} : { publicIpv6: o.publicIpv6 }),
      },
      subnetFile: o.subnetFile,
      renewMarginMs: 3_600_000,
      ipMasq: o.ipMasq ?? false,
      resyncMs: 5_000,
      onState: (s) => (last = s),
    },
    ctl.signal,
  );
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopped ??= (async () => {
      ctl.abort();
      await done.catch(() => undefined);
      await o.store.close();
      await lab.destroy();
    })());
  onTestFinished(stop);
  return { state: () => last, log, done, ns, stop };
}
