// render: a plan (typed ops) as the text the kernel's tools read, pure. The
// one place that knows `ip -batch`, `bridge -batch` and iptables-restore
// syntax for what twill writes (nft.ts words the nftables tables): diff and
// status work on typed ops, and this module turns them into at most seven
// batches (a spread plan's ip (post) a few more, below) — ip (pre), bridge,
// ip (post), `nft -f -` for each table written,
// iptables-restore --noflush, ip6tables-restore --noflush, `nft -f -` for each
// table deleted — in that order, and at most two `nft -f -` in all (one per
// table: a table is written or deleted, never both). One process per table,
// so a family nft cannot write (a kernel without ip6 nat) does not cost the
// other its table; each table is still replaced in one transaction. The
// writes come before the chains and the deletes after them, so switching
// mode either way never leaves a gap without masquerade: to nftables mode the
// new tables are in place before the restores remove the chains, back to
// iptables mode the restores put the chains back before the tables go.
// IPv6 lines share the ip and bridge batches: `ip` and `bridge` take each
// line's family from its addresses (there is no per-line `-6` in a batch,
// and none is needed).
// A big plan (a cold start, a device made again: an ip (post) batch of at
// least SPREAD_MIN_OPS) may be spread over processes that run at once
// (`ways`, one per core): the neighbours of its new routes run beside the
// bridge batch, and its routes, split in `ways` parts, after both (with the
// other neighbours), so a route still comes after its neighbour and FDB
// entry, and a changed neighbour after its FDB entry. With routes of both
// families over two ways the IPv4 routes wait only for IPv4's neighbours
// and FDB entries (`spread`). Each batch carries its stage: a lane runs its
// stages in order and the batches of one stage at once (apply.ts). A batch
// made from ops renders its text only when asked, whole or piece by piece
// (`Batch`).
import { FORCE_BATCH_ARGS } from '../exec/batch-errors.ts';
import {
  isIpv6Device,
  opFamily,
  ROUTE_PROTOCOL,
  type Op,
  type Phase,
  type RouteSpec,
} from './model.ts';
import { nftTableLines } from './nft.ts';

/**
 * One process's input: the ops' lines, rendered only when asked for. A cold start's 15,000 to
 * 30,000 lines took 25-55 ms to render (2 cores), time the kernel sat idle when every batch was
 * rendered before the first process started; `pieces` lets apply.ts start a process and feed it
 * piece by piece, the rendering of one piece beside the kernel's work on the one before.
 */
export class Batch {
  readonly phase: Phase;
  readonly file: string;
  readonly args: readonly string[];
  /** when it runs in its lane: after every batch of a lower stage, beside those of its own */
  readonly stage: number;
  /** how many ops (or, for a batch made from text, lines) it holds */
  readonly size: number;
  readonly #ops: readonly Op[];
  #lines: string[] | undefined;

  constructor(
    o: { phase: Phase; file: string; args: readonly string[]; stage: number },
    what: { ops: readonly Op[] } | { lines: string[] },
  ) {
    this.phase = o.phase;
    this.file = o.file;
    this.args = o.args;
    this.stage = o.stage;
    this.#ops = 'ops' in what ? what.ops : [];
    this.#lines = 'lines' in what ? what.lines : undefined;
    this.size = 'ops' in what ? what.ops.length : what.lines.length;
  }

  /** the input's lines, to map a failure report ("line 3") back to what failed */
  get lines(): readonly string[] {
    this.#lines ??= this.#ops.flatMap(opLines);
    return this.#lines;
  }

  /** the whole input, a line each */
  get input(): string {
    return `${this.lines.join('\n')}\n`;
  }

  /**
   * The input in pieces of at most `max` ops' lines each, each rendered as it is asked for and not
   * kept: `lines` renders them again only for a batch that failed (a cold start's 30,000 lines,
   * 2.3 million characters at 5,000 dual-stack vxlan peers, would otherwise live as long as its
   * pass, for the collector to copy and promote).
   */
  *pieces(max: number): Generator<string> {
    if (this.#lines) {
      yield this.input;
      return;
    }
    const ops = this.#ops;
    for (let i = 0; i < ops.length; i += max) {
      const piece: string[] = [];
      const end = Math.min(i + max, ops.length);
      for (let j = i; j < end; j++) for (const line of opLines(ops[j] as Op)) piece.push(line);
      yield `${piece.join('\n')}\n`;
    }
  }
}

/**
 * An ip (post) batch of at least this many ops (a line each) is spread over `ways` processes.
 * Below it the processes a spread adds (one per way) would cost about what they save: a second
 * `ip` over 5,000 routes saved 30 % of the batch (about 130 ms of 420, 2 cores), and a process
 * start costs 5-20 ms.
 */
export const SPREAD_MIN_OPS = 1_000;

/** The stage of the ip (post) batch, and of a spread plan's routes: after the FDB batch's. */
export const ROUTE_STAGE = 2;

const NFT_ARGS = ['-f', '-'];

function routeText(r: RouteSpec): string {
  const metric = r.metric ? ` metric ${r.metric}` : '';
  return `${r.dst} via ${r.via} dev ${r.dev}${r.onlink ? ' onlink' : ''} proto ${ROUTE_PROTOCOL}${metric}`;
}

/**
 * The op's lines: one `ip`/`bridge` command without the program name, the iptables-restore lines
 * (without the *table / COMMIT frame), or a table's `nft -f -` transaction.
 */
export function opLines(op: Op): string[] {
  switch (op.kind) {
    case 'link': {
      if (op.action === 'delete') return [`link del ${op.name}`];
      if (op.action === 'change') {
        const s = op.set;
        const what = 'up' in s ? 'up' : 'mac' in s ? `address ${s.mac}` : `mtu ${s.mtu}`;
        return [`link set ${op.name} ${what}`];
      }
      const d = op.device;
      const flags = `${d.learning ? '' : ' nolearning'}${d.gbp ? ' gbp' : ''}`;
      const add = `link add ${d.name} mtu ${d.mtu} address ${d.mac} type vxlan id ${d.vni} local ${d.local} dev ${d.underlay} dstport ${d.port}${flags}`;
      // The IPv6 device gets no link-local address (set before it goes up; `link add` refuses
      // addrgenmode): the kernel would otherwise make one, run duplicate address detection on
      // it and send router and multicast listener solicitations into a tunnel that has no
      // destination for them. Its one address is the /128 below, and pod traffic needs no other.
      return isIpv6Device(d) ? [add, `link set ${d.name} addrgenmode none`] : [add];
    }
    case 'addr': {
      // an IPv6 address is usable at once: no duplicate address detection (the /128 is ours by
      // lease, and a tentative address could not be the source of host-to-pod traffic for a second)
      const nodad = op.action === 'add' && op.address.includes(':') ? ' nodad' : '';
      return [`addr ${op.action === 'add' ? 'add' : 'del'} ${op.address} dev ${op.dev}${nodad}`];
    }
    case 'route': {
      const verb = op.action === 'add' ? 'add' : op.action === 'change' ? 'replace' : 'del';
      return [`route ${verb} ${routeText(op.route)}`];
    }
    case 'neigh': {
      const n = op.neigh;
      if (op.action === 'delete') return [`neigh del ${n.ip} dev ${n.dev}`];
      return [`neigh replace ${n.ip} lladdr ${n.mac} dev ${n.dev} nud permanent`];
    }
    case 'fdb': {
      const f = op.fdb;
      if (op.action === 'add')
        return [`fdb append ${f.mac} dev ${f.dev} dst ${f.dst} self permanent`];
      return [`fdb del ${f.mac} dev ${f.dev}${f.dst === undefined ? '' : ` dst ${f.dst}`} self`];
    }
    case 'chain':
      // declaring a chain that exists empties it
      if (op.action === 'delete') return [`:${op.chain} - [0:0]`, `-X ${op.chain}`];
      return [`:${op.chain} - [0:0]`, ...op.rules];
    case 'jump':
      return [`${op.action === 'add' ? '-A' : '-D'} ${op.parent} ${op.rule}`];
    case 'nft':
      return nftTableLines(op.table, op.want);
  }
}

/**
 * Frames the iptables ops into one iptables-restore --noflush payload ('' when none); with
 * `ipv6`, the ip6tables ops into one ip6tables-restore payload.
 */
export function renderRestore(ops: readonly Op[], o: { ipv6?: boolean } = {}): string {
  const parts: string[] = [];
  const family = o.ipv6 === true;
  for (const table of ['nat', 'filter'] as const) {
    const lines = ops.flatMap((op) =>
      (op.kind === 'chain' || op.kind === 'jump') &&
      op.table === table &&
      (op.ipv6 === true) === family
        ? opLines(op)
        : [],
    );
    if (lines.length > 0) parts.push(`*${table}`, ...lines, 'COMMIT');
  }
  return parts.length === 0 ? '' : `${parts.join('\n')}\n`;
}

type AddBatch = (phase: Phase, file: string, stage: number, these: readonly Op[]) => void;

/**
 * A big plan's bridge and ip (post) batches over `ways` processes (see the header). A neighbour
 * whose route comes in this plan runs beside the FDB batch (the route waits for both); one for a
 * route already there runs after it, as unspread, so its new MAC never meets an FDB entry not yet
 * updated. With routes of both families (a dual-stack cold start) over two processes, the IPv4
 * routes, the kernel's longest work, wait only for the IPv4 neighbours and FDB: the IPv6 FDB batch
 * runs beside those, and the IPv6 neighbours and then routes in one process beside the IPv4 routes
 * (measured on 2 cores only; over more, both families' routes are split as one list).
 */
function spread(bridge: readonly Op[], post: readonly Op[], ways: number, add: AddBatch): void {
  // each device's gateways (no key made per entry: a cold start has 10,000)
  const routed = new Map<string, Set<string>>();
  const [routes4, routes6]: [Op[], Op[]] = [[], []];
  for (const op of post)
    if (op.kind === 'route') {
      const { dev, via } = op.route;
      const vias = routed.get(dev);
      if (vias) vias.add(via);
      else routed.set(dev, new Set([via]));
      (opFamily(op) === 6 ? routes6 : routes4).push(op);
    }
  const [early4, early6, later, rest]: [Op[], Op[], Op[], Op[]] = [[], [], [], []];
  for (const op of post)
    if (op.kind !== 'neigh') {
      if (op.kind !== 'route') rest.push(op);
    } else if (routed.get(op.neigh.dev)?.has(op.neigh.ip) !== true) later.push(op);
    else (opFamily(op) === 6 ? early6 : early4).push(op);
  if (ways === 2 && routes4.length > 0 && routes6.length > 0) {
    const [fdb4, fdb6] = [
      bridge.filter((op) => opFamily(op) !== 6),
      bridge.filter((op) => opFamily(op) === 6),
    ];
    add('bridge', 'bridge', 1, fdb4);
    add('bridge', 'bridge', 1, fdb6);
    add('ip-post', 'ip', 1, early4);
    add('ip-post', 'ip', ROUTE_STAGE, later);
    // the IPv6 process takes the other core: the IPv4 routes in one
    add('ip-post', 'ip', ROUTE_STAGE, routes4);
    add('ip-post', 'ip', ROUTE_STAGE, [...early6, ...routes6]);
  } else {
    add('bridge', 'bridge', 1, bridge);
    add('ip-post', 'ip', 1, [...early4, ...early6]);
    add('ip-post', 'ip', ROUTE_STAGE, later);
    const routes = [...routes4, ...routes6];
    const part = Math.ceil(routes.length / ways);
    for (let i = 0; i < routes.length; i += part)
      add('ip-post', 'ip', ROUTE_STAGE, routes.slice(i, i + part));
  }
  add('ip-post', 'ip', ROUTE_STAGE + 1, rest);
}

/**
 * The batches for a plan, in run order; phases without ops are left out. With `ways` > 1 a big
 * ip (post) batch is spread over that many processes (see the header).
 */
export function renderBatches(ops: readonly Op[], o: { ways?: number } = {}): Batch[] {
  const batches: Batch[] = [];
  // every ip and bridge op is at least one line
  const add = (phase: Phase, file: string, stage: number, these: readonly Op[]): void => {
    if (these.length > 0)
      batches.push(new Batch({ phase, file, args: FORCE_BATCH_ARGS, stage }, { ops: these }));
  };
  // one pass over a plan that may hold 30,000 ops; the masquerade's are a few
  const [pre, bridge, post, masq]: [Op[], Op[], Op[], Op[]] = [[], [], [], []];
  for (const op of ops)
    if (op.phase === 'ip-pre') pre.push(op);
    else if (op.phase === 'bridge') bridge.push(op);
    else if (op.phase === 'ip-post') post.push(op);
    else masq.push(op);
  add('ip-pre', 'ip', 0, pre);
  const ways = Math.max(1, Math.floor(o.ways ?? 1));
  if (ways > 1 && post.length >= SPREAD_MIN_OPS) spread(bridge, post, ways, add);
  else {
    add('bridge', 'bridge', 1, bridge);
    add('ip-post', 'ip', ROUTE_STAGE, post);
  }
  // the masquerade's lane runs one batch at a time, in this order
  let masqStage = 0;
  // one transaction per table: all of a table applies, or none of it, whatever the other does
  const nft = (write: boolean): void => {
    for (const op of masq)
      if (op.kind === 'nft' && (op.action !== 'delete') === write) {
        const lines = opLines(op);
        const stage = masqStage++;
        batches.push(new Batch({ phase: 'nft', file: 'nft', args: NFT_ARGS, stage }, { lines }));
      }
  };
  nft(true);
  for (const [file, ipv6] of [
    ['iptables-restore', false],
    ['ip6tables-restore', true],
  ] as const) {
    const restore = renderRestore(masq, { ipv6 });
    if (restore !== '')
      batches.push(
        new Batch(
          { phase: 'iptables', file, args: ['--noflush', '-w', '5'], stage: masqStage++ },
          { lines: restore.trimEnd().split('\n') },
        ),
      );
  }
  nft(false);
  return batches;
}
