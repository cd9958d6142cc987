// A delta pass diffs only the peers whose leases changed (diff.ts peerDelta,
// judge.ts reindexDesired): its plan must be exactly the plan of diffing the
// whole states, and its event index exactly the index of the whole new state,
// whatever joins, changes and leaves happen between two passes, in every
// backend and family.
import { describe, expect, it } from 'vitest';
import { desiredState } from '../../src/dataplane/desired.ts';
import type { EntriesMemo } from '../../src/dataplane/peer-entries.ts';
import { assumedFrom, changedPeers, diff, peerDelta } from '../../src/dataplane/diff.ts';
import { indexDesired, reindexDesired, type Known } from '../../src/dataplane/judge.ts';
import type { Lease } from '../../src/lease/types.ts';
import { backendInput, peerLease } from '../helpers/dataplane.ts';
import { random } from '../helpers/random.ts';

/** A Known's indexes as comparable values: each index's values by key, in their order there. */
const indexes = (k: Known): unknown => ({
  routes: k.routes.values(),
  neighs: k.neighs.values(),
  fdb: k.fdb.values(),
});

const CASES = [
  { name: 'vxlan', backend: 'vxlan', ipv6: false },
  { name: 'host-gw', backend: 'host-gw', ipv6: false },
  { name: 'dual-stack vxlan', backend: 'vxlan', ipv6: true },
  { name: 'dual-stack host-gw', backend: 'host-gw', ipv6: true },
] as const;

describe('delta passes over the peers that changed', () => {
  for (const c of CASES) {
    it(`plan and index equal the whole diff's, ${c.name}`, () => {
      const next = random(c.name.length);
      const vx = c.backend === 'vxlan';
      const memo: EntriesMemo = { entries: new WeakMap() };
      const lease = (n: number, via = '10.123.0'): Lease =>
        peerLease(n, { vxlan: vx, ipv6: c.ipv6, ipBase: via });
      // peers 4..63 (3 is ours); each step joins, changes (another PublicIP) or drops a few
      let peers = new Map<number, Lease>([4, 5, 6, 7, 8].map((n) => [n, lease(n)]));
      const state = (): ReturnType<typeof desiredState> =>
        desiredState(
          backendInput({ backend: c.backend, ipv6: c.ipv6, peers: [...peers.values()] }),
          memo,
        );
      let before = state();
      let known = indexDesired(before, 0);
      let changedSome = 0;
      for (let step = 1; step <= 60; step++) {
        peers = new Map(peers);
        for (let i = 0; i < 1 + Math.floor(next() * 3); i++) {
          const n = 4 + Math.floor(next() * 60);
          const r = next();
          if (r < 0.5) peers.set(n, lease(n));
          else if (r < 0.7 && peers.has(n)) peers.set(n, lease(n, '10.124.0'));
          else peers.delete(n);
        }
        const after = state();
        const delta = peerDelta(before, after);
        if (!delta) throw new Error('both states have their per-peer view');
        const whole = diff(after, assumedFrom(before));
        expect(diff(delta.want, assumedFrom(delta.had)), `step ${step}`).toEqual(whole);
        // an unchanged peer keeps its entries object: only the changed ones are diffed
        expect(delta.came.length + delta.gone.length).toBeLessThanOrEqual(8);
        if (whole.length > 0) changedSome++;
        known = reindexDesired(known, delta, after, step);
        expect(indexes(known), `step ${step}`).toEqual(indexes(indexDesired(after, step)));
        expect(known.want).toBe(after);
        before = after;
      }
      expect(changedSome).toBeGreaterThan(20);
    });
  }

  it('indexes anew when many peers change at once, and the index is the same', () => {
    const memo: EntriesMemo = { entries: new WeakMap() };
    const state = (from: number) =>
      desiredState(
        backendInput({
          backend: 'vxlan',
          ipv6: true,
          peers: Array.from({ length: 40 }, (_, i) =>
            peerLease(from + i, { vxlan: true, ipv6: true }),
          ),
        }),
        memo,
      );
    const before = state(4);
    const after = state(44);
    const delta = peerDelta(before, after);
    if (!delta) throw new Error('both states have their per-peer view');
    // 40 gone and 40 come: past the in-place limit
    expect(delta.gone.length + delta.came.length).toBe(80);
    const known = reindexDesired(indexDesired(before, 0), delta, after, 1);
    expect(indexes(known)).toEqual(indexes(indexDesired(after, 1)));
    expect(known.routes.size).toBe(80);
  });

  it('a state without its per-peer view gives no delta (the whole diff decides)', () => {
    const a = desiredState(
      backendInput({ backend: 'vxlan', peers: [peerLease(4, { vxlan: true })] }),
    );
    const { peers: _p, ...bare } = a;
    expect(peerDelta(bare, a)).toBeUndefined();
    expect(peerDelta(a, bare)).toBeUndefined();
  });
});

describe('changedPeers', () => {
  /** The same by two sets over the whole lists. */
  const bySets = <T>(before: readonly T[], after: readonly T[]): { gone: T[]; came: T[] } => {
    const [old, now] = [new Set(before), new Set(after)];
    return { gone: before.filter((p) => !now.has(p)), came: after.filter((p) => !old.has(p)) };
  };

  it("tells what two sets would, in each list's order, whatever moved", () => {
    const next = random(7);
    for (let round = 0; round < 500; round++) {
      const objects = Array.from({ length: 40 }, (_, i) => ({ i }));
      const before = objects.filter(() => next() < 0.6);
      let after = before.filter(() => next() < 0.9);
      // joins at the end (the tracker's way), or anywhere, or a shuffle of part of the list
      for (const o of objects) if (!before.includes(o) && next() < 0.1) after.push(o);
      if (round % 3 === 1) {
        const o = objects.find((x) => !after.includes(x));
        if (o) after.splice(Math.floor(next() * (after.length + 1)), 0, o);
      }
      if (round % 5 === 2 && after.length > 2) {
        const a = Math.floor(next() * after.length);
        const b = Math.floor(next() * after.length);
        after = after.slice();
        [after[a], after[b]] = [after[b] as { i: number }, after[a] as { i: number }];
      }
      expect(changedPeers(before, after), `round ${round}`).toEqual(bySets(before, after));
    }
  });

  it('gives nothing for the same list, and one peer for one join or leave', () => {
    const ps = Array.from({ length: 5 }, (_, i) => ({ i }));
    expect(changedPeers(ps, ps.slice())).toEqual({ gone: [], came: [] });
    const joiner = { i: 9 };
    expect(changedPeers(ps, [...ps, joiner])).toEqual({ gone: [], came: [joiner] });
    expect(changedPeers(ps, [...ps.slice(0, 2), ...ps.slice(3)])).toEqual({
      gone: [ps[2]],
      came: [],
    });
    expect(changedPeers([], ps)).toEqual({ gone: [], came: ps });
    expect(changedPeers(ps, [])).toEqual({ gone: ps, came: [] });
  });
});
