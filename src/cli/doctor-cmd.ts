// `twill doctor`: checks this node's kernel settings, iptables (or in
// nftables mode twill's nft tables), MTUs, subnet.env, lease and leftovers,
// prints one verdict per check with a fix, and exits 1 when any check fails.
// It takes `twill run`'s flags (the same table, so the same store and files
// are looked at) plus --json and --bridge; an unreachable store only skips
// the checks that need it.
import { readFile } from 'node:fs/promises';
import { runChecks, doctorExitCode } from '../doctor/checks.ts';
import type { StoreFact } from '../doctor/facts.ts';
import { gather, readLeaseStore } from '../doctor/gather.ts';
import { renderJson, renderTable } from '../doctor/print.ts';
import { run } from '../exec/runner.ts';
import type { CommandSpec, GivenOptions } from './argv.ts';
import { ifaceRequest, resolveRunFlags, runFlagOptions, type RunFlags } from './flags.ts';
import { nodeNameOf, openStore } from './open-store.ts';

/** The bridge looked at without --bridge. */
const DEFAULT_BRIDGE = 'cni0';

/** How long the store may take to answer (each etcd call, and the whole read). */
const STORE_TIMEOUT_MS = 3_000;

async function readStore(
  flags: RunFlags,
  o: { signal: AbortSignal; nodeName: string },
): Promise<StoreFact> {
  const { signal } = o;
  const store = await openStore(flags, { nodeName: o.nodeName, callTimeoutMs: STORE_TIMEOUT_MS });
  try {
    return await readLeaseStore(store, signal, STORE_TIMEOUT_MS);
  } finally {
    await store.close();
  }
}

async function doctor(
  flags: RunFlags,
  o: { json: boolean; bridge: string; nodeName: string },
  out: (text: string) => void,
): Promise<number> {
  const signal = AbortSignal.timeout(60_000);
  const facts = await gather(
    {
      runner: run,
      readText: (path) => readFile(path, 'utf8'),
      readStore: (s) => readStore(flags, { signal: s, nodeName: o.nodeName }),
    },
    {
      iface: ifaceRequest(flags),
      subnetFile: flags.subnetFile,
      bridge: o.bridge,
      procSysNet: flags.procSysNet,
    },
    signal,
  );
  const results = runChecks(facts);
  out(o.json ? renderJson(results) : renderTable(results));
  return doctorExitCode(results);
}

/** `twill doctor`'s options: --json, --bridge and `twill run`'s flags but the run-only ones. */
export const DOCTOR_COMMAND: CommandSpec = {
  name: 'doctor',
  description:
    'check this node for what breaks overlays (sysctls, iptables, nftables, MTU, subnet.env vs lease, stale routes, leftovers); exit 1 when a check fails',
  options: [
    { name: 'json', help: 'print the verdicts as JSON' },
    { name: 'bridge', arg: 'name', help: 'the CNI bridge to inspect', default: DEFAULT_BRIDGE },
    ...runFlagOptions({ run: false }),
  ],
};

/** Runs `twill doctor` with the options given on its command line; its exit code. */
export async function doctorCommand(given: GivenOptions, env: NodeJS.ProcessEnv): Promise<number> {
  const flags = resolveRunFlags(given, env);
  const bridge = given.get('bridge');
  return doctor(
    flags,
    {
      json: given.get('json') === true,
      bridge: typeof bridge === 'string' ? bridge : DEFAULT_BRIDGE,
      nodeName: nodeNameOf(flags, env),
    },
    (text) => process.stdout.write(text),
  );
}
