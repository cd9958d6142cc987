// Kernel event triggers: `ip monitor` (links, addresses, routes, neighbours
// and FDB entries) and, when iptables uses the nf_tables backend,
// `nft monitor rules` (ip6tables' tables only on a dual-stack node, and only
// they on an IPv6-only one). Lines are filtered down to what concerns twill's
// own objects, so a host whose other programs churn (pods, kube-proxy) does
// not keep twill busy, and each line says what it touched (a Touch): one
// route, neighbour or FDB entry, one table's chains, or "anything" (a link,
// an address, a line twill does not read), so a known drift is repaired by
// re-applying just what it touched and the rest gets a full pass. With
// iptables-legacy there is no rule event stream, so twill's two chains are
// polled instead (four `iptables -S`, by default every second; with IPv6
// four `ip6tables -S` more, or instead with IPv4 off). When other programs
// flood `nft monitor` (kube-proxy rewriting tens of thousands of rules),
// twill lists its chains every second for a while instead, with one
// long-lived `nft -i`, a changed listing being the event (nft-listing.ts).
// A monitor that dies is restarted with backoff, and every (re)start
// triggers a pass, since events may have been missed meanwhile. In nftables
// mode ("EnableNFTables") `nft monitor` (every object kind: a chain's policy
// or a chain added to twill's table matters too) is filtered to twill's own
// tables, `table ip twill-ipv4` and `table ip6 twill-ipv6`, by a substring
// test before any parsing (nft-monitor.ts), so other tables' churn costs
// nothing; the listing that stands in for it when flooded lists those
// tables, and there is no chain poll.
import { describeError } from '../errors.ts';
import type { Runner } from '../exec/runner.ts';
import { abortable, Backoff, childController, pause, quietOnAbort, retry } from '../util/abort.ts';
import { isIpv6 } from '../net/ipv6.ts';
import { chainSpecs, chainSpecs6, diffChain, type ChainSpec } from './masq.ts';
import type { ChainPollOptions, MonitorContext, Touch, WatcherOptions } from './kernel-event.ts';
import { ROUTE_PROTOCOL } from './model.ts';
import { nftTableEventMatters, nftTableNeedles, nftTableTouch } from './nft-monitor.ts';
import { listChains } from './nft-listing.ts';
import { observeChain } from './observe.ts';

const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** twill's device names in a line: twill.<VNI> and twill-v6.<VNI>. */
const DEVICE_WORD = /\btwill(-v6)?\.\d+\b/;

/**
 * The kernel's own IPv6 objects on a device: link-local addresses and routes (fe80::/10), multicast
 * (ff00::/8) and the local table. twill.<VNI> keeps the kernel's default address generation, so
 * each time it is (re)created these come and go (the link-local about a second later, when its
 * duplicate address detection ends); none of them is twill's (it writes global addresses, and its
 * devices' own events are link lines).
 */
export const KERNEL_IPV6 = /\bfe[89ab][0-9a-f]:|\bff[0-9a-f]{2}:|\btable local\b/;

/** Whether an `ip monitor` line concerns twill's objects. */
export function ipEventMatters(line: string, ctx: MonitorContext): boolean {
  if (KERNEL_IPV6.test(line)) return false;
  if (DEVICE_WORD.test(line)) return true;
  if (new RegExp(`\\bproto ${ROUTE_PROTOCOL}\\b`).test(line)) return true;
  // the underlay's link and IPv4 address events ("3: eth0@if9: <…>", "Deleted 3: eth0    inet …"),
  // and with IPv6 its global IPv6 ones ("… inet6 fd00::2/64 scope global"): losing either
  // flushes the host-gw routes through it without a route event; with IPv4 off, its IPv4
  // addresses carry nothing of twill's
  const inet = ctx.ipv4 === false ? '' : '|\\s+inet ';
  const inet6 = ctx.ipv6 === true ? '|\\s+inet6 \\S+ scope global\\b' : '';
  return new RegExp(`^(Deleted )?\\d+: ${escape(ctx.underlay)}((@\\S+)?: <${inet}${inet6})`).test(
    line,
  );
}

/** The nft lines that matter in the given families: ip (iptables' tables), ip6 (ip6tables'). */
function nftLines(family: string): { table: RegExp; chain: RegExp } {
  return {
    table: new RegExp(`^(flush|delete) (ruleset|table ${family} (nat|filter))\\b`),
    chain: new RegExp(` ${family} (nat|filter) (POSTROUTING|FORWARD|TWILL-[A-Z]+) `),
  };
}
const NFT_IP = nftLines('ip');
const NFT_IP6 = nftLines('ip6');
const NFT_IP_IP6 = nftLines('ip6?');

/**
 * Whether an `nft monitor rules` line concerns twill's chains or the built-in chains that jump to
 * them: iptables' tables (family ip), and on a dual-stack node (`ctx.ipv6`) ip6tables' (ip6)
 * too; an IPv4-only node ignores kube-proxy's ip6tables churn, an IPv6-only one (`ctx.ipv4`
 * false) its iptables churn.
 */
export function nftEventMatters(
  line: string,
  ctx: Pick<MonitorContext, 'ipv4' | 'ipv6'> = {},
): boolean {
  const re = ctx.ipv4 === false ? NFT_IP6 : ctx.ipv6 === true ? NFT_IP_IP6 : NFT_IP;
  if (re.table.test(line)) return true;
  // "# ERROR: We lost some netlink events!": anything may have changed meanwhile
  if (line.startsWith('# ERROR')) return true;
  return re.chain.test(`${line} `);
}

const IPV4 = /^\d{1,3}(\.\d{1,3}){3}(\/\d{1,2})?$/;
const ROUTE_WORDS = new Set(['via', 'dev', 'proto']);
/**
 * What the kernel prints with every IPv6 route twill writes (its default metric and preference):
 * still the plain shape
 */
const ROUTE6_DEFAULTS = new Map([
  ['metric', '1024'],
  ['pref', 'medium'],
]);

/** An IPv6 address, or "address/len" (a MAC, "02:00:…", is neither). */
function isIpv6Word(w: string): boolean {
  const [addr = '', len, ...rest] = w.split('/');
  return rest.length === 0 && isIpv6(addr) && (len === undefined || /^\d{1,3}$/.test(len));
}

/** Reads an `ip monitor` line that matters (ipEventMatters) into what it touched. */
export function ipTouch(line: string): Touch {
  const deleted = line.startsWith('Deleted ');
  const words = (deleted ? line.slice('Deleted '.length) : line).trim().split(/\s+/);
  const first = words[0] ?? '';
  const v6 = !IPV4.test(first) && isIpv6Word(first);
  if (!IPV4.test(first) && !v6) return { kind: 'all' };
  const after = (w: string): string | undefined => {
    const i = words.indexOf(w);
    return i < 0 ? undefined : words[i + 1];
  };
  if (after('proto') === String(ROUTE_PROTOCOL)) {
    const dst = first.includes('/') ? first : `${first}/${v6 ? 128 : 32}`;
    // only "dst via X dev Y proto 151 [onlink] [metric N]" (IPv6: with the kernel's "metric 1024
    // pref medium") is a shape twill writes; anything more is left to a full pass
    let plain = true;
    let metric = 0;
    for (let i = 1; i < words.length; i++) {
      const w = words[i] ?? '';
      if (ROUTE_WORDS.has(w)) i++;
      else if (v6 && ROUTE6_DEFAULTS.has(w) && words[i + 1] === ROUTE6_DEFAULTS.get(w)) i++;
      else if (!v6 && w === 'metric' && /^\d+$/.test(words[i + 1] ?? '')) {
        metric = Number(words[i + 1]);
        i++;
      } else if (w !== 'onlink') plain = false;
    }
    const via = after('via');
    const dev = after('dev');
    const route =
      plain && via !== undefined && dev !== undefined
        ? { dst, via, dev, onlink: words.includes('onlink'), ...(metric ? { metric } : {}) }
        : undefined;
    return { kind: 'route', deleted, dst, route };
  }
  const dev = after('dev');
  if (dev !== undefined && /^twill(-v6)?\.\d+$/.test(dev) && !first.includes('/')) {
    return {
      kind: 'neigh',
      deleted,
      dev,
      ip: first,
      mac: after('lladdr')?.toLowerCase(),
      permanent: words.includes('PERMANENT'),
    };
  }
  return { kind: 'all' };
}

/** Reads an `nft monitor rules` line that matters (nftEventMatters) into the tables it touched. */
export function nftTouch(line: string): Touch {
  // a table of either family: the pass over the table's chains looks at both families'
  const tables = (['nat', 'filter'] as const).filter((t) =>
    new RegExp(`\\bip6? ${t}\\b`).test(line),
  );
  return { kind: 'chains', tables: tables.length > 0 ? tables : ['nat', 'filter'] };
}

export interface MonitorOptions extends WatcherOptions {
  /** also watch nftables (iptables uses the nf_tables backend, or nftables mode) */
  readonly nft: boolean;
  /**
   * polls twill's chains until the signal aborts. Given, a flooded `nft monitor` gives way to the
   * chain listing (listChains), and this poll is the listing's fallback; not given, the monitor
   * keeps listening whatever its output
   */
  readonly poll?: (signal: AbortSignal) => Promise<void>;
  /** when `nft monitor` counts as flooded, and for how long the chain listing replaces it */
  readonly flood?: FloodGuard;
  /** stops `ip monitor` while twill writes thousands of entries itself (MonitorHush) */
  readonly hush?: MonitorHush;
}

export interface FloodGuard {
  /** bytes of `nft monitor` output within `windowMs` that count as a flood */
  readonly bytes: number;
  readonly windowMs: number;
  /** how long the chains are listed instead, before `nft monitor` is tried again */
  readonly cooldownMs: number;
}

/**
 * `nft monitor` prints every rule another program rewrites: kube-proxy
 * rewriting 20,000 rules costs nft about half a second of CPU each time
 * (and it loses events). Past this much output, twill stops listening and
 * lists its chains every second for a while (one long-lived `nft -i`,
 * whatever the size of the tables), then listens again.
 */
export const DEFAULT_FLOOD: FloodGuard = {
  bytes: 256 * 1024,
  windowMs: 10_000,
  cooldownMs: 300_000,
};

/**
 * Substrings every line that can matter holds (see ipEventMatters / nftEventMatters): the
 * byte-level prefilter.
 */
export function ipNeedles(ctx: MonitorContext): string[] {
  return ['twill.', 'twill-v6.', `proto ${ROUTE_PROTOCOL}`, ctx.underlay];
}
export const NFT_NEEDLES = [
  'TWILL-',
  ' POSTROUTING ',
  ' FORWARD ',
  'ruleset',
  'table ip nat',
  'table ip filter',
  'table ip6 nat',
  'table ip6 filter',
  '# ERROR',
];

interface WatchSpec {
  readonly name: string;
  readonly file: string;
  readonly args: string[];
  readonly needles: string[];
  readonly matters: (l: string) => boolean;
  readonly touch: (l: string) => Touch;
  readonly onBytes?: (n: number) => void;
  readonly hush?: MonitorHush;
}

/**
 * Stops `ip monitor` while twill itself writes thousands of kernel entries, and starts it again
 * after. Every entry twill writes comes back as an event: at a cold start 5,000 routes are 5,000
 * lines that `ip monitor` prints and the daemon reads, one wake-up each, and on two cores those
 * wake-ups take turns with `ip -batch` (measured: the batch preempted 2,700 times instead of 25,
 * its system time up by half, the apply of 5,000 host-gw routes 730-870 ms against 440-620 ms
 * with no monitor, on a day when a raw `ip -batch` of them took 360 ms). Nothing is lost: the
 * monitor's restart asks for a full pass, as every (re)start does, and that pass reads the
 * kernel after the monitor is back, so a change made by someone else meanwhile is seen then; a
 * pass that changed the kernel is followed by that verifying pass anyway.
 */
export class MonitorHush {
  private depth = 0;
  private release: { promise: Promise<void>; resolve: () => void } | undefined;
  /** stops the running monitor and resolves once it has exited (set while one runs) */
  private stopRunning: (() => Promise<void>) | undefined;

  /** Runs `f` with `ip monitor` stopped; when `f` settles the monitor starts again. */
  async during<T>(f: () => Promise<T>): Promise<T> {
    this.depth += 1;
    if (this.depth === 1) {
      let resolve = (): void => undefined;
      const promise = new Promise<void>((r) => (resolve = r));
      this.release = { promise, resolve };
    }
    try {
      await this.stopRunning?.();
      return await f();
    } finally {
      this.depth -= 1;
      if (this.depth === 0) {
        this.release?.resolve();
        this.release = undefined;
      }
    }
  }

  /** Whether a hush is on. */
  get hushed(): boolean {
    return this.depth > 0;
  }

  /** Resolves when no hush is on (at once when none is). */
  quiet(): Promise<void> {
    return this.release?.promise ?? Promise.resolve();
  }

  /** The watcher's side: how to stop the monitor it runs now (undefined: none runs). */
  running(stop: (() => Promise<void>) | undefined): void {
    this.stopRunning = stop;
  }
}

async function keepWatching(
  o: MonitorOptions,
  spec: WatchSpec,
  signal: AbortSignal,
): Promise<void> {
  const backoff = new Backoff(200, 10_000);
  const onLine = (line: string): void =>
    void (spec.matters(line) && o.onEvent(spec.name, spec.touch(line)));
  // `ip monitor` keeps running when the kernel drops events (ENOBUFS) and says so on stderr:
  // events may be lost, look at everything
  const onStderr = (text: string): void => o.onEvent(`${spec.name}: ${text.trim().slice(0, 100)}`);
  const watchOnce = async (): Promise<void> => {
    const hush = spec.hush;
    // hushed (twill is writing thousands of entries): starts again when the writing is done
    // (checked again right before the spawn: a hush may have begun while this waited)
    if (hush) while (hush.hushed) await abortable(hush.quiet(), signal);
    o.onEvent(`${spec.name} (re)started`);
    const started = Date.now();
    const ctl = childController(signal);
    try {
      const watching = o.watch(spec.file, spec.args, {
        signal: ctl.signal,
        needles: spec.needles,
        onLine,
        onStderr,
        ...(spec.onBytes ? { onBytes: spec.onBytes } : {}),
      });
      // a hush stops it (the watch then ends without failing, and the loop waits for the release)
      hush?.running(async () => {
        ctl.abort();
        await watching.catch(() => undefined);
      });
      await watching;
    } catch (err) {
      // it ran fine for a while: a fresh failure
      if (Date.now() - started > 60_000) backoff.reset();
      throw err;
    } finally {
      hush?.running(undefined);
      ctl.abort();
    }
  };
  await quietOnAbort(signal, async () => {
    // a failed monitor is restarted after a backoff; one that ended without failing, at once
    while (!signal.aborted)
      await retry(watchOnce, {
        signal,
        backoff,
        retryIf: () => true,
        onRetry: (err, retryInMs) =>
          o.logger.warn({ err: describeError(err), retryInMs }, `${spec.name} stopped; restarting`),
      });
  });
}

/** Runs the monitors until `signal` aborts. */
export async function runMonitors(o: MonitorOptions, signal: AbortSignal): Promise<void> {
  const watchers = [
    keepWatching(
      o,
      {
        name: 'ip monitor',
        file: 'ip',
        args: ['monitor', 'link', 'address', 'route', 'neigh'],
        needles: ipNeedles(o.ctx),
        matters: (l) => ipEventMatters(l, o.ctx),
        touch: ipTouch,
        ...(o.hush ? { hush: o.hush } : {}),
      },
      signal,
    ),
  ];
  if (o.nft) watchers.push(watchNft(o, signal));
  await Promise.all(watchers);
}

/** `nft monitor`, replaced by the chain listing (listChains) for `cooldownMs` when it floods. */
async function watchNft(o: MonitorOptions, signal: AbortSignal): Promise<void> {
  const guard = o.flood ?? DEFAULT_FLOOD;
  const poll = o.poll;
  // nftables mode: every kind of object (tables and chains too), twill's tables only
  const spec =
    o.ctx.nftables === true
      ? {
          args: ['monitor'],
          needles: nftTableNeedles(o.ctx),
          matters: (l: string) => nftTableEventMatters(l, o.ctx),
          touch: nftTableTouch,
        }
      : {
          args: ['monitor', 'rules'],
          needles: NFT_NEEDLES,
          matters: (l: string) => nftEventMatters(l, o.ctx),
          touch: nftTouch,
        };
  while (!signal.aborted) {
    const ctl = childController(signal);
    let windowStart = Date.now();
    let bytes = 0;
    const onBytes = (n: number): void => {
      const now = Date.now();
      if (now - windowStart > guard.windowMs) [windowStart, bytes] = [now, 0];
      bytes += n;
      if (bytes > guard.bytes && poll) ctl.abort();
    };
    await keepWatching(
      o,
      {
        name: 'nft monitor',
        file: 'nft',
        ...spec,
        onBytes,
      },
      ctl.signal,
    );
    if (signal.aborted || !poll) return;
    o.logger.info(
      { bytes, windowMs: guard.windowMs, listForMs: guard.cooldownMs },
      `nft monitor flooded by other programs' rule changes; listing twill's ${o.ctx.nftables === true ? 'tables' : 'chains'} every second instead for a while`,
    );
    const cool = childController(signal);
    const timer = setTimeout(() => cool.abort(), guard.cooldownMs);
    await listChains({ ...o, poll }, cool.signal);
    clearTimeout(timer);
  }
}

async function chainDrifted(
  runner: Runner,
  spec: ChainSpec,
  signal: AbortSignal,
): Promise<boolean> {
  const seen = await observeChain(runner, spec, signal);
  return diffChain(spec, seen).length > 0;
}

/**
 * Where no `nft monitor` can see rule changes: checks twill's chains every `intervalMs` (with
 * IPv6, ip6tables' too, and only they with IPv4 off: a drifted table of either family asks for a
 * pass over that table).
 */
export async function pollChains(o: ChainPollOptions, signal: AbortSignal): Promise<void> {
  await quietOnAbort(signal, async () => {
    for (;;) {
      await pause(o.intervalMs, signal);
      try {
        const spec4 = o.masq();
        const specs = spec4 ? chainSpecs(spec4) : undefined;
        const spec6 = o.masq6?.() ?? null;
        const specs6 = spec6 ? chainSpecs6(spec6) : undefined;
        const [nat4, filter4, nat6, filter6] = await Promise.all([
          specs ? chainDrifted(o.runner, specs.postrouting, signal) : false,
          specs ? chainDrifted(o.runner, specs.forward, signal) : false,
          specs6 ? chainDrifted(o.runner, specs6.postrouting, signal) : false,
          specs6 ? chainDrifted(o.runner, specs6.forward, signal) : false,
        ]);
        const nat = nat4 || nat6;
        const filter = filter4 || filter6;
        const tables = [...(nat ? ['nat' as const] : []), ...(filter ? ['filter' as const] : [])];
        if (tables.length > 0) o.onDrift('iptables poll', { kind: 'chains', tables });
      } catch (err) {
        // a poll the stop cut short is no failure: the next pause ends the loop
        if (!signal.aborted) o.logger.debug({ err: describeError(err) }, 'iptables poll failed');
      }
    }
  });
}
