// The plugin's kernel work, all through the project's single process runner:
// `ip -json -batch -` in the plugin's own (host) netns, the same inside the
// pod's netns through `nsenter --net=<CNI_NETNS>`, the kind of an existing
// link (and its addresses), the names of the links in the plugin's netns
// (read from /proc/self/net/dev, no process), STATUS's throwaway bridge,
// and link deletion that treats "already gone" as done. Forwarding for the
// gateway bridge (both families) is src/dataplane/sysctl.ts's.
import { readFile } from 'node:fs/promises';
import { failedLines } from '../src/exec/batch-errors.ts';
import { CommandError, isNoDevice, type Runner } from '../src/exec/runner.ts';
import { POD_IPV6_PRELUDE, batchWord, jsonOutputs } from './ip-batch.ts';

export interface KernelDeps {
  readonly runner: Runner;
  readonly signal: AbortSignal;
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
  const text = await readFile('/proc/self/net/dev', 'utf8');
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
    const [link] = JSON.parse(stdout) as {
      linkinfo?: { info_kind?: string };
      link_type?: string;
    }[];
    return link ? { kind: link.linkinfo?.info_kind, linkType: link.link_type } : undefined;
  } catch (err) {
    if (isNoDevice(err)) return undefined;
    throw err;
  }
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
