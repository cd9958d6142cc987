// Reading what `nft` prints about twill's tables, pure: `nft -j list table
// <family> <name>` as a table of chains whose rules are read back into the
// nft syntax twill writes them in (nft.ts), so wanted and seen compare as
// values whatever handles, counters or JSON spelling (a flag as a string or a
// list) the kernel and nft give them; `nft list tables` as the tables twill
// owns; a missing table; and the errors of an `nft -f -` transaction mapped
// back to the lines that caused them.
import { CommandError } from '../exec/runner.ts';
import { canonicalIpv6 } from '../net/ipv6.ts';
import type { NftTableName } from './model.ts';
import { NFT_TABLES, type NftTableSeen } from './nft.ts';

type Json = Record<string, unknown>;
const obj = (v: unknown): Json | undefined =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : undefined;
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' ? v : undefined);

/** An address as twill writes it: IPv6 in canonical form, IPv4 as it is. */
const canon = (a: string): string => (a.includes(':') ? (canonicalIpv6(a) ?? a) : a);

/** The left side of a match: a payload field ("ip saddr"), a meta key, or a masked one. */
function leftText(v: unknown): string | undefined {
  const o = obj(v);
  const payload = obj(o?.payload);
  if (payload) return `${str(payload.protocol) ?? '?'} ${str(payload.field) ?? '?'}`;
  const meta = obj(o?.meta);
  if (meta) return `meta ${str(meta.key) ?? '?'}`;
  const and = o?.['&'];
  if (Array.isArray(and) && and.length === 2) {
    const inner = leftText(and[0]);
    const mask = num(and[1]);
    if (inner !== undefined && mask !== undefined) return `${inner} & 0x${mask.toString(16)}`;
  }
  return undefined;
}

/** The right side of a match: an address, a prefix, or a number (hex after a mark). */
function rightText(v: unknown, hex: boolean): string | undefined {
  if (typeof v === 'string') return canon(v);
  if (typeof v === 'number') return hex ? `0x${v.toString(16)}` : String(v);
  const prefix = obj(obj(v)?.prefix);
  const addr = str(prefix?.addr);
  const len = num(prefix?.len);
  return addr !== undefined && len !== undefined ? `${canon(addr)}/${len}` : undefined;
}

/** One statement of a rule in nft's syntax; undefined when it is none twill writes. */
function statementText(e: unknown): string | undefined {
  const o = obj(e);
  if (o === undefined) return undefined;
  const match = obj(o.match);
  if (match) {
    const left = leftText(match.left);
    const op = str(match.op);
    const right = rightText(match.right, left?.startsWith('meta mark') === true);
    if (left === undefined || op === undefined || right === undefined) return undefined;
    // nft prints `==` only after an expression ("meta mark & 0x4000 == 0x4000")
    const implicit = op === '==' && !left.includes(' & ');
    return `${left} ${implicit ? '' : `${op} `}${right}`;
  }
  for (const verdict of ['return', 'accept', 'drop', 'continue'])
    if (verdict in o && o[verdict] === null) return verdict;
  if ('masquerade' in o) {
    const flags = obj(o.masquerade)?.flags;
    const list = Array.isArray(flags) ? flags : flags === undefined ? [] : [flags];
    return ['masquerade', ...list.map(String)].join(' ');
  }
  return undefined;
}

/**
 * A JSON rule's statements as the nft syntax twill writes (nft.ts); a statement twill never writes
 * (a counter, a jump, a log…) as its JSON, which then matches no wanted rule.
 */
export function nftRuleText(expr: unknown): string {
  const list = Array.isArray(expr) ? expr : [];
  return list.map((e) => statementText(e) ?? `?${JSON.stringify(e)}`).join(' ');
}

/**
 * `nft -j list table <family> <name>` → that table: its chains (base chains with type, hook,
 * priority and policy) with their rules in order, and a count of the other objects it holds; null
 * when the output names no such table.
 */
export function parseNftTable(json: unknown, t: NftTableName): NftTableSeen | null {
  const items = obj(json)?.nftables;
  if (!Array.isArray(items)) return null;
  const mine = (o: Json | undefined): boolean =>
    o !== undefined && o.family === t.family && (o.table ?? o.name) === t.name;
  let found = false;
  let others = 0;
  const chains: NftTableSeen['chains'][number][] = [];
  const rules = new Map<string, string[]>();
  for (const item of items) {
    const [kind, value] = Object.entries(obj(item) ?? {})[0] ?? [];
    const o = obj(value);
    if (kind === 'metainfo' || !mine(o) || o === undefined) continue;
    if (kind === 'table') found = true;
    else if (kind === 'chain') {
      const name = str(o.name) ?? '';
      chains.push({
        name,
        type: str(o.type),
        hook: str(o.hook),
        prio: num(o.prio),
        policy: str(o.policy),
        rules: rules.get(name) ?? rules.set(name, []).get(name) ?? [],
      });
    } else if (kind === 'rule') {
      const chain = str(o.chain) ?? '';
      const list = rules.get(chain) ?? rules.set(chain, []).get(chain) ?? [];
      list.push(nftRuleText(o.expr));
    } else others++;
  }
  return found ? { family: t.family, name: t.name, chains, others } : null;
}

/** `nft -j list table …` text → the table (null when absent); throws on output that is not JSON. */
export function parseNftListing(stdout: string, t: NftTableName): NftTableSeen | null {
  return parseNftTable(JSON.parse(stdout), t);
}

/**
 * Whether a failed `nft list table …` says the table does not exist (exit 1, "No such file or
 * directory"), as opposed to nft failing.
 */
export function isNftTableAbsent(err: unknown): boolean {
  return (
    err instanceof CommandError &&
    err.exitCode === 1 &&
    /No such file or directory/.test(err.stderr)
  );
}

/** `nft list tables` ("table ip twill-ipv4" a line) → those of twill's tables that exist. */
export function parseNftTableNames(stdout: string): NftTableName[] {
  const seen = new Set(stdout.split('\n').map((l) => l.trim()));
  return NFT_TABLES.filter((t) => seen.has(`table ${t.family} ${t.name}`));
}

const NFT_ERROR = /^(?:\/dev\/stdin|-):(\d+):[\d-]+: (Error: .*)$/;

/**
 * One "<input line>: <error>" message per error an `nft -f -` transaction reports
 * ("/dev/stdin:3:1-20: Error: …"), the line named by its number in `lines`; when no line is named,
 * stderr's first line; empty when stderr is empty. nft applies all of a transaction or none of it.
 */
export function describeNftFailures(stderr: string, lines: readonly string[]): string[] {
  const out: string[] = [];
  for (const raw of stderr.split('\n')) {
    const m = NFT_ERROR.exec(raw.trim());
    if (m) out.push(`${lines[Number(m[1]) - 1]?.trim() ?? `line ${m[1]}`}: ${m[2]}`);
  }
  const first = stderr.trim().split('\n')[0];
  if (out.length === 0 && first !== undefined && first !== '') out.push(first);
  return out;
}
