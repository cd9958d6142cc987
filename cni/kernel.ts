// The plugin's kernel work, through the project's process runner:
// `ip -json -batch -` in the plugin's own (host) netns, the same inside the
// pod's netns through `nsenter --net=<CNI_NETNS>`, the kind of an existing
// link (and its addresses), the names of the links in the plugin's netns
// (read from /proc/self/net/dev, no process), STATUS's throwaway bridge,
// and link deletion that treats "already gone" as done. ADD's batches run in
// processes started before their lines are known and fed as the call goes
// (openHostSession, which also looks at an existing bridge, and
// openPodSession), started through the runner's openFed.
// Forwarding for the gateway bridge (both families) is
// src/dataplane/sysctl.ts's.
import { readFileSync } from 'node:fs';
import { failedLines } from '../src/exec/batch-errors.ts';
import { CommandError, isNoDevice, openFed, type Feeder, type Runner } from '../src/exec/runner.ts';
import { POD_IPV6_PRELUDE, batchWord, jsonOutputs } from './ip-batch.ts';

export interface KernelDeps {
  readonly runner: Runner;
  readonly signal: AbortSignal;
  /** how ADD's live batches start their process (default: the runner's openFed) */
  readonly openFed?: Feeder;
}

const TIMEOUT_MS = 10_000;

function batchInput(lines: readonly string[]): string {
  return `${lines.join('\n')}\n`;
}

/** Runs a batch in the host netns; returns what each show command printed. */
export async function hostBatch(k: KernelDeps, lines: readonly string[]): Promise<unknown[][]> {
  const { stdout } = await k.runner('ip', ['-json', '-batch', '-'], {
    input: batchInput(lines),
    signal: k.signal,
    timeoutMs: TIMEOUT_MS,
  });
  return jsonOutputs(stdout);
}

/**
 * Runs a batch inside the netns at `netns` (a path). With `ipv6Ifname` (an ADD giving IPv6), the
 * same one process first prepares IPv6 in that netns for that interface (POD_IPV6_PRELUDE).
 */
export async function podBatch(
  k: KernelDeps,
  netns: string,
  lines: readonly string[],
  o: { ipv6Ifname?: string | undefined } = {},
): Promise<unknown[][]> {
  const args =
    o.ipv6Ifname === undefined
      ? [`--net=${netns}`, 'ip', '-json', '-batch', '-']
      : [`--net=${netns}`, '/bin/sh', '-c', POD_IPV6_PRELUDE, 'sh', batchWord(o.ipv6Ifname)];
  const { stdout } = await k.runner('nsenter', args, {
    input: batchInput(lines),
    signal: k.signal,
    timeoutMs: TIMEOUT_MS,
  });
  return jsonOutputs(stdout);
}

/**
 * The links of the plugin's own netns, by name: /proc/self/net/dev follows the netns of the
 * process.
 */
export async function linkNames(): Promise<Set<string>> {
  const text = readFileSync('/proc/self/net/dev', 'utf8');
  const names = text
    .split('\n')
    .slice(2)
    .map((l) => l.split(':')[0]?.trim() ?? '');
  return new Set(names.filter((n) => n !== ''));
}

/** What `ip -d link show` says a link is. */
export interface LinkKind {
  /**
   * linkinfo.info_kind ("bridge", "veth", …); undefined for devices without one (lo, physical NICs)
   */
  readonly kind: string | undefined;
  /** link_type ("ether", "loopback", …) */
  readonly linkType: string | undefined;
}

/** The kind of host link `dev`, or undefined when there is no such link. */
export async function linkKind(k: KernelDeps, dev: string): Promise<LinkKind | undefined> {
  try {
    const { stdout } = await k.runner('ip', ['-d', '-json', 'link', 'show', 'dev', dev], {
      signal: k.signal,
      timeoutMs: TIMEOUT_MS,
    });
    const [link] = JSON.parse(stdout) as Parameters<typeof kindOf>[0][];
    return link ? kindOf(link) : undefined;
  } catch (err) {
    if (isNoDevice(err)) return undefined;
    throw err;
  }
}

/** What a `-json` link show says the link is. */
function kindOf(link: { linkinfo?: { info_kind?: string }; link_type?: string }): LinkKind {
  return { kind: link.linkinfo?.info_kind, linkType: link.link_type };
}

/**
 * An `ip -json -batch -` started before the call knows all its lines, and fed as it goes: ip runs
 * each line as it arrives and prints a show command's output at once. Until `finish`, it has been
 * sent only the lines given when it was opened (a read-only show, or none), so closing it instead
 * changes nothing.
 */
export interface LiveBatch {
  /**
   * Sends `lines` and ends the input: what each of their show commands printed. A failure is a
   * CommandError whose "Command failed -:<n>" numbers count `lines` alone, as hostBatch's do.
   */
  finish(lines: readonly string[]): Promise<unknown[][]>;
  /** Ends the input with nothing more sent (nothing when it has ended already). */
  close(): Promise<void>;
}

/** ADD's host side: a LiveBatch that was first asked to show the bridge. */
export interface HostSession extends LiveBatch {
  /** the bridge's kind; undefined when there is no such link (ip has ended then) */
  readonly bridge: Promise<LinkKind | undefined>;
}

/** `stderr` with each "Command failed -:<n>" counted without the `skip` lines sent first. */
function renumbered(stderr: string, skip: number): string {
  return stderr.replace(
    /^(\s*Command failed -:)(\d+)/gm,
    (_m, head: string, n: string) => `${head}${Number(n) - skip}`,
  );
}

interface Opened extends LiveBatch {
  /** the first line ip printed; undefined when it ended first (then `failure` says how) */
  readonly firstLine: Promise<string | undefined>;
  readonly failure: () => Promise<CommandError>;
}

function openBatch(k: KernelDeps, command: readonly string[], first: readonly string[]): Opened {
  const [file = '', ...args] = command;
  // stdout until its first line (the runner keeps the whole of it)
  let head: string | undefined = '';
  let resolveFirst: (line: string | undefined) => void = () => undefined;
  const firstLine = new Promise<string | undefined>((resolve) => (resolveFirst = resolve));
  // the usual time limit once its input ends; until then openFed's idle limit (60 s), as the call
  // may wait on the IP store's lock meanwhile
  const p = (k.openFed ?? openFed)(file, args, {
    signal: k.signal,
    timeoutMs: TIMEOUT_MS,
    onStdout: (text) => {
      if (head === undefined) return;
      head += text;
      const nl = head.indexOf('\n');
      if (nl < 0) return;
      resolveFirst(head.slice(0, nl));
      head = undefined;
    },
  });
  void p.done.then(
    () => resolveFirst(undefined),
    () => resolveFirst(undefined),
  );
  if (first.length > 0) p.write(batchInput(first));
  // what the first lines printed is not the caller's: one output line per show sent first
  const skipOutputs = first.filter((l) => l.startsWith('link show ')).length;
  const end = async (lines: readonly string[]): Promise<string> => {
    try {
      const out = await p.end(lines.length === 0 ? undefined : batchInput(lines));
      return out.stdout.split('\n').slice(skipOutputs).join('\n');
    } catch (err) {
      if (!(err instanceof CommandError)) throw err;
      throw new CommandError({
        command: err.command,
        exitCode: err.exitCode,
        stderr: renumbered(err.stderr, first.length),
        reason: err.reason,
      });
    }
  };
  return {
    firstLine,
    failure: () =>
      p.done.then(
        ({ stderr }) =>
          new CommandError({ command, exitCode: 0, stderr, reason: 'ended without output' }),
        (err: unknown) => {
          if (err instanceof CommandError) return err;
          throw err;
        },
      ),
    finish: async (lines) => jsonOutputs(await end(lines)),
    close: async () => {
      await end([]).catch(() => undefined);
    },
  };
}

/**
 * ADD's host side in one process: `ip -d -json -batch -` shows the bridge, and waits (while the
 * call decides whether to go on and reserves its address) for the host batch.
 */
export function openHostSession(k: KernelDeps, bridge: string): HostSession {
  const b = openBatch(
    k,
    ['ip', '-d', '-json', '-batch', '-'],
    [`link show dev ${batchWord(bridge)}`],
  );
  const shown = b.firstLine.then(async (line) => {
    if (line !== undefined) {
      const [link] = JSON.parse(line) as Parameters<typeof kindOf>[0][];
      return link ? kindOf(link) : undefined;
    }
    const err = await b.failure();
    if (err.exitCode !== undefined && isNoDevice(err)) return undefined;
    throw err;
  });
  // a caller that stops before looking at the bridge must not leave a rejection unhandled
  shown.catch(() => undefined);
  return { bridge: shown, finish: (lines) => b.finish(lines), close: () => b.close() };
}

/**
 * ADD's pod side of an IPv4-only node, started early: `nsenter --net=<netns> ip -json -batch -`,
 * waiting (while the host side runs) for the pod batch. (An ADD giving IPv6 prepares the pod's
 * netns first, once its interface exists: podBatch.)
 */
export function openPodSession(k: KernelDeps, netns: string): LiveBatch {
  const b = openBatch(k, ['nsenter', `--net=${netns}`, 'ip', '-json', '-batch', '-'], []);
  return { finish: (lines) => b.finish(lines), close: () => b.close() };
}

/** A host link's kind and its IPv4 and IPv6 addresses. */
export interface LinkAddrs extends LinkKind {
  readonly inet: readonly { readonly local: string; readonly prefixlen: number }[];
  readonly inet6: readonly { readonly local: string; readonly prefixlen: number }[];
}

/**
 * Kind and IPv4 addresses of host link `dev` (one `ip -d -json addr show`), or undefined when there
 * is no such link.
 */
export async function linkAddrs(k: KernelDeps, dev: string): Promise<LinkAddrs | undefined> {
  type Shown = {
    linkinfo?: { info_kind?: string };
    link_type?: string;
    addr_info?: { family?: string; local?: string; prefixlen?: number }[];
  };
  try {
    const { stdout } = await k.runner('ip', ['-d', '-json', 'addr', 'show', 'dev', dev], {
      signal: k.signal,
      timeoutMs: TIMEOUT_MS,
    });
    const [link] = JSON.parse(stdout) as Shown[];
    if (!link) return undefined;
    const family = (f: string) =>
      (link.addr_info ?? []).flatMap((a) =>
        a.family === f && typeof a.local === 'string'
          ? [{ local: a.local, prefixlen: Number(a.prefixlen) }]
          : [],
      );
    return {
      kind: link.linkinfo?.info_kind,
      linkType: link.link_type,
      inet: family('inet'),
      inet6: family('inet6'),
    };
  } catch (err) {
    if (isNoDevice(err)) return undefined;
    throw err;
  }
}

/**
 * Creates a bridge named `name` and deletes it again, in one `ip -batch`: whether a bridge can be
 * created here.
 */
export async function probeBridge(k: KernelDeps, name: string): Promise<void> {
  const dev = batchWord(name);
  await k.runner('ip', ['-batch', '-'], {
    input: batchInput([`link add name ${dev} type bridge`, `link del dev ${dev}`]),
    signal: k.signal,
    timeoutMs: TIMEOUT_MS,
  });
}

/** Deletes a host link (its veth peer goes with it); false when it was already gone. */
export async function deleteLink(k: KernelDeps, dev: string): Promise<boolean> {
  try {
    await k.runner('ip', ['link', 'del', 'dev', dev], { signal: k.signal, timeoutMs: TIMEOUT_MS });
    return true;
  } catch (err) {
    if (isNoDevice(err)) return false;
    throw err;
  }
}

/**
 * Deletes host links in one batch (-force: every line runs). Returns the
 * links that could not be deleted with why; links already gone count as
 * deleted. When `ip` fails without saying which lines failed, every link is
 * reported as not deleted.
 */
export async function deleteLinks(
  k: KernelDeps,
  devs: readonly string[],
): Promise<Map<string, string>> {
  const failed = new Map<string, string>();
  if (devs.length === 0) return failed;
  const lines = devs.map((d) => `link del dev ${batchWord(d)}`);
  try {
    await k.runner('ip', ['-force', '-batch', '-'], {
      input: batchInput(lines),
      signal: k.signal,
      timeoutMs: TIMEOUT_MS,
    });
  } catch (err) {
    if (!(err instanceof CommandError)) throw err;
    const reports = failedLines(err.stderr);
    if (reports.size === 0) for (const d of devs) failed.set(d, err.message);
    for (const [line, why] of reports) {
      const dev = devs[line - 1];
      if (dev !== undefined && !/Cannot find device|does not exist/.test(why)) failed.set(dev, why);
    }
  }
  return failed;
}
