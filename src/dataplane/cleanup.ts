// cleanup: `twill run --cleanup`, the uninstall step that removes twill's kernel state from this
// node and nothing else (docs/design.md, rule 5): twill's chains TWILL-POSTRTG and TWILL-FWD and
// the jumps to them from POSTROUTING and FORWARD, in iptables and ip6tables; twill's nftables
// tables (`ip twill-ipv4`, `ip6 twill-ipv6`); twill's vxlan devices (vxlan devices named twill.*
// and twill-v6.*); the main-table routes carrying twill's protocol, in both families. The CNI
// bridge, the pods' veths and subnet.env are left alone: pods are the kubelet's to remove.
//
// It reads what exists first (a fixed set of reads in parallel, rule 4) and deletes exactly that,
// so a second run finds nothing and runs nothing. A tool that is not installed holds nothing of
// ours (a node in nftables mode may have no iptables; one in iptables mode may have no nft). Each
// read stands alone: one that fails (nft installed but no nf_tables in the kernel, a kernel
// without IPv6) is reported and the rest is still removed (rule 11). What to run is pure
// (cleanup-plan.ts); this module does the reads and writes through the runner (rule 3).
import { describeError } from '../errors.ts';
import { parseBatchErrors } from '../exec/batch-errors.ts';
import { CommandError, isMissingTool, runJson, type Runner } from '../exec/runner.ts';
import type { Logger } from '../log.ts';
import {
  cleanupPlan,
  parseOwnedRoutes,
  type CleanupStep,
  type FamilyChains,
  type OwnedRoute,
  type OwnedState,
} from './cleanup-plan.ts';
import { ROUTE_PROTOCOL, type NftTableName } from './model.ts';
import { parseNftTableNames } from './nft-parse.ts';
import { parseLinks, readOwnChains } from './observe.ts';

/** A read whose tool is not installed counts as nothing of ours there. */
async function unlessMissing<T>(read: Promise<T>, none: T): Promise<T> {
  try {
    return await read;
  } catch (err) {
    if (isMissingTool(err)) return none;
    throw err;
  }
}

/** What the reads found, and the reads that failed ("<what>: <why>"), in a fixed order. */
export interface OwnedRead {
  readonly state: OwnedState;
  readonly unread: readonly string[];
}

/**
 * Reads what this node holds of twill's, every read in parallel and on its own: a failed one is
 * reported in `unread` and holds nothing in `state`; the others count.
 */
export async function readOwned(runner: Runner, signal: AbortSignal): Promise<OwnedRead> {
  const opts = { signal, timeoutMs: 30_000 };
  const unread: (string | undefined)[] = [];
  const each = <T>(slot: number, what: string, read: Promise<T>, none: T): Promise<T> =>
    read.catch((err: unknown) => {
      if (signal.aborted) throw err;
      unread[slot] = `${what}: ${describeError(err)}`;
      return none;
    });
  const routes = (family: 4 | 6): Promise<OwnedRoute[]> =>
    runJson(
      runner,
      'ip',
      [
        ...(family === 6 ? ['-6'] : []),
        ...['-json', 'route', 'show', 'table', 'main', 'proto', String(ROUTE_PROTOCOL)],
      ],
      opts,
    ).then((j) => parseOwnedRoutes(j, family));
  const chains = (ipv6: boolean): Promise<FamilyChains[]> =>
    readOwnChains(runner, { ipv6, policy: 'missing-tool-none' }, signal).then((c) => [
      { ipv6, ...c },
    ]);
  const nftTables = (): Promise<NftTableName[]> =>
    unlessMissing(
      runner('nft', ['list', 'tables'], opts).then((r) => parseNftTableNames(r.stdout)),
      [],
    );
  const [links, routes4, routes6, chains4, chains6, nft] = await Promise.all([
    each(0, 'devices', runJson(runner, 'ip', ['-d', '-json', 'link', 'show'], opts), []),
    each(1, 'IPv4 routes', routes(4), []),
    each(2, 'IPv6 routes', routes(6), []),
    each(3, 'iptables chains', chains(false), []),
    each(4, 'ip6tables chains', chains(true), []),
    each(5, 'nftables tables', nftTables(), []),
  ]);
  return {
    state: {
      links: parseLinks(links).map((l) => l.name),
      routes: [...routes4, ...routes6],
      chains: [...chains4, ...chains6],
      nftTables: nft,
    },
    unread: unread.filter((u) => u !== undefined),
  };
}

export interface CleanupResult {
  /** what was removed, as logged */
  readonly removed: readonly string[];
  /** what could not be removed, with why */
  readonly failures: readonly string[];
  /** the reads that failed, with why (what they would have found is left in place) */
  readonly unread: readonly string[];
}

/** Runs one step; what it removed and what failed (an `ip -batch` line by line). */
async function runStep(
  runner: Runner,
  step: CleanupStep,
  signal: AbortSignal,
): Promise<Pick<CleanupResult, 'removed' | 'failures'>> {
  try {
    await runner(step.file, step.args, { signal, input: step.input, timeoutMs: 60_000 });
    return { removed: step.removes, failures: [] };
  } catch (err) {
    if (signal.aborted) throw err;
    const stderr = err instanceof CommandError ? err.stderr : '';
    const lines = step.file === 'ip' ? parseBatchErrors(stderr).failures : [];
    if (lines.length === 0)
      return { removed: [], failures: step.removes.map((r) => `${r}: ${describeError(err)}`) };
    const failed = new Map(lines.map((f) => [f.line - 1, f.reason || 'failed']));
    return {
      removed: step.removes.filter((_, i) => !failed.has(i)),
      failures: [...failed].map(([i, why]) => `${step.removes[i] ?? `line ${i + 1}`}: ${why}`),
    };
  }
}

/**
 * Removes twill's kernel state from this node: reads it, then deletes exactly what was read,
 * logging each removal, each failure and each read that failed. Nothing there: nothing runs but
 * the reads.
 */
export async function cleanup(
  runner: Runner,
  logger: Logger,
  signal: AbortSignal,
): Promise<CleanupResult> {
  const { state, unread } = await readOwned(runner, signal);
  for (const why of unread) logger.error({ unread: why }, `could not read ${why}`);
  const removed: string[] = [];
  const failures: string[] = [];
  for (const step of cleanupPlan(state)) {
    const r = await runStep(runner, step, signal);
    for (const what of r.removed) logger.info({ removed: what }, `removed ${what}`);
    for (const why of r.failures) logger.error({ failed: why }, `could not remove ${why}`);
    removed.push(...r.removed);
    failures.push(...r.failures);
  }
  return { removed, failures, unread };
}
