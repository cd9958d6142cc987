// runDaemon in-process for tests: one node with a captured log, its latest
// state, and a stop that aborts it, waits for it and closes its store.
import { runDaemon, type DaemonState } from '../../src/daemon.ts';
import { run } from '../../src/exec/runner.ts';
import type { LeaseStore } from '../../src/lease/types.ts';
import { captureLog, type CapturedLog } from './log.ts';

export interface TestNode {
  state: () => DaemonState | undefined;
  log: CapturedLog;
  done: Promise<void>;
  stop: () => Promise<void>;
}

/** Starts a daemon on `store` that uses loopback as its interface and `publicIp` as its address. */
export function startTestDaemon(o: { store: LeaseStore; nodeName: string; publicIp: string; subnetFile: string; ipMasq?: boolean }): TestNode {
  const log = captureLog();
  let last: DaemonState | undefined;
  const ctl = new AbortController();
  const done = runDaemon(
    { store: o.store, runner: run, logger: log.logger },
    {
      nodeName: o.nodeName,
      iface: { iface: ['lo'], ifaceRegex: [], publicIp: o.publicIp },
      subnetFile: o.subnetFile,
      renewMarginMs: 3_600_000,
      ipMasq: o.ipMasq ?? false,
      onState: (s) => (last = s),
    },
    ctl.signal,
  );
  return {
    state: () => last,
    log,
    done,
    stop: async () => {
      ctl.abort();
      await done.catch(() => undefined);
      await o.store.close();
    },
  };
}
