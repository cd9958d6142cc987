// A cold start's first routes, written while the acquisition still decodes the listing: with
// host-gw in etcd mode, the route of each peer nothing can refuse (lease/early-peers.ts) goes into
// one `ip -force -batch -` as soon as its chunk of the listing is decoded, so the kernel's work
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
import { ROUTE_PROTOCOL } from './model.ts';
import { peerEntries, type EntriesSetup } from './peer-entries.ts';
import { opLines } from './render.ts';

export interface EarlyOptions {
  readonly runner: Runner;
  readonly feed: Feeder;
  readonly peers: EarlyPeers;
  /** host-gw's setup: no vxlan device */
  readonly setup: EntriesSetup;
  readonly logger: Logger;
  readonly signal: AbortSignal;
}

/** The early writer: an EarlyListing for the acquisition, then `done` for the first pass. */
export class EarlyRoutes implements EarlyListing {
  private readonly cold: Promise<boolean>;
  private readonly started = monotonicMs();
  private ended = false;
  private proc: FedProcess | undefined;
  /** the lines while the cold check runs */
  private queued: string[] = [];
  private lines: string[] = [];
  private readonly leases: Lease[] = [];
  private finished: Promise<void> | undefined;
  private readonly o: EarlyOptions;

  constructor(o: EarlyOptions) {
    this.o = o;
    if (o.setup.vxlan || o.setup.vxlan6 || o.setup.backend.type !== 'host-gw')
      throw new Error('EarlyRoutes: host-gw only');
    this.cold = this.isCold();
  }

  get written(): readonly Lease[] {
    return this.leases;
  }

  begin(keys: readonly string[]): boolean {
    if (this.ended) return false;
    this.o.peers.begin(keys);
    return true;
  }

  take(chunk: readonly LeaseRecord[]): void {
    if (this.ended) return;
    const text: string[] = [];
    for (const record of chunk) {
      const lease = this.o.peers.admit(record);
      if (!lease) continue;
      const e = peerEntries(this.o.setup, lease);
      for (const route of [e.route, e.route6])
        if (route) text.push(...opLines({ kind: 'route', action: 'add', phase: 'ip-post', route }));
      this.leases.push(lease);
    }
    if (text.length === 0) return;
    this.lines.push(...text);
    const input = `${text.join('\n')}\n`;
    if (this.proc) this.proc.write(input);
    else this.queued.push(input);
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.finished = this.finish();
  }

  /**
   * Settles when the batch has ended and is logged (at once when nothing was written); never
   * rejects: what failed here the first pass writes.
   */
  done(): Promise<void> {
    this.end();
    // the acquisition is over: no try needs the leases written any more
    return (this.finished ?? Promise.resolve()).then(() => {
      this.leases.length = 0;
    });
  }

  /** No route of twill's in a family we run: a node that never ran, or was cleaned up. */
  private async isCold(): Promise<boolean> {
    const { runner, setup, signal } = this.o;
    const families = [...(setup.v4 ? ['-4'] : []), ...(setup.v6 ? ['-6'] : [])];
    try {
      const listings = await Promise.all(
        families.map((f) =>
          runner('ip', [f, 'route', 'show', 'proto', String(ROUTE_PROTOCOL)], { signal }),
        ),
      );
      const cold = listings.every((l) => l.stdout.trim() === '');
      if (cold && !this.ended) this.open();
      return cold;
    } catch (err) {
      this.o.logger.debug({ err: String(err) }, 'early routes: the kernel could not be read');
      return false;
    }
  }

  private open(): void {
    this.proc = this.o.feed('ip', FORCE_BATCH_ARGS, { signal: this.o.signal, collect: true });
    for (const input of this.queued) this.proc.write(input);
    this.queued = [];
  }

  private async finish(): Promise<void> {
    const cold = await this.cold;
    // the cold check ended after the last chunk: what it queued goes now
    if (cold && !this.proc && this.lines.length > 0) this.open();
    const proc = this.proc;
    if (!cold || !proc) {
      this.leases.length = 0;
      return;
    }
    let failures: string[] = [];
    try {
      await proc.end();
    } catch (err) {
      failures =
        err instanceof CommandError ? describeBatchFailures(err.stderr, this.lines) : [String(err)];
      if (failures.length === 0) failures = [String(err)];
    }
    const added = this.lines.length - failures.length;
    this.o.logger.info(
      {
        ops: { 'route add': Math.max(0, added) },
        durationMs: Math.round(monotonicMs() - this.started),
        ...(failures.length > 0 ? { failures: failures.slice(0, 5) } : {}),
      },
      'dataplane written early',
    );
    this.lines = [];
  }
}
