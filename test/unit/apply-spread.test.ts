// A big plan spread over processes that run at once (render.ts, apply.ts): which lines go to which
// batch and stage, that the spread batches hold exactly the lines of the unspread ones, and that
// applyOps runs a lane stage by stage: the neighbours beside the FDB batch, the routes' parts
// together after both, a link delete last; a failure in one part is mapped to that part's line.
import { describe, expect, it } from 'vitest';
import { applyOps } from '../../src/dataplane/apply.ts';
import type { Op } from '../../src/dataplane/model.ts';
import { renderBatches, SPREAD_MIN_OPS } from '../../src/dataplane/render.ts';
import type { KeptBatches } from '../../src/exec/kept-batch.ts';
import { CommandError, type Runner } from '../../src/exec/runner.ts';

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
    expect(most).toBe(2);
    expect(r.batches).toBe(6);
    expect(r.failures).toEqual([
      'ip: route add 10.101.45.0/24 via 10.101.45.0 dev twill.1 onlink proto 151: RTNETLINK answers: File exists',
    ]);
  });
});
