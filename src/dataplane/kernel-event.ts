// What the kernel's watchers share (monitor.ts runs them; nft-monitor.ts and
// nft-listing.ts watch nftables; judge.ts, the reconciler and the daemon read
// what they report): the node a watcher watches for (which events matter),
// what one event touched, what every watcher is given to report it, and the
// options of the chain and table polls (where
// iptables-legacy gives no event stream, or the listing that stands in for a
// flooded `nft monitor` cannot run). Types only, so that no watcher imports
// monitor.ts back: the watchers' imports run one way.
import type { Logger } from '../log.ts';
import type { LineWatcher, Runner } from '../exec/runner.ts';
import type { MasqSpec, MasqSpec6, RouteSpec } from './model.ts';

export interface MonitorContext {
  /** the underlay interface: its link going down or up matters (host-gw routes go with it) */
  readonly underlay: string;
  /** dual-stack or IPv6 only: the underlay's global IPv6 address events matter too */
  readonly ipv6?: boolean;
  /**
   * false: IPv4 is off (IPv6 only): the underlay's IPv4 address events and iptables' tables do not
   * matter
   */
  readonly ipv4?: boolean;
  /**
   * nftables mode: `nft monitor` watches twill's own tables (of the families on), not iptables'
   * tables
   */
  readonly nftables?: boolean;
}

/** What a kernel event touched, as far as twill can tell from its line. */
export type Touch =
  /**
   * a route with twill's protocol; `route` is undefined when the line holds more than twill writes
   */
  | {
      readonly kind: 'route';
      readonly deleted: boolean;
      readonly dst: string;
      readonly route: RouteSpec | undefined;
    }
  /**
   * an entry of the neighbour family on a twill device: a neighbour (its IP) or an FDB entry (its
   * dst)
   */
  | {
      readonly kind: 'neigh';
      readonly deleted: boolean;
      readonly dev: string;
      readonly ip: string;
      readonly mac: string | undefined;
      readonly permanent: boolean;
    }
  /**
   * rules of one table (twill's chain or the built-in chain jumping to it); in nftables mode, both
   * (twill's tables hold both kinds of chain)
   */
  | { readonly kind: 'chains'; readonly tables: readonly ('nat' | 'filter')[] }
  /** anything else: only a full pass can tell */
  | { readonly kind: 'all' };

/** What every event watcher is given: its process, its log, its node, where its events go. */
export interface WatcherOptions {
  readonly watch: LineWatcher;
  readonly logger: Logger;
  readonly ctx: MonitorContext;
  /** an event (with what it touched; none: look at everything) */
  readonly onEvent: (source: string, touch?: Touch) => void;
}

export interface ChainPollOptions {
  readonly runner: Runner;
  readonly logger: Logger;
  /** the iptables chains' inputs, null while IPv4 is off (then only ip6tables is polled) */
  readonly masq: () => MasqSpec | null;
  /** the ip6tables chains' inputs, null while IPv6 is off (then only iptables is polled) */
  readonly masq6?: () => MasqSpec6 | null;
  readonly intervalMs: number;
  readonly onDrift: (source: string, touch: Touch) => void;
}
