#!/usr/bin/env -S MALLOC_ARENA_MAX=2 node --max-semi-space-size=1 --optimize-for-size --max-opt=1
// The `twill` command: the only place that reads process.env and
// process.argv and installs signal handlers. It builds the dependencies as a
// plain object and hands them to the daemon.
// The first line is how the command runs (the package's bin, the image's and
// the lab's symlinks all keep it), every choice measured in
// docs/benchmarks.md: V8's young generation held to 1 MiB semi-spaces and V8
// told to give memory back (--optimize-for-size); no optimizing compilers
// (--max-opt=1, no Maglev or TurboFan: JavaScript runs in the interpreter
// and Sparkplug's baseline code, 12 MiB less at 5,000 peers, with event
// latency and cold convergence unchanged, since twill's time goes to the
// kernel's tools); and
// glibc's malloc held to two arenas (it makes one per thread that contends,
// up to 8 per core, and keeps what each one grew to: churn left the settled
// RSS 10 MiB higher with the default). Where twill is deployed (the image,
// the labs' units and commands) it runs with jemalloc instead, preloaded by
// the environment allocator.ts's ALLOCATOR_ENV names (the first line has no
// room for it: kernels before 5.1 cut it at 127 bytes).
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { runDaemon } from '../daemon.ts';
import { describeError, TwillError } from '../errors.ts';
import { ensureForwarding, bridgeNetfilterProblem } from '../dataplane/sysctl.ts';
import { openFed, run, watchLines } from '../exec/runner.ts';
import { createLogger } from '../log.ts';
import { gatherStatus } from '../status/inputs.ts';
import { renderStatus } from '../status/text.ts';
import { buildStatus } from '../status/report.ts';
import { parseCommandLine, type GivenOptions, type ProgramSpec } from './argv.ts';
import { ifaceRequest, resolveRunFlags, runFlagOptions, type RunFlags } from './flags.ts';
import { nodeNameOf, openStore } from './open-store.ts';
import { currentAllocator, dropOwnPreload, OWN_PRELOAD } from './allocator.ts';
import { DOCTOR_COMMAND, doctorCommand } from './doctor-cmd.ts';
import { cleanupCommand } from './cleanup-cmd.ts';

/** Exit codes: 0 clean stop, 1 runtime failure, 2 bad flags or config. */
const EXIT_USAGE = 2;
const USAGE_CODES = new Set([
  'FLAG_INVALID',
  'CONFIG_INVALID',
  'CONFIG_MISSING',
  'CONFIG_UNSUPPORTED',
  'IFACE_NOT_FOUND',
]);

function packageVersion(): string {
  for (let dir = import.meta.dirname; dir !== dirname(dir); dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (pkg.name === 'twill') return pkg.version ?? 'unknown';
    } catch {
      // keep walking up
    }
  }
  return 'unknown';
}

/**
 * `twill status`: exit 0 when the kernel matches the desired state, 1 when it does not (or the
 * views cannot be read).
 */
async function statusCommand(
  flags: RunFlags,
  o: { json: boolean; env: NodeJS.ProcessEnv },
): Promise<number> {
  const { json } = o;
  const store = await openStore(flags, { nodeName: nodeNameOf(flags, o.env) });
  try {
    const input = await gatherStatus({
      store,
      runner: run,
      iface: ifaceRequest(flags),
      subnetFile: flags.subnetFile,
      cniBridge: flags.cniBridge,
      healthzPort: flags.healthzPort,
      signal: AbortSignal.timeout(20_000),
    });
    const report = buildStatus(input);
    process.stdout.write(json ? `${JSON.stringify(report, null, 2)}\n` : renderStatus(report));
    return report.inSync ? 0 : 1;
  } finally {
    await store.close();
  }
}

async function runCommand(flags: RunFlags, env: NodeJS.ProcessEnv): Promise<number> {
  const nodeName = nodeNameOf(flags, env);
  // uninstalling: no store, no daemon
  if (flags.cleanup) return cleanupCommand(flags, { nodeName });
  // the etcd password is scrubbed from every log line, whatever carries it
  const logger = createLogger({
    level: flags.logLevel,
    node: nodeName,
    secrets: [flags.etcdPassword],
  });
  const store = await openStore(flags, { nodeName });
  const root = new AbortController();
  const stop = (sig: string): void => {
    if (root.signal.aborted) process.exit(1);
    logger.info({ signal: sig }, 'shutting down; the lease is kept for the next start');
    root.abort();
  };
  // `on`, not `once`: a second signal while shutting down must still reach stop(), which then exits
  // at once
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  const allocator = currentAllocator();
  logger.info({ version: packageVersion(), store: store.description, allocator }, 'twill starting');
  if (preloaded && allocator !== 'jemalloc')
    logger.warn(
      `${OWN_PRELOAD} could not be loaded (install jemalloc: Debian's and Ubuntu's libjemalloc2): twill runs with glibc's malloc, which keeps a few MiB more after lease churn`,
    );
  try {
    await runDaemon(
      {
        store,
        runner: run,
        watch: watchLines,
        feed: openFed,
        logger,
        ensureForwarding: (o) => ensureForwarding(flags.procSysNet, o),
        bridgeNetfilterProblem: (o) => bridgeNetfilterProblem(flags.procSysNet, o),
      },
      {
        nodeName,
        iface: ifaceRequest(flags),
        subnetFile: flags.subnetFile,
        renewMarginMs: flags.subnetLeaseRenewMargin * 60_000,
        ipMasq: flags.ipMasq,
        cniBridge: flags.cniBridge,
        resyncMs: flags.iptablesResync * 1000,
        version: packageVersion(),
        ...(flags.healthzPort > 0
          ? { healthz: { ip: flags.healthzIp, port: flags.healthzPort } }
          : {}),
      },
      root.signal,
    );
    return 0;
  } catch (err) {
    if (root.signal.aborted) return 0; // stopped while still starting: not a failure
    const code = err instanceof TwillError ? err.code : undefined;
    logger.fatal({ code }, describeError(err));
    return code !== undefined && USAGE_CODES.has(code) ? EXIT_USAGE : 1;
  } finally {
    await store.close();
  }
}

const PROGRAM: ProgramSpec = {
  name: 'twill',
  description: 'twill: a per-node overlay network daemon for Kubernetes, in the spirit of flannel',
  commands: [
    {
      name: 'run',
      description:
        "lease this node's pod subnet, write subnet.env, track peers and program the dataplane",
      options: runFlagOptions({ run: true }),
    },
    {
      name: 'status',
      description:
        'this node: our lease, every peer and whether the kernel has its entries, the desired-vs-actual diff, the masquerade (chains, or nft tables in nftables mode)',
      options: [
        ...runFlagOptions({ run: false }),
        { name: 'json', help: 'print the report as JSON' },
      ],
    },
    DOCTOR_COMMAND,
  ],
};

function runCommandLine(
  command: string,
  given: GivenOptions,
  env: NodeJS.ProcessEnv,
): Promise<number> {
  switch (command) {
    case 'run':
      return runCommand(resolveRunFlags(given, env), env);
    case 'status':
      return statusCommand(resolveRunFlags(given, env), { json: given.get('json') === true, env });
    case 'doctor':
      return doctorCommand(given, env);
    default:
      throw new Error(`no such command: ${command}`);
  }
}

async function main(argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const outcome = parseCommandLine(PROGRAM, argv.slice(2));
  switch (outcome.kind) {
    case 'help':
      process.stdout.write(outcome.text);
      return 0;
    case 'version':
      process.stdout.write(`${packageVersion()}\n`);
      return 0;
    case 'error':
      // the mistake, then the help, as commander printed them
      process.stderr.write(
        outcome.message === undefined
          ? outcome.help
          : `error: ${outcome.message}\n\n${outcome.help}`,
      );
      return EXIT_USAGE;
    case 'command':
      try {
        return await runCommandLine(outcome.command, outcome.given, env);
      } catch (err) {
        // a bad flag value (FLAG_INVALID), or a store that cannot be opened
        process.stderr.write(`twill: ${describeError(err)}\n`);
        return EXIT_USAGE;
      }
  }
}

// before anything is spawned: the tools twill runs do not inherit its allocator
const preloaded = dropOwnPreload(process.env);
process.exit(await main(process.argv, process.env));
