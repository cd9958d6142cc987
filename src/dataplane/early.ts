// A cold start's first routes, written while the acquisition still decodes the listing: with
// host-gw in etcd mode, the route of each peer nothing can refuse (lease/early-peers.ts) goes into
// one `ip -force -batch -` as soon as its chunk of the listing is decoded (IPv4 only: page by
// page as the listing is read, not once it is whole), so the kernel's work
// (5,000 routes: most of a cold start) runs beside the decoding, our own lease's write, the peer
// tracker's admission and the first pass's set-up, on the other core. Only on a node holding
// none of twill's routes (a warm restart has its routes: the first pass finds them); the first
// full pass waits for this batch to end and then reads the kernel and does the rest, as every
// first pass does, and `ip monitor` starts only after it (MonitorHush). Nothing here decides
// what stays: a route whose peer is gone from the store by the first pass is deleted by it.
import type { Logger } from '../log.ts';
import { describeBatchFailures, FORCE_BATCH_ARGS } from '../exec/batch-errors.ts';
import { CommandError, type Feeder, type FedProcess, type Runner } from '../exec/runner.ts';
import { EarlyPeers } from '../lease/early-peers.ts';
import type { EarlyListing, Lease, LeaseRecord } from '../lease/types.ts';
import { monotonicMs } from '../util/clock.ts';
import { ROUTE_PROTOCOL, type RouteSpec } from './model.ts';
import { peerEntries, type EntriesSetup } from './peer-entries.ts';
import { opLines } from './render.ts';

export interface EarlyOptions {
  readonly runner: Runner;
  readonly feed: Feeder;
  /**
   * the node holds no route of twill's (holdsNoRoutes, started before the writer is made: it runs
   * while the interface is chosen); false: nothing is written
   */
  readonly cold: Promise<boolean>;
  readonly peers: EarlyPeers;
  /** host-gw's setup: no vxlan device */
  readonly setup: EntriesSetup;
  readonly logger: Logger;
  readonly signal: AbortSignal;
}

/**
 * One family's batch: its routes (to map a failure report back, and to delete them again), the
 * text queued while the cold check runs,
 * then fed to its process. IPv4 and IPv6 routes go to one process each: the kernel takes each
 * family's routes under its own lock, so a dual-stack node's two run side by side.
 */
interface Lane {
  readonly routes: RouteSpec[];
  queued: string[];
  proc: FedProcess | undefined;
}

/** The early writer: an EarlyListing for the acquisition, then `done` for the first pass. */
export class EarlyRoutes implements EarlyListing {
  private readonly cold: Promise<boolean>;
  private readonly started = monotonicMs();
  private ended = false;
  /** the acquisition's try threw: what was written is taken back */
  private failed = false;
  private open = false;
  /** the node was found warm: nothing is written, nor rendered */
  private warm = false;
  /** when the first line went to a batch */
  private firstSent: number | undefined;
  private readonly lanes: readonly [Lane, Lane] = [
    { routes: [], queued: [], proc: undefined },
    { routes: [], queued: [], proc: undefined },
  ];
  private readonly leases: Lease[] = [];
  /**
   * the keys of `leases`: a list started over tells its records again (begin again), and a route
   * already sent is not sent twice (the first pass sets one whose peer changed meanwhile)
   */
  private readonly sent = new Set<string>();
  private finished: Promise<void> | undefined;
  private readonly o: EarlyOptions;

  constructor(o: EarlyOptions) {
    this.o = o;
    if (o.setup.vxlan || o.setup.vxlan6 || o.setup.backend.type !== 'host-gw')
      throw new Error('EarlyRoutes: host-gw only');
    this.cold = o.cold.then((cold) => {
      if (cold) this.start();
      else this.forget();
      return cold;
    });
  }

  get written(): readonly Lease[] {
    return this.leases;
  }

  begin(keys: readonly string[] | undefined): boolean {
    if (this.ended) return false;
    return this.o.peers.begin(keys);
  }

  take(chunk: readonly LeaseRecord[], o: { readonly last?: boolean } = {}): void {
    if (this.ended || this.warm) return;
    const routes: [RouteSpec[], RouteSpec[]] = [[], []];
    for (const lease of this.o.peers.admit(chunk, o.last)) {
      if (this.sent.has(lease.key)) continue;
      this.sent.add(lease.key);
      const e = peerEntries(this.o.setup, lease);
      [e.route, e.route6].forEach((route, family) => route && routes[family]?.push(route));
      this.leases.push(lease);
    }
    this.lanes.forEach((lane, family) => {
      const these = routes[family] ?? [];
      if (these.length === 0) return;
      lane.routes.push(...these);
      this.send(lane, batchText(these, 'add'));
    });
  }

  end(o: { failed?: boolean } = {}): void {
    const failed = o.failed === true;
    if (this.ended) {
      // the try that took the listing ended well (it lost a race for a subnet), but a later one,
      // or what start-up does with the lease, failed: what went in goes again
      if (failed && !this.failed) {
        this.failed = true;
        this.finished = (this.finished ?? Promise.resolve()).then(() => this.takeBack());
      }
      return;
    }
    this.ended = true;
    this.failed = failed;
    this.finished = this.finish();
  }

  /**
   * Settles when the batches have ended and are logged (at once when nothing was written); never
   * rejects: what failed here the first pass writes. After it nothing is taken back: the lease is
   * ours, and its first pass judges what was written.
   */
  done(): Promise<void> {
    this.end();
    // the acquisition is over: no try needs the leases written any more
    return (this.finished ?? Promise.resolve()).then(() => {
      this.leases.length = 0;
      this.sent.clear();
      for (const lane of this.lanes) lane.routes.length = 0;
    });
  }

  /** Nothing is written: what was queued and kept for it goes. */
  private forget(): void {
    this.warm = true;
    this.leases.length = 0;
    this.sent.clear();
    for (const lane of this.lanes) {
      lane.routes.length = 0;
      lane.queued = [];
    }
  }

  /**
   * The node is cold: each family's batch is started (its process start off the path of the
   * first routes, which usually come later), what was queued goes to it, and what comes later as
   * it comes.
   */
  private start(): void {
    this.open = true;
    const { setup } = this.o;
    this.lanes.forEach((lane, family) => {
      if (family === 0 ? setup.v4 : setup.v6) this.batch(lane);
      for (const input of lane.queued.splice(0)) this.send(lane, input);
    });
  }

  private batch(lane: Lane): FedProcess {
    lane.proc ??= this.o.feed('ip', FORCE_BATCH_ARGS, { signal: this.o.signal, collect: true });
    return lane.proc;
  }

  private send(lane: Lane, input: string): void {
    if (!this.open) {
      lane.queued.push(input);
      return;
    }
    const proc = this.batch(lane);
    this.firstSent ??= monotonicMs();
    proc.write(input);
  }

  private async finish(): Promise<void> {
    if (!(await this.cold)) {
      this.forget();
      return;
    }
    const failures = (
      await Promise.all(this.lanes.map(async (lane) => (lane.proc ? ended(lane) : [])))
    ).flat();
    const added = this.lanes.reduce((n, lane) => n + lane.routes.length, 0) - failures.length;
    if (added + failures.length === 0) return;
    if (this.failed) {
      await this.takeBack();
      return;
    }
    const now = monotonicMs();
    this.o.logger.info(
      {
        ops: { 'route add': Math.max(0, added) },
        // from the writer's start (once the interface is chosen) and from the first line sent
        durationMs: Math.round(now - this.started),
        writeMs: Math.round(now - (this.firstSent ?? now)),
        ...(failures.length > 0 ? { failures: failures.slice(0, 5) } : {}),
      },
      'dataplane written early',
    );
  }

  /**
   * The acquisition failed after the routes went in (another live node holds our PublicIP, the
   * subnets ran out, the store went away): no lease, so no first pass will judge them, and a peer
   * refused meanwhile would keep its route. They go again. Not when the daemon is stopping (its
   * signal aborted): a stop leaves the kernel as it is, and the next start, finding the node warm,
   * judges them in its first pass.
   */
  private async takeBack(): Promise<void> {
    const input = this.lanes.map((lane) => batchText(lane.routes, 'delete')).join('');
    const count = this.lanes.reduce((n, lane) => n + lane.routes.length, 0);
    if (count === 0 || this.o.signal.aborted) return;
    for (const lane of this.lanes) lane.routes.length = 0;
    this.leases.length = 0;
    this.sent.clear();
    try {
      await this.o.runner('ip', FORCE_BATCH_ARGS, {
        input,
        signal: this.o.signal,
        timeoutMs: 60_000,
      });
    } catch (err) {
      // -force: a route already gone is a failed line, not a reason to stop
      this.o.logger.debug({ err: String(err).slice(0, 200) }, 'early routes: some were not there');
    }
    this.o.logger.info(
      { routes: count },
      'acquiring the lease failed: the routes written early are deleted again',
    );
  }
}

/** `ip -batch` text adding or deleting `routes`, as render.ts writes a pass's route ops. */
function batchText(routes: readonly RouteSpec[], action: 'add' | 'delete'): string {
  return routes.map((route) => routeLine(route, action)).join('');
}

function routeLine(route: RouteSpec, action: 'add' | 'delete'): string {
  return `${opLines({ kind: 'route', action, phase: 'ip-post', route }).join('\n')}\n`;
}

/** Ends a lane's batch: its failed lines (none when every line went in). */
async function ended(lane: Lane): Promise<string[]> {
  try {
    await lane.proc?.end();
    return [];
  } catch (err) {
    const failures =
      err instanceof CommandError
        ? describeBatchFailures(
            err.stderr,
            lane.routes.map((r) => routeLine(r, 'add').trimEnd()),
          )
        : [];
    return failures.length > 0 ? failures : [String(err)];
  }
}

/**
 * No route of twill's in a family we run: a node that never ran, or was cleaned up. False when
 * the kernel cannot be read (then nothing is written early, and `ip monitor` starts at once).
 * The daemon asks on every start (a cold one starts `ip monitor` after its first pass); on a warm
 * node it reads 5,000 routes beside the lease's acquisition.
 */
export async function holdsNoRoutes(o: {
  runner: Runner;
  logger: Logger;
  signal: AbortSignal;
  v4: boolean;
  v6: boolean;
}): Promise<boolean> {
  const families = [...(o.v4 ? ['-4'] : []), ...(o.v6 ? ['-6'] : [])];
  try {
    const listings = await Promise.all(
      families.map((f) =>
        o.runner('ip', [f, 'route', 'show', 'proto', String(ROUTE_PROTOCOL)], {
          signal: o.signal,
        }),
      ),
    );
    return listings.every((l) => l.stdout.trim() === '');
  } catch (err) {
    o.logger.debug({ err: String(err) }, 'early routes: the kernel could not be read');
    return false;
  }
}
