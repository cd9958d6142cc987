// A big plan spread over processes that run at once (render.ts, apply.ts): which lines go to which
// batch and stage, that the spread batches hold exactly the lines of the unspread ones, and that
// applyOps runs a lane stage by stage: the neighbours beside the FDB batch, the routes' parts
// together after both, a link delete last, the caller told when the routes start; a failure
// in one part is mapped to that part's line; with both families the IPv4 routes wait only for
// IPv4's entries; given a feeder, a big batch is fed in pieces that together are its text.
import { describe, expect, it } from 'vitest';
import { applyOps, PIECE_OPS } from '../../src/dataplane/apply.ts';
import type { Op } from '../../src/dataplane/model.ts';
import { renderBatches, SPREAD_MIN_OPS } from '../../src/dataplane/render.ts';
import type { KeptBatches } from '../../src/exec/kept-batch.ts';
import { CommandError, type Feeder, type Runner } from '../../src/exec/runner.ts';

const DEV = 'twill.1';

/** A cold start's entries for `peers` vxlan peers, with a stray device to delete. */
function coldOps(peers: number): Op[] {
  const hex = (n: number): string => n.toString(16).padStart(2, '0');
  const ids = Array.from({ length: peers }, (_, i) => i);
  const net = (i: number): string => `10.${100 + (i >> 8)}.${i & 255}.0`;
  const mac = (i: number): string => `02:00:00:00:${hex(i >> 8)}:${hex(i & 255)}`;
  const dst = (i: number): string => `172.17.${i >> 8}.${(i & 255) + 1}`;
  return [
    { kind: 'link', action: 'change', phase: 'ip-pre', name: DEV, set: { up: true } },
    ...ids.map((i): Op => ({
      kind: 'fdb',
      action: 'add',
      phase: 'bridge',
      fdb: { dev: DEV, mac: mac(i), dst: dst(i) },
    })),
    ...ids.map((i): Op => ({
      kind: 'neigh',
      action: 'add',
      phase: 'ip-post',
      neigh: { dev: DEV, ip: net(i), mac: mac(i) },
    })),
    ...ids.map((i): Op => ({
      kind: 'route',
      action: 'add',
      phase: 'ip-post',
      route: { dst: `${net(i)}/24`, via: net(i), dev: DEV, onlink: true },
    })),
    { kind: 'link', action: 'delete', phase: 'ip-post', name: 'twill.9' },
  ];
}

const DEV6 = 'twill-v6.1';

/** coldOps's IPv4 peers and as many IPv6 ones on the IPv6 device, as a dual-stack cold start. */
function dualOps(peers: number): Op[] {
  const hex = (n: number): string => n.toString(16);
  const ids = Array.from({ length: peers }, (_, i) => i);
  const net6 = (i: number): string => `fd00:0:${hex(i >> 8)}:${hex(i & 255)}::`;
  const mac6 = (i: number): string =>
    `02:00:00:06:${hex(i >> 8).padStart(2, '0')}:${hex(i & 255).padStart(2, '0')}`;
  const v4 = coldOps(peers);
  const bridge4 = v4.filter((op) => op.phase === 'bridge');
  const post4 = v4.filter((op) => op.phase === 'ip-post');
  return [
    ...v4.filter((op) => op.phase === 'ip-pre'),
    { kind: 'link', action: 'change', phase: 'ip-pre', name: DEV6, set: { up: true } },
    ...ids.map((i): Op => ({
      kind: 'fdb',
      action: 'add',
      phase: 'bridge',
      fdb: { dev: DEV6, mac: mac6(i), dst: `fd7b::${hex(i + 1)}` },
    })),
    ...bridge4,
    ...ids.map((i): Op => ({
      kind: 'neigh',
      action: 'add',
      phase: 'ip-post',
      neigh: { dev: DEV6, ip: net6(i), mac: mac6(i) },
    })),
    ...post4,
    ...ids.map((i): Op => ({
      kind: 'route',
      action: 'add',
      phase: 'ip-post',
      route: { dst: `${net6(i)}/64`, via: net6(i), dev: DEV6, onlink: true },
    })),
  ];
}

/** Each batch as file, stage, how many lines and the first line's first two words. */
const shape = (ops: Op[], ways: number): string[] =>
  renderBatches(ops, { ways }).map(
    (b) => `${b.file} ${b.stage} ${b.lines.length} ${b.lines[0]?.split(' ').slice(0, 2).join(' ')}`,
  );

describe('a big plan spread over processes', () => {
  it('stays three batches below SPREAD_MIN_OPS, or with one way', () => {
    // 499 peers: 998 neighbours and routes and a link delete, one op short
    const small = coldOps(499);
    expect(2 * 499 + 1).toBe(SPREAD_MIN_OPS - 1);
    const plain = ['ip 0 1 link set', 'bridge 1 499 fdb append', 'ip 2 999 neigh replace'];
    expect(shape(small, 2)).toEqual(plain);
    expect(shape(small, 1)).toEqual(plain);
    expect(shape(coldOps(600), 1)).toEqual([
      'ip 0 1 link set',
      'bridge 1 600 fdb append',
      'ip 2 1201 neigh replace',
    ]);
  });

  it('puts the neighbours beside the FDB batch, the routes in `ways` parts after both, link deletes last', () => {
    const ops = coldOps(600);
    expect(shape(ops, 2)).toEqual([
      'ip 0 1 link set',
      'bridge 1 600 fdb append',
      'ip 1 600 neigh replace',
      'ip 2 300 route add',
      'ip 2 300 route add',
      'ip 3 1 link del',
    ]);
    expect(shape(ops, 3).filter((s) => s.startsWith('ip 2 '))).toEqual([
      'ip 2 200 route add',
      'ip 2 200 route add',
      'ip 2 200 route add',
    ]);
    // the same lines as one batch would have run, each once
    const lines = (ways: number): string[] =>
      renderBatches(ops, { ways })
        .flatMap((b) => b.lines)
        .sort();
    expect(lines(2)).toEqual(lines(1));
    for (const b of renderBatches(ops, { ways: 2 }))
      expect(b.input).toBe(`${b.lines.join('\n')}\n`);
  });

  it('spreads from exactly SPREAD_MIN_OPS ops', () => {
    // 500 peers with no link delete: 1,000 neighbours and routes
    const ops = coldOps(500).filter((op) => op.kind !== 'link' || op.action !== 'delete');
    expect(ops.filter((op) => op.phase === 'ip-post')).toHaveLength(SPREAD_MIN_OPS);
    expect(shape(ops, 2)).toEqual([
      'ip 0 1 link set',
      'bridge 1 500 fdb append',
      'ip 1 500 neigh replace',
      'ip 2 250 route add',
      'ip 2 250 route add',
    ]);
  });

  it('dual-stack: the IPv4 routes wait only for IPv4, each route still after its neighbour and FDB entry', () => {
    const ops = dualOps(600);
    expect(shape(ops, 2)).toEqual([
      'ip 0 2 link set',
      'bridge 1 600 fdb append',
      'bridge 1 600 fdb append',
      'ip 1 600 neigh replace',
      'ip 2 600 route add',
      'ip 2 1200 neigh replace',
      'ip 3 1 link del',
    ]);
    // measured on 2 cores only: over more, both families' routes split as one list
    expect(shape(ops, 3)).toEqual([
      'ip 0 2 link set',
      'bridge 1 1200 fdb append',
      'ip 1 1200 neigh replace',
      'ip 2 400 route add',
      'ip 2 400 route add',
      'ip 2 400 route add',
      'ip 3 1 link del',
    ]);
    // the IPv6 device's FDB entries apart even when its neighbours are not in the plan
    const noNeigh6 = ops.filter((op) => op.kind !== 'neigh' || op.neigh.dev !== DEV6);
    expect(shape(noNeigh6, 2).slice(1, 3)).toEqual([
      'bridge 1 600 fdb append',
      'bridge 1 600 fdb append',
    ]);
    const fdbOf = new Map<string, string>();
    for (const op of ops) if (op.kind === 'neigh') fdbOf.set(op.neigh.ip, op.neigh.mac);
    for (const ways of [2, 3, 4]) {
      const batches = renderBatches(ops, { ways });
      /** where a line runs: its batch's stage, and its batch and index there */
      const at = (pred: (l: string) => boolean): { stage: number; b: number; i: number }[] =>
        batches.flatMap((b, bi) =>
          b.lines.flatMap((l, i) => (pred(l) ? [{ stage: b.stage, b: bi, i }] : [])),
        );
      let checked = 0;
      for (const op of ops) {
        if (op.kind !== 'route') continue;
        const [route] = at((l) => l.startsWith(`route add ${op.route.dst} `));
        const [neigh] = at((l) => l.startsWith(`neigh replace ${op.route.via} `));
        const mac = fdbOf.get(op.route.via) ?? '';
        const [fdb] = at((l) => l.startsWith(`fdb append ${mac} `));
        if (!route || !neigh || !fdb) throw new Error(`${op.route.dst}: a line is missing`);
        // the neighbour in an earlier stage, or earlier in the route's own batch
        expect(neigh.stage < route.stage || (neigh.b === route.b && neigh.i < route.i)).toBe(true);
        expect(fdb.stage).toBeLessThan(route.stage);
        checked++;
      }
      expect(checked).toBe(1_200);
    }
    // the same lines as one batch would have run, each once
    const lines = (ways: number): string[] =>
      renderBatches(ops, { ways })
        .flatMap((b) => b.lines)
        .sort();
    expect(lines(2)).toEqual(lines(1));
  });

  it('runs a neighbour whose route is already there after the FDB batch, beside the routes', () => {
    // the first 100 peers' routes exist: their neighbours (a new MAC, say) are all the plan has
    // for them
    const ops = coldOps(600).filter(
      (op) => op.kind !== 'route' || !/^10\.100\.\d\.0\/|^10\.100\.[1-9]\d\.0\//.test(op.route.dst),
    );
    expect(ops.filter((op) => op.kind === 'route')).toHaveLength(500);
    const batches = renderBatches(ops, { ways: 2 });
    const neighStage = (ip: string): number | undefined =>
      batches.find((b) => b.lines.some((l) => l.startsWith(`neigh replace ${ip} `)))?.stage;
    expect(neighStage('10.100.0.0')).toBe(2);
    expect(neighStage('10.100.99.0')).toBe(2);
    expect(neighStage('10.100.100.0')).toBe(1);
    expect(neighStage('10.102.87.0')).toBe(1);
    expect(shape(ops, 2)).toEqual([
      'ip 0 1 link set',
      'bridge 1 600 fdb append',
      'ip 1 500 neigh replace',
      'ip 2 100 neigh replace',
      'ip 2 250 route add',
      'ip 2 250 route add',
      'ip 3 1 link del',
    ]);
  });

  it('never spreads over kept processes: one ip batch after the FDB one', async () => {
    const ran: string[] = [];
    const kept = {
      for: (file: string) =>
        file === 'ip' || file === 'bridge'
          ? {
              run: async (lines: readonly string[]) => {
                ran.push(`${file} ${lines.length}`);
                return { stdout: '', stderr: '' };
              },
            }
          : undefined,
    } as unknown as KeptBatches;
    const runner: Runner = () => Promise.reject(new Error('no new process with kept ones'));
    const r = await applyOps(coldOps(600), {
      runner,
      signal: new AbortController().signal,
      kept,
      ways: 4,
    });
    expect(r).toEqual({ batches: 3, failures: [] });
    expect(ran).toEqual(['ip 1', 'bridge 600', 'ip 1201']);
  });

  it('runs a lane stage by stage, a stage’s batches at once; a failing part reports its own line', async () => {
    const events: string[] = [];
    let running = 0;
    let most = 0;
    const runner: Runner = async (file, _args, opts) => {
      const first = opts?.input?.split('\n')[0] ?? '';
      const what = `${file} ${first.split(' ').slice(0, 3).join(' ')}`;
      events.push(`start ${what}`);
      most = Math.max(most, ++running);
      await new Promise((r) => setTimeout(r, 20));
      running--;
      events.push(`end ${what}`);
      // the second route part fails on its second line
      if (first.startsWith('route add 10.101.44.0/24'))
        throw new CommandError({
          command: [file],
          exitCode: 1,
          stderr: 'RTNETLINK answers: File exists\nCommand failed -:2\n',
          reason: 'exit code 1',
        });
      return { stdout: '', stderr: '' };
    };
    const r = await applyOps(coldOps(600), {
      runner,
      signal: new AbortController().signal,
      ways: 2,
      routesStarted: () => events.push('routes started'),
    });
    const at = (e: string): number => events.indexOf(e);
    const [fdb, neigh] = ['bridge fdb append 02:00:00:00:00:00', 'ip neigh replace 10.100.0.0'];
    const [part1, part2] = ['ip route add 10.100.0.0/24', 'ip route add 10.101.44.0/24'];
    expect(at(`start ${neigh}`)).toBeLessThan(at(`end ${fdb}`));
    expect(at(`start ${fdb}`)).toBeLessThan(at(`end ${neigh}`));
    for (const part of [part1, part2]) {
      expect(at(`start ${part}`)).toBeGreaterThan(at(`end ${fdb}`));
      expect(at(`start ${part}`)).toBeGreaterThan(at(`end ${neigh}`));
      expect(at(`start ip link del twill.9`)).toBeGreaterThan(at(`end ${part}`));
    }
    expect(at(`start ${part2}`)).toBeLessThan(at(`end ${part1}`));
    // the caller hears of the routes' stage once both its parts have started, before the link
    // delete after it, and once
    expect(at('routes started')).toBe(at(`start ${part2}`) + 1);
    expect(events.filter((e) => e === 'routes started')).toHaveLength(1);
    expect(most).toBe(2);
    expect(r.batches).toBe(6);
    expect(r.failures).toEqual([
      'ip: route add 10.101.45.0/24 via 10.101.45.0 dev twill.1 onlink proto 151: RTNETLINK answers: File exists',
    ]);
  });

  it('feeds a batch of more than PIECE_OPS ops in pieces, stage by stage; a fed failure maps to its line', async () => {
    const ops = coldOps(1_200);
    const events: string[] = [];
    const fedText = new Map<string, string[]>();
    const runner: Runner = async (file, _args, opts) => {
      events.push(`run ${file} ${opts?.input ?? ''}`.trim());
      await new Promise((r) => setTimeout(r, 10));
      events.push(`ran ${file}`);
      return { stdout: '', stderr: '' };
    };
    const feed: Feeder = (file) => {
      const pieces: string[] = [];
      fedText.set(file, pieces);
      events.push(`feed ${file}`);
      let ended: Promise<{ stdout: string; stderr: string }> | undefined;
      const end = async (): Promise<{ stdout: string; stderr: string }> => {
        await new Promise((r) => setTimeout(r, 10));
        events.push(`end ${file}`);
        // the ip batch's line 1203: the third route (after 1,200 neighbours and two routes)
        if (file === 'ip')
          throw new CommandError({
            command: [file],
            exitCode: 1,
            stderr: 'RTNETLINK answers: File exists\nCommand failed -:1203\n',
            reason: 'exit code 1',
          });
        return { stdout: '', stderr: '' };
      };
      return {
        write: (text) => {
          if (pieces.length === 0) events.push(`write ${file}`);
          pieces.push(text);
        },
        end: () => (ended ??= end()),
        get done() {
          return ended ?? new Promise(() => undefined);
        },
      };
    };
    const r = await applyOps(ops, { runner, signal: new AbortController().signal, ways: 1, feed });
    // the one-line ip (pre) batch is run whole; the bridge and ip (post) ones are fed, each
    // started once the stage before it has ended
    expect(events).toEqual([
      `run ip link set ${DEV} up`,
      'ran ip',
      'feed bridge',
      'write bridge',
      'end bridge',
      'feed ip',
      'write ip',
      'end ip',
    ]);
    const whole = renderBatches(ops, { ways: 1 });
    for (const [file, pieces] of fedText) {
      const b = whole.find((x) => x.file === file && x.size > PIECE_OPS);
      expect(pieces.join('')).toBe(b?.input);
      expect(pieces).toHaveLength(Math.ceil((b?.size ?? 0) / PIECE_OPS));
    }
    expect(fedText.get('bridge')).toHaveLength(3);
    expect(r.failures).toEqual([
      `ip: route add 10.100.2.0/24 via 10.100.2.0 dev ${DEV} onlink proto 151: RTNETLINK answers: File exists`,
    ]);
  });
});
