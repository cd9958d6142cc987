// The pure part of `twill run --cleanup` (cleanup.ts reads and runs it): what this node holds of
// twill's, as read, turned into the processes that remove exactly that and nothing else
// (docs/design.md, rule 5), one per tool and family: iptables-restore --noflush and its ip6tables
// twin (the jumps first, then the chains), one `nft -f -` transaction for twill's tables, one
// `ip -force -batch -` (routes first, then devices).
import { diffChain, noChainSpecs, noChainSpecs6 } from './masq.ts';
import { ROUTE_PROTOCOL, type NftTableName, type Op } from './model.ts';
import { nftRemoveText, nftTableLabel } from './nft.ts';
import type { OwnChains } from './observe.ts';
import { renderRestore } from './render.ts';

/** A main-table route with twill's protocol, as much of it as names it for a delete. */
export interface OwnedRoute {
  readonly family: 4 | 6;
  /** as `ip -json` prints it ("10.244.1.0/24", "fd00::/64", "default") */
  readonly dst: string;
  readonly via?: string;
  readonly dev?: string;
  readonly metric?: number;
}

/** twill's chains in one tool, as a pass reads them. */
export interface FamilyChains extends OwnChains {
  readonly ipv6: boolean;
}

/** What this node holds of twill's, as read. */
export interface OwnedState {
  /** vxlan devices named twill.* or twill-v6.* */
  readonly links: readonly string[];
  readonly routes: readonly OwnedRoute[];
  /** one entry per tool read (iptables, ip6tables); a tool not installed holds no chain */
  readonly chains: readonly FamilyChains[];
  /** those of twill's nftables tables that exist */
  readonly nftTables: readonly NftTableName[];
}

/** One process of the plan: its command, its input, and what each of its lines removes. */
export interface CleanupStep {
  readonly file: string;
  readonly args: readonly string[];
  readonly input: string;
  /**
   * what the step removes, for the log; for `ip -batch`, one per input line (so a failed line maps
   * back to its object)
   */
  readonly removes: readonly string[];
}

const text = (v: unknown): string | undefined =>
  typeof v === 'string' && v !== '' ? v : undefined;

/** `ip [-6] -json route show table main proto 151` → the routes, of family `family`. */
export function parseOwnedRoutes(json: unknown, family: 4 | 6): OwnedRoute[] {
  const rows = Array.isArray(json) ? (json as Record<string, unknown>[]) : [];
  return rows.flatMap((r) => {
    const dst = text(r.dst);
    if (dst === undefined) return [];
    const via = text(r.gateway);
    const dev = text(r.dev);
    const metric = typeof r.metric === 'number' ? r.metric : undefined;
    return [
      {
        family,
        dst,
        ...(via === undefined ? {} : { via }),
        ...(dev === undefined ? {} : { dev }),
        ...(metric === undefined ? {} : { metric }),
      },
    ];
  });
}

/**
 * The `ip -batch` line that deletes one route. The protocol is part of the match (the kernel
 * deletes no route of another protocol), and "default" is written as the family's /0, since a
 * batch line has no `-6`.
 */
export function routeDeleteLine(r: OwnedRoute): string {
  const dst = r.dst === 'default' ? (r.family === 6 ? '::/0' : '0.0.0.0/0') : r.dst;
  const via = r.via === undefined ? '' : ` via ${r.via}`;
  const dev = r.dev === undefined ? '' : ` dev ${r.dev}`;
  const metric = r.metric === undefined ? '' : ` metric ${r.metric}`;
  return `route del ${dst}${via}${dev} proto ${ROUTE_PROTOCOL}${metric} table main`;
}

/** What one chain op removes, in words for the log. */
function chainRemoval(op: Op, tool: string): string {
  if (op.kind === 'jump') return `${tool} -t ${op.table}: jump -A ${op.parent} ${op.rule}`;
  if (op.kind === 'chain') return `${tool} -t ${op.table}: chain ${op.chain}`;
  return `${tool}: ${op.kind}`;
}

/**
 * The processes that remove everything in `seen`, in run order: iptables-restore and
 * ip6tables-restore (the jumps first, then the chains; the same ops a pass with the chains unwanted
 * would apply), one `nft -f -`, one `ip -force -batch -` (routes, then devices: a device's own
 * routes go with it). Empty when nothing of twill's is there.
 */
export function cleanupPlan(seen: OwnedState): CleanupStep[] {
  const steps: CleanupStep[] = [];
  for (const c of seen.chains) {
    const specs = c.ipv6 ? noChainSpecs6() : noChainSpecs();
    const ops = [
      ...diffChain(specs.postrouting, c.postrouting),
      ...diffChain(specs.forward, c.forward),
    ];
    const input = renderRestore(ops, c.ipv6 ? { ipv6: true } : {});
    if (input === '') continue;
    const tool = c.ipv6 ? 'ip6tables' : 'iptables';
    steps.push({
      file: `${tool}-restore`,
      args: ['--noflush', '-w', '5'],
      input,
      removes: ops.map((op) => chainRemoval(op, tool)),
    });
  }
  // `add` before each `delete` (nft.ts): a table gone since the read fails nothing
  if (seen.nftTables.length > 0)
    steps.push({
      file: 'nft',
      args: ['-f', '-'],
      input: nftRemoveText(seen.nftTables),
      removes: seen.nftTables.map((t) => `nft ${nftTableLabel(t)}`),
    });
  const lines = [
    ...seen.routes.map((r) => ({ line: routeDeleteLine(r), what: `route ${routeName(r)}` })),
    ...seen.links.map((name) => ({ line: `link del ${name}`, what: `device ${name}` })),
  ];
  if (lines.length > 0)
    steps.push({
      file: 'ip',
      args: ['-force', '-batch', '-'],
      input: lines.map((l) => `${l.line}\n`).join(''),
      removes: lines.map((l) => l.what),
    });
  return steps;
}

function routeName(r: OwnedRoute): string {
  return `${r.dst}${r.via === undefined ? '' : ` via ${r.via}`}${r.dev === undefined ? '' : ` dev ${r.dev}`} proto ${ROUTE_PROTOCOL}`;
}
