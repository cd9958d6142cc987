// The `twill` command's work: its command line parsed and run, with the
// environment its entry point hands it (main.ts from source, bundle.ts's start
// in the built command): the only place that reads that environment and
// installs signal handlers; it builds the dependencies as a plain object and
// hands them to the daemon.
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
import type { CodeCacheState } from './code-cache.ts';
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

/** How this process started, for the start's log line. */
export interface StartInfo {
  /** jemalloc was to be preloaded (allocator.ts) */
  readonly preloaded: boolean;
  /** the built command's code cache (loader.ts); none when run from source */
  readonly codeCache?: CodeCacheState;
}

async function runCommand(
  flags: RunFlags,
  env: NodeJS.ProcessEnv,
  start: StartInfo,
): Promise<number> {
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
  const { codeCache } = start;
  const version = packageVersion();
  const description = store.description;
  logger.info({ version, store: description, allocator, codeCache }, 'twill starting');
  // not a fault (twill runs as well, only its start is slower): said once, at info
  if (codeCache === 'rejected')
    logger.info(
      "the code cache built with twill is not used (it is another build's, or another Node or other V8 flags than the build's): twill compiles its code as it goes, and starts more slowly",
    );
  if (start.preloaded && allocator !== 'jemalloc')
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
  o: { env: NodeJS.ProcessEnv; start: StartInfo },
): Promise<number> {
  const { env } = o;
  switch (command) {
    case 'run':
      return runCommand(resolveRunFlags(given, env), env, o.start);
    case 'status':
      return statusCommand(resolveRunFlags(given, env), { json: given.get('json') === true, env });
    case 'doctor':
      return doctorCommand(given, env);
    default:
      throw new Error(`no such command: ${command}`);
  }
}

/**
 * Runs the command line `argv` (node, script, then twill's words) in `env`, the process's
 * environment; resolves with the exit code.
 */
export async function main(
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
  o: { codeCache?: CodeCacheState } = {},
): Promise<number> {
  // before anything is spawned: the tools twill runs do not inherit its allocator
  const preloaded = dropOwnPreload(env);
  const start = { preloaded, ...o };
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
        return await runCommandLine(outcome.command, outcome.given, { env, start });
      } catch (err) {
        // a bad flag value (FLAG_INVALID), or a store that cannot be opened
        process.stderr.write(`twill: ${describeError(err)}\n`);
        return EXIT_USAGE;
      }
  }
}
