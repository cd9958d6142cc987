// A cold start's first entries, written while the acquisition still decodes the listing (etcd
// mode): the entries of each peer nothing can refuse (lease/early-peers.ts) go into `ip -force
// -batch -` (one per family) and, with vxlan, `bridge -force -batch -` as soon as its chunk of the
// listing is decoded, so the kernel's work (5,000 peers' entries: most of a cold start) runs beside
// the decoding, our own lease's write, the peer tracker's admission and the first pass's set-up, on
// the other core. host-gw's routes go page by page as the listing is read (IPv4) or once it is
// whole (dual-stack); vxlan's once the listing is whole (its VtepMACs are swept first), through
// the vxlan device(s) made here as soon as the node is found cold, exactly as a pass makes them
// but for the address (our subnet's: the first pass adds it). Only on a node holding none of
// twill's routes or devices (a warm restart has them: the first pass finds them); the first full
// pass waits for these batches to end and then reads the kernel and does the rest, as every first
// pass does, and `ip monitor` starts only after it (MonitorHush). Nothing here decides what stays:
// an entry whose peer is gone from the store by the first pass is deleted by it, as a device that
// differs from what the pass wants is made again.
import type { Logger } from '../log.ts';
import { describeBatchFailures, failedLines, FORCE_BATCH_ARGS } from '../exec/batch-errors.ts';
import { CommandError, type Feeder, type FedProcess, type Runner } from '../exec/runner.ts';
import { EarlyPeers } from '../lease/early-peers.ts';
import type { EarlyListing, Lease, LeaseRecord } from '../lease/types.ts';
import { monotonicMs } from '../util/clock.ts';
import { opLogLabel, ROUTE_PROTOCOL, type BareVxlanDevice, type Op } from './model.ts';
import { peerEntries, type EntriesSetup } from './peer-entries.ts';
import { deviceAddLines, opLines } from './render.ts';

export interface EarlyOptions {
  readonly runner: Runner;
  readonly feed: Feeder;
  /**
   * the node holds no route or device of twill's (isCold, started before the writer is made: it
   * runs while the interface is chosen); false: nothing is written
   */
  readonly cold: Promise<boolean>;
  readonly peers: EarlyPeers;
  /** the entries' setup: with vxlan, its devices (bareVxlanDevice), made here */
  readonly setup: EntriesSetup;
  readonly logger: Logger;
  readonly signal: AbortSignal;
}

/**
 * One batch: its ops (a line each, to map a failure report back and to take them back), the
 * text queued until the node is found cold and the devices are made, then fed to its process.
 * IPv4 and IPv6 go to one `ip` each (the kernel takes each family's routes under its own lock, so
 * a dual-stack node's two run side by side), the FDB entries of both to one `bridge`.
 */
interface Lane {
  readonly file: 'ip' | 'bridge';
  readonly ops: Op[];
  queued: string[];
  proc: FedProcess | undefined;
}

const IPV4 = 0;
const IPV6 = 1;
const FDB = 2;

/** The early writer: an EarlyListing for the acquisition, then `done` for the first pass. */
export class EarlyEntries implements EarlyListing {
  /** the node is cold and its devices are made: the lanes may be fed */
  private readonly ready: Promise<boolean>;
  private readonly started = monotonicMs();
  private ended = false;
  /** the acquisition's try threw: what was written is taken back */
  private failed = false;
  private open = false;
  /** the node was found warm (or its devices could not be made): nothing is written nor rendered */
  private warm = false;
  /** when the first line went to a batch */
  private firstSent: number | undefined;
  private readonly lanes: readonly [Lane, Lane, Lane] = [
    { file: 'ip', ops: [], queued: [], proc: undefined },
    { file: 'ip', ops: [], queued: [], proc: undefined },
    { file: 'bridge', ops: [], queued: [], proc: undefined },
  ];
  /** the vxlan devices to make, and the ops that made them once they are */
  private readonly devices: readonly BareVxlanDevice[];
  private deviceOps: Op[] = [];
  private readonly leases: Lease[] = [];
  /**
   * the keys of `leases`: a list started over tells its records again (begin again), and an entry
   * already sent is not sent twice (the first pass sets one whose peer changed meanwhile)
   */
  private readonly sent = new Set<string>();
  private finished: Promise<void> | undefined;
  private readonly o: EarlyOptions;

  constructor(o: EarlyOptions) {
    this.o = o;
    const { setup } = o;
    const vxlan = setup.backend.type === 'vxlan';
    if (vxlan !== (setup.vxlan !== null || setup.vxlan6 !== null))
      throw new Error('EarlyEntries: vxlan needs its devices, host-gw none');
    this.devices = [setup.vxlan, setup.vxlan6].filter((d) => d !== null);
    this.ready = o.cold
      .then(async (cold) => cold && (await this.start()))
      .catch(() => false)
      .then((ready) => {
        if (ready) this.feedQueued();
        else this.forget();
        return ready;
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
    const ops: [Op[], Op[], Op[]] = [[], [], []];
    for (const lease of this.o.peers.admit(chunk, o.last)) {
      if (this.sent.has(lease.key)) continue;
      this.sent.add(lease.key);
      const e = peerEntries(this.o.setup, lease);
      // in each family's batch a neighbour before its route, as a pass writes them
      if (e.neigh)
        ops[IPV4].push({ kind: 'neigh', action: 'add', phase: 'ip-post', neigh: e.neigh });
      if (e.route)
        ops[IPV4].push({ kind: 'route', action: 'add', phase: 'ip-post', route: e.route });
      if (e.neigh6)
        ops[IPV6].push({ kind: 'neigh', action: 'add', phase: 'ip-post', neigh: e.neigh6 });
      if (e.route6)
        ops[IPV6].push({ kind: 'route', action: 'add', phase: 'ip-post', route: e.route6 });
      for (const fdb of [e.fdb, e.fdb6])
        if (fdb) ops[FDB].push({ kind: 'fdb', action: 'add', phase: 'bridge', fdb });
      this.leases.push(lease);
    }
    this.lanes.forEach((lane, i) => {
      const these = ops[i] ?? [];
      if (these.length === 0) return;
      lane.ops.push(...these);
      this.send(lane, batchText(these));
    });
  }

  end(o: { failed?: boolean } = {}): void {
    if (this.ended) return;
    this.ended = true;
    this.failed = o.failed === true;
    this.finished = this.finish();
  }

  /**
   * Settles when the batches have ended and are logged (at once when nothing was written); never
   * rejects: what failed here the first pass writes.
   */
  done(): Promise<void> {
    this.end();
    // the acquisition is over: no try needs the leases written any more
    return (this.finished ?? Promise.resolve()).then(() => {
      this.leases.length = 0;
      this.sent.clear();
    });
  }

  /** Nothing is written: what was queued and kept for it goes. */
  private forget(): void {
    this.warm = true;
    this.leases.length = 0;
    this.sent.clear();
    for (const lane of this.lanes) {
      lane.ops.length = 0;
      lane.queued = [];
    }
  }

  /**
   * The node is cold: each batch's process is started (off the path of the first entries, which
   * usually come later), and the devices made meanwhile; false when they could not be (nothing
   * is written then: the first pass makes them and writes everything).
   */
  private async start(): Promise<boolean> {
    const { setup } = this.o;
    if (setup.v4) this.batch(this.lanes[IPV4]);
    if (setup.v6) this.batch(this.lanes[IPV6]);
    if (this.devices.length === 0) return true;
    this.batch(this.lanes[FDB]);
    const ops: Op[] = this.devices.flatMap((d) => [
      { kind: 'link', action: 'add', phase: 'ip-pre', device: { ...d, address: '' } },
      { kind: 'link', action: 'change', phase: 'ip-pre', name: d.name, set: { up: true } },
    ]);
    const lines = this.devices.flatMap((d) => [...deviceAddLines(d), `link set ${d.name} up`]);
    try {
      await this.o.runner('ip', ['-batch', '-'], {
        input: `${lines.join('\n')}\n`,
        signal: this.o.signal,
        timeoutMs: 10_000,
      });
    } catch (err) {
      this.o.logger.info(
        { err: String(err).slice(0, 300) },
        'early entries: the vxlan device could not be made; the first pass writes everything',
      );
      return false;
    }
    this.deviceOps = ops;
    return true;
  }

  private batch(lane: Lane): FedProcess {
    lane.proc ??= this.o.feed(lane.file, FORCE_BATCH_ARGS, {
      signal: this.o.signal,
      collect: true,
    });
    return lane.proc;
  }

  /** The node is ready: what was queued goes to its batches, and what comes later as it comes. */
  private feedQueued(): void {
    this.open = true;
    for (const lane of this.lanes)
      for (const input of lane.queued.splice(0)) this.send(lane, input);
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
    const ready = await this.ready;
    const outcomes = await Promise.all(this.lanes.map((lane) => ended(lane)));
    if (!ready) return;
    const ops = [
      ...this.deviceOps,
      ...this.lanes.flatMap((lane, i) =>
        lane.ops.filter((_, n) => !outcomes[i]?.failed.has(n + 1)),
      ),
    ];
    const failures = outcomes.flatMap((x) => x.messages);
    if (ops.length + failures.length === 0) return;
    if (this.failed) {
      await this.takeBack();
      return;
    }
    const byKind: Record<string, number> = {};
    for (const op of ops) {
      const key = `${opLogLabel(op)} ${op.action}`;
      byKind[key] = (byKind[key] ?? 0) + 1;
    }
    const now = monotonicMs();
    this.o.logger.info(
      {
        ops: byKind,
        // from the writer's start (once the interface is chosen) and from the first line sent
        durationMs: Math.round(now - this.started),
        writeMs: Math.round(now - (this.firstSent ?? now)),
        ...(failures.length > 0 ? { failures: failures.slice(0, 5) } : {}),
      },
      'dataplane written early',
    );
    for (const lane of this.lanes) lane.ops.length = 0;
  }

  /**
   * The acquisition failed after the entries went in (another live node holds our PublicIP, the
   * subnets ran out, the store went away): no lease, so no first pass will judge them, and a peer
   * refused meanwhile would keep its entries. They go again: the devices made here (with every
   * entry on them) and the routes through the underlay.
   */
  private async takeBack(): Promise<void> {
    const made = new Set(
      this.deviceOps.flatMap((op) => (op.kind === 'link' ? [linkName(op)] : [])),
    );
    const routes = this.lanes.flatMap((lane) =>
      lane.ops.flatMap((op) => (op.kind === 'route' && !made.has(op.route.dev) ? [op] : [])),
    );
    const lines = [
      ...[...made].map((name) => `link del ${name}`),
      ...routes.flatMap((op) => opLines({ ...op, action: 'delete' })),
    ];
    const entries = this.lanes.reduce((n, lane) => n + lane.ops.length, 0);
    for (const lane of this.lanes) lane.ops.length = 0;
    this.deviceOps = [];
    this.leases.length = 0;
    this.sent.clear();
    try {
      await this.o.runner('ip', FORCE_BATCH_ARGS, {
        input: `${lines.join('\n')}\n`,
        signal: this.o.signal,
        timeoutMs: 60_000,
      });
    } catch (err) {
      // -force: an entry already gone is a failed line, not a reason to stop
      this.o.logger.debug({ err: String(err).slice(0, 200) }, 'early entries: some were not there');
    }
    this.o.logger.info(
      { entries, devices: made.size },
      'acquiring the lease failed: the entries written early are deleted again',
    );
  }
}

function linkName(op: Op & { kind: 'link' }): string {
  return op.action === 'add' ? op.device.name : op.name;
}

/** `ip -batch` / `bridge -batch` text of `ops`, as render.ts writes a pass's. */
function batchText(ops: readonly Op[]): string {
  return `${ops.flatMap(opLines).join('\n')}\n`;
}

/**
 * Ends a lane's batch (one never started has nothing to end): its failed lines by number (1-based,
 * one op a line) and what it said of them (none when every line went in).
 */
async function ended(lane: Lane): Promise<{ failed: Set<number>; messages: string[] }> {
  try {
    await lane.proc?.end();
    return { failed: new Set(), messages: [] };
  } catch (err) {
    if (!(err instanceof CommandError))
      return { failed: new Set(lane.ops.map((_, n) => n + 1)), messages: [String(err)] };
    const lines = lane.ops.flatMap(opLines);
    const messages = describeBatchFailures(err.stderr, lines);
    return {
      failed: new Set(failedLines(err.stderr).keys()),
      messages: messages.length > 0 ? messages : [String(err)],
    };
  }
}

/**
 * No route of twill's in a family we run, and none of `devices` (twill's vxlan devices): a node
 * that never ran, or was cleaned up. False when the kernel cannot be read (then nothing is
 * written early).
 */
export async function isCold(o: {
  runner: Runner;
  logger: Logger;
  signal: AbortSignal;
  v4: boolean;
  v6: boolean;
  devices: readonly string[];
}): Promise<boolean> {
  const families = [...(o.v4 ? ['-4'] : []), ...(o.v6 ? ['-6'] : [])];
  try {
    const [links, ...listings] = await Promise.all([
      o.devices.length > 0 ? o.runner('ip', ['-o', 'link', 'show'], { signal: o.signal }) : null,
      ...families.map((f) =>
        o.runner('ip', [f, 'route', 'show', 'proto', String(ROUTE_PROTOCOL)], {
          signal: o.signal,
        }),
      ),
    ]);
    const names = new Set(
      (links?.stdout ?? '').split('\n').flatMap((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1] ?? []),
    );
    return listings.every((l) => l?.stdout.trim() === '') && !o.devices.some((d) => names.has(d));
  } catch (err) {
    o.logger.debug({ err: String(err) }, 'early entries: the kernel could not be read');
    return false;
  }
}
