// One plugin call, from the runtime's environment and stdin to the text on
// stdout and the exit code: VERSION first, then the environment, the network
// config and the version gate per verb, then the verb. Every failure becomes
// the CNI error JSON; the log line goes to logFile (or stderr).
import { answerVersion, parseNetConf } from './config.ts';
import { parseEnv, parseVerb, type Verb } from './env.ts';
import { CNI_CODES, asCniError, errorResult, fail } from './errors.ts';
import { createLog, type CniLog } from './log.ts';
import { atLeast, versionResult, type CniVersion } from './version.ts';
import { cmdAdd } from './verbs/add.ts';
import { cmdCheck } from './verbs/check.ts';
import type { PluginDeps, Request } from './verbs/common.ts';
import { cmdDel } from './verbs/del.ts';
import { cmdGc } from './verbs/gc.ts';
import { cmdStatus } from './verbs/status.ts';
import type { KernelDeps } from './kernel.ts';

export interface Invocation {
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly stdin: string;
}

export interface Outcome {
  readonly stdout: string;
  readonly exitCode: number;
}

type VerbImpl = (deps: PluginDeps, req: Request) => Promise<Record<string, unknown> | void>;

const IMPLS: Record<Exclude<Verb, 'VERSION'>, { impl: VerbImpl; since: CniVersion }> = {
  ADD: { impl: cmdAdd, since: '0.3.0' },
  DEL: { impl: cmdDel, since: '0.3.0' },
  CHECK: { impl: cmdCheck, since: '0.4.0' },
  STATUS: { impl: cmdStatus, since: '1.1.0' },
  GC: { impl: cmdGc, since: '1.1.0' },
};

/** The logFile the config names, read leniently so that even a bad config is logged there. */
function peekLogFile(stdin: string): string | undefined {
  try {
    const f = (JSON.parse(stdin) as { logFile?: unknown } | null)?.logFile;
    return typeof f === 'string' && f.startsWith('/') ? f : undefined;
  } catch {
    return undefined;
  }
}

async function dispatch(
  inv: Invocation,
  k: KernelDeps,
  log: CniLog,
): Promise<Record<string, unknown> | void> {
  const verb = parseVerb(inv.env);
  if (verb === 'VERSION') return versionResult();
  const env = parseEnv(inv.env);
  const conf = parseNetConf(inv.stdin);
  const { impl, since } = IMPLS[verb];
  if (!atLeast(conf.cniVersion, since))
    fail(
      CNI_CODES.incompatibleVersion,
      `${verb} needs cniVersion ${since} or later; the config says ${conf.cniVersion}`,
    );
  return impl({ ...k, log }, { env, conf });
}

export async function runPlugin(inv: Invocation, k: KernelDeps): Promise<Outcome> {
  const started = performance.now();
  const who = {
    verb: inv.env.CNI_COMMAND,
    containerId: inv.env.CNI_CONTAINERID,
    ifname: inv.env.CNI_IFNAME,
    netns: inv.env.CNI_NETNS,
    args: inv.env.CNI_ARGS,
  };
  const log = createLog({ file: peekLogFile(inv.stdin), base: { plugin: 'twill', ...who } });
  const ms = (): number => Math.round(performance.now() - started);
  try {
    const result = await dispatch(inv, k, log);
    log.info('done', { ms: ms() });
    return { stdout: result ? `${JSON.stringify(result)}\n` : '', exitCode: 0 };
  } catch (err) {
    const cniErr = asCniError(err);
    log.error('failed', { ms: ms(), code: cniErr.cniCode, err: cniErr.message });
    return {
      stdout: `${JSON.stringify(errorResult(answerVersion(inv.stdin), cniErr))}\n`,
      exitCode: 1,
    };
  }
}
