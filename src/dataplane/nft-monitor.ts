// nftables mode's kernel events ("EnableNFTables"): which `nft monitor`
// lines concern twill's own tables (`table ip twill-ipv4`, `table ip6
// twill-ipv6`, of the families that are on), tested by substrings first so
// that other tables' churn (kube-proxy) is dropped before any parsing; what
// such a line asks for (a look at twill's tables); and the poll of the tables
// that stands in for the listing where `nft -i` cannot run. monitor.ts runs
// the monitors.
import { describeError } from '../errors.ts';
import { pause, quietOnAbort } from '../util/abort.ts';
import type { NftFamily } from './model.ts';
import type { ChainPollOptions, MonitorContext, Touch } from './kernel-event.ts';
import { NFT_TABLES, nftTableLabel, nftTableMatches, wantedNftTables } from './nft.ts';
import { observeNftTable } from './nft-observe.ts';

/** twill's tables of the families that are on, as `nft monitor` names them ("ip twill-ipv4"). */
export function ownNftTables(ctx: Pick<MonitorContext, 'ipv4' | 'ipv6'>): string[] {
  const on = (f: NftFamily): boolean => (f === 'ip' ? ctx.ipv4 !== false : ctx.ipv6 === true);
  return NFT_TABLES.filter((t) => on(t.family)).map((t) => `${t.family} ${t.name}`);
}

/**
 * The byte-level prefilter of `nft monitor` in nftables mode: every line about twill's tables holds
 * "<family> <name>"; lost events say "# ERROR".
 */
export function nftTableNeedles(ctx: Pick<MonitorContext, 'ipv4' | 'ipv6'> = {}): string[] {
  return [...ownNftTables(ctx), '# ERROR'];
}

/**
 * Whether an `nft monitor` line concerns one of twill's tables (nftables mode): "<verb> <object>
 * <family> <table> …" (add, delete or flush of the table, a chain, a rule…) naming twill's table of
 * a family that is on, or lost events. Any other table's line is dropped by a substring test first.
 */
export function nftTableEventMatters(
  line: string,
  ctx: Pick<MonitorContext, 'ipv4' | 'ipv6'> = {},
): boolean {
  if (line.startsWith('# ERROR')) return true;
  const tables = ownNftTables(ctx);
  if (!tables.some((t) => line.includes(t))) return false;
  const [verb = '', object = '', family = '', table = ''] = line.split(' ', 4);
  return verb !== '' && object !== '' && tables.includes(`${family} ${table}`);
}

/** nftables mode: any event about twill's tables asks for a look at them (both chain kinds). */
export function nftTableTouch(): Touch {
  return { kind: 'chains', tables: ['nat', 'filter'] };
}

/**
 * nftables mode, where the listing cannot run (an nft without its interactive CLI): checks
 * twill's tables (`nft -j list table`, one per family that is on) every `intervalMs`, a table
 * that is not as wanted asking for a pass over it.
 */
export async function pollNftTables(o: ChainPollOptions, signal: AbortSignal): Promise<void> {
  await quietOnAbort(signal, async () => {
    for (;;) {
      await pause(o.intervalMs, signal);
      try {
        const want = wantedNftTables(o.masq(), o.masq6?.() ?? null);
        const seen = await Promise.all(want.map((t) => observeNftTable(o.runner, t, signal)));
        const drifted = want.filter((t, i) => !nftTableMatches(t, seen[i] ?? null));
        if (drifted.length > 0)
          o.onDrift(`nft poll (${drifted.map(nftTableLabel).join(', ')})`, nftTableTouch());
      } catch (err) {
        if (!signal.aborted) o.logger.debug({ err: describeError(err) }, 'nft poll failed');
      }
    }
  });
}
