// The listing that stands in for a flooded `nft monitor` (monitor.ts): one
// long-lived `nft -s -a -i`, fed the same `list` commands every second (a
// round costs no process), whose output is read part by part, a part that
// differs from the round before being the event. In iptables mode the parts
// are iptables' nat and filter tables (the built-in chain and twill's, in the
// node's families); in nftables mode, twill's own tables (their chains). Should `nft -i`
// fail, the caller's poll takes over.
import { describeError } from '../errors.ts';
import { childController } from '../util/abort.ts';
import type { NftFamily } from './model.ts';
import type { MonitorContext, Touch, WatcherOptions } from './kernel-event.ts';
import { FWD_CHAIN, MASQ_CHAIN } from './masq.ts';
import { ownNftTables } from './nft-monitor.ts';
import { FORWARD_CHAIN, POSTRTG_CHAIN } from './nft.ts';

/**
 * One part of the chain listing: an iptables table's `nft list chain` commands, in every family;
 * in nftables mode, one of twill's tables (named by its family) and its `nft list table` command.
 */
export interface ListingPart {
  readonly table: 'nat' | 'filter' | NftFamily;
  readonly commands: readonly string[];
}

/** The chains a changed part asks a pass to look at: in nftables mode, all of a table's. */
function listingTouch(parts: readonly ListingPart[]): Touch {
  const tables = new Set(
    parts.flatMap((p) =>
      p.table === 'nat' || p.table === 'filter' ? [p.table] : ['nat', 'filter'],
    ),
  );
  return { kind: 'chains', tables: (['nat', 'filter'] as const).filter((t) => tables.has(t)) };
}

/**
 * What the listing reads, table by table: the chains nftEventMatters watches (the built-in chain
 * and twill's), in iptables' tables (family ip), and on a dual-stack node ip6tables' too (only
 * they with IPv4 off).
 */
export function listingParts(
  ctx: Pick<MonitorContext, 'ipv4' | 'ipv6' | 'nftables'> = {},
): ListingPart[] {
  // twill's two chains, not `list table`: nft then reads only them from the kernel, where a
  // table's listing cost about 10x as much beside kube-proxy's 20,000 rules (0.6-1.3 % of a core
  // against 0.06-0.1 %, one listing a second); a deleted table or chain prints nothing, which is a
  // change too, and what only the whole table would show (another chain, a set) waits for the
  // resync pass
  if (ctx.nftables === true)
    return ownNftTables(ctx).map((t) => ({
      table: t.startsWith('ip6 ') ? 'ip6' : 'ip',
      commands: [POSTRTG_CHAIN, FORWARD_CHAIN].map((c) => `list chain ${t} ${c}`),
    }));
  const families = ctx.ipv4 === false ? ['ip6'] : ctx.ipv6 === true ? ['ip', 'ip6'] : ['ip'];
  const chains = { nat: ['POSTROUTING', MASQ_CHAIN], filter: ['FORWARD', FWD_CHAIN] };
  return (['nat', 'filter'] as const).map((table) => ({
    table,
    commands: families.flatMap((f) => chains[table].map((c) => `list chain ${f} ${table} ${c}`)),
  }));
}

/**
 * Ends each part of the listing: a command that reads nothing from the kernel and prints one line,
 * which starts with LISTING_END_LINE ("payload expression, datatype integer (integer), 16 bits",
 * nft 1.0.6). A plain integer field: a type with named values (tcp dport's inet_service) may
 * print its table of names after that line, which would run into the next part.
 */
const LISTING_END = 'describe ip length';
const LISTING_END_LINE = 'payload expression';
/** How often the listing is read. */
const LISTING_EVERY_MS = 1_000;
/** A part longer than this has lost its end (or lists far more than twill's chains): give up. */
const LISTING_MAX_BYTES = 1024 * 1024;

/**
 * The listing's input, one round: each part's `list chain` commands and its end. One `nft -s -a -i`
 * lives as long as the listing and is fed this every second (the runner's `feed`), so a round
 * costs no process (four `iptables -S` a second cost the daemon and its tree about 1.5 % of a
 * core). -s leaves the counters out (they move with traffic), -a prints the rules' handles (a rule
 * deleted and added again, as iptables-restore writes it, still shows). Only an in-place
 * `iptables -R` changing what nft does not print (an xt comment's text) goes unseen, until the
 * resync pass. A chain or table that is missing prints nothing on stdout (nft's error goes to
 * stderr), which changes the part's text as well.
 */
export function listingInput(parts: readonly ListingPart[]): string {
  return `${parts.flatMap((p) => [...p.commands, LISTING_END]).join('\n')}\n`;
}

/**
 * Reads the listing's lines, part by part in the script's order: `changed` is called when a
 * table's text differs from the one listed before it, `baseline` once every table has been
 * listed, `overflow` when a part grows past LISTING_MAX_BYTES without its end.
 */
export function listingReader(
  parts: readonly ListingPart[],
  o: {
    readonly changed: (table: ListingPart['table']) => void;
    readonly baseline: () => void;
    readonly overflow: () => void;
  },
): (line: string) => void {
  const last: (string | undefined)[] = parts.map(() => undefined);
  let at = 0;
  let lines: string[] = [];
  let bytes = 0;
  let full = false;
  return (line) => {
    if (full) return;
    if (!line.startsWith(LISTING_END_LINE)) {
      lines.push(line);
      bytes += line.length + 1;
      if (bytes > LISTING_MAX_BYTES) {
        full = true;
        o.overflow();
      }
      return;
    }
    const text = lines.join('\n');
    [lines, bytes] = [[], 0];
    const before = last[at];
    last[at] = text;
    const part = parts[at];
    at = (at + 1) % parts.length;
    if (before === undefined) {
      if (at === 0) o.baseline();
    } else if (before !== text && part) o.changed(part.table);
  };
}

/**
 * Lists twill's chains (listingInput, fed to one `nft -s -a -i`) until `signal` aborts, a
 * changed table being an event over that table's chains. Its first full round is one too, over
 * every table: what changed between the monitor's end and that round (or in the events a flooded
 * monitor lost) is seen by no listing, so a pass looks. Should `nft -i` fail (an nft built
 * without its interactive CLI), `poll` takes over.
 */
export async function listChains(
  o: WatcherOptions & {
    /** what takes over when `nft -i` cannot run */
    readonly poll: (signal: AbortSignal) => Promise<void>;
  },
  signal: AbortSignal,
): Promise<void> {
  const parts = listingParts(o.ctx);
  const what = o.ctx.nftables === true ? 'tables' : 'chains';
  const ctl = childController(signal);
  let overflowed = false;
  const onLine = listingReader(parts, {
    changed: (table) =>
      o.onEvent('nft listing', listingTouch(parts.filter((p) => p.table === table))),
    baseline: () => o.onEvent('nft listing started', listingTouch(parts)),
    overflow: () => {
      overflowed = true;
      ctl.abort();
    },
  });
  try {
    await o.watch('nft', ['-s', '-a', '-i'], {
      signal: ctl.signal,
      onLine,
      feed: { text: listingInput(parts), everyMs: LISTING_EVERY_MS },
    });
    if (!overflowed) return;
    o.logger.warn(
      { maxBytes: LISTING_MAX_BYTES },
      `nft listing of twill's ${what} ran on; polling them instead`,
    );
  } catch (err) {
    if (signal.aborted) return;
    o.logger.warn(
      { err: describeError(err) },
      `nft listing of twill's ${what} stopped; polling them instead`,
    );
  }
  await o.poll(signal);
}
