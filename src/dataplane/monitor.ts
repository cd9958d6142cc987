// Kernel event triggers: `ip monitor` (links, addresses, routes, neighbours
// and FDB entries) and, when iptables uses the nf_tables backend,
// `nft monitor rules`. An event only says "look again" (the pass is
// level-triggered), so lines are filtered down to what concerns twill's own
// objects, and a host whose other programs churn (pods, kube-proxy) does not
// keep twill busy. With iptables-legacy there is no rule event stream, so
// twill's two chains are polled instead (four `iptables -S`, by default every
// second). A monitor that dies is restarted with backoff, and every
// (re)start triggers a pass, since events may have been missed meanwhile.
import { describeError } from '../errors.ts';
import type { LineWatcher, Runner } from '../exec/runner.ts';
import type { Logger } from '../log.ts';
import { Backoff, sleep } from '../util/abort.ts';
import { chainSpecs, diffChain, type ChainSpec } from './masq.ts';
import { ROUTE_PROTOCOL, type MasqSpec } from './model.ts';
import { observeChain } from './observe.ts';

export interface MonitorContext {
  /** the underlay interface: its link going down or up matters (host-gw routes go with it) */
  readonly underlay: string;
}

const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Whether an `ip monitor` line concerns twill's objects. */
export function ipEventMatters(line: string, ctx: MonitorContext): boolean {
  if (/\btwill\.\d+\b/.test(line)) return true;
  if (new RegExp(`\\bproto ${ROUTE_PROTOCOL}\\b`).test(line)) return true;
  // the underlay's link and IPv4 address events ("3: eth0@if9: <…>", "Deleted 3: eth0    inet …"):
  // losing either flushes the host-gw routes through it without a route event
  return new RegExp(`^(Deleted )?\\d+: ${escape(ctx.underlay)}((@\\S+)?: <|\\s+inet )`).test(line);
}

/** Whether an `nft monitor rules` line concerns twill's chains or the built-in chains that jump to them. */
export function nftEventMatters(line: string): boolean {
  if (/^(flush|delete) (ruleset|table ip (nat|filter))\b/.test(line)) return true;
  return / ip (nat|filter) (POSTROUTING|FORWARD|TWILL-[A-Z]+) /.test(`${line} `);
}

export interface MonitorOptions {
  readonly watch: LineWatcher;
  readonly logger: Logger;
  readonly ctx: MonitorContext;
  /** also watch nftables (iptables uses the nf_tables backend) */
  readonly nft: boolean;
  readonly onEvent: (source: string) => void;
}

/** Substrings every line that can matter holds (see ipEventMatters / nftEventMatters): the byte-level prefilter. */
export function ipNeedles(ctx: MonitorContext): string[] {
  return ['twill.', `proto ${ROUTE_PROTOCOL}`, ctx.underlay];
}
export const NFT_NEEDLES = ['TWILL-', ' POSTROUTING ', ' FORWARD ', 'ruleset', 'table ip nat', 'table ip filter'];

async function keepWatching(o: MonitorOptions, spec: { name: string; file: string; args: string[]; needles: string[]; matters: (l: string) => boolean }, signal: AbortSignal): Promise<void> {
  const backoff = new Backoff(200, 10_000);
  while (!signal.aborted) {
    o.onEvent(`${spec.name} (re)started`);
    const started = Date.now();
    try {
      await o.watch(spec.file, spec.args, { signal, needles: spec.needles, onLine: (line) => spec.matters(line) && o.onEvent(spec.name) });
    } catch (err) {
      if (signal.aborted) return;
      if (Date.now() - started > 60_000) backoff.reset(); // it ran fine for a while: a fresh failure
      const retryInMs = backoff.next();
      o.logger.warn({ err: describeError(err), retryInMs }, `${spec.name} stopped; restarting`);
      await sleep(retryInMs, signal);
    }
  }
}

/** Runs the monitors until `signal` aborts. */
export async function runMonitors(o: MonitorOptions, signal: AbortSignal): Promise<void> {
  const watchers = [
    keepWatching(o, { name: 'ip monitor', file: 'ip', args: ['monitor', 'link', 'address', 'route', 'neigh'], needles: ipNeedles(o.ctx), matters: (l) => ipEventMatters(l, o.ctx) }, signal),
  ];
  if (o.nft) watchers.push(keepWatching(o, { name: 'nft monitor', file: 'nft', args: ['monitor', 'rules'], needles: NFT_NEEDLES, matters: nftEventMatters }, signal));
  await Promise.all(watchers);
}

export interface ChainPollOptions {
  readonly runner: Runner;
  readonly logger: Logger;
  readonly masq: () => MasqSpec;
  readonly intervalMs: number;
  readonly onDrift: (source: string) => void;
}

async function chainDrifted(runner: Runner, spec: ChainSpec, signal: AbortSignal): Promise<boolean> {
  const seen = await observeChain(runner, spec, signal);
  return diffChain(spec, seen).length > 0;
}

/** Where no `nft monitor` can see rule changes: checks twill's chains every `intervalMs`. */
export async function pollChains(o: ChainPollOptions, signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    await sleep(o.intervalMs, signal);
    if (signal.aborted) return;
    try {
      const specs = chainSpecs(o.masq());
      const drifted = await Promise.all([chainDrifted(o.runner, specs.postrouting, signal), chainDrifted(o.runner, specs.forward, signal)]);
      if (drifted.some(Boolean)) o.onDrift('iptables poll');
    } catch (err) {
      if (!signal.aborted) o.logger.debug({ err: describeError(err) }, 'iptables poll failed');
    }
  }
}
