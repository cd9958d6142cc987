// The tracker's admitted set equals the set-level stage redone from scratch
// (withoutConflicts over every current record), whatever the order of joins,
// changes and leaves: the quick path (a peer joining without a conflict of
// its own, peers leaving) and the full stage must agree, with subnets and
// VtepMACs drawn from small pools so that conflicts come and go.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { withoutConflicts } from '../../src/lease/admit.ts';
import { PeerTracker } from '../../src/lease/tracker.ts';
import type { Lease } from '../../src/lease/types.ts';
import { peerLease } from '../helpers/dataplane.ts';
import { random } from '../helpers/random.ts';
import { captureLog } from '../helpers/log.ts';

const CONFIG = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}');
const SELF = peerLease(3, { vxlan: true });

const DUAL = parseNetConfig(
  '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00::/48","Backend":{"Type":"vxlan"}}',
);

function newTracker(o: { config?: typeof CONFIG; deleteLingerMs?: number } = {}): PeerTracker {
  return new PeerTracker({
    context: { config: o.config ?? CONFIG, self: SELF.subnet ?? undefined },
    selfKey: SELF.key,
    selfAttrs: () => SELF.attrs,
    logger: captureLog().logger,
    onSelfLost: () => undefined,
    lingerMs: 0,
    deleteLingerMs: o.deleteLingerMs ?? 0,
  });
}

/**
 * Node `name` claiming peer n's subnet with VtepMAC number `mac` (with `ipv6`, peer n's IPv6
 * subnet too, and IPv6 VtepMAC number `mac`).
 */
function claim(name: string, n: number, mac: number, ipv6 = false): Lease {
  const l = peerLease(n, { vxlan: true, ipv6 });
  const vtepMac = `02:00:00:aa:00:${mac.toString(16).padStart(2, '0')}`;
  const backendData6 = ipv6
    ? { backendData6: { vni: 1, vtepMac: vtepMac.replace('aa', 'bb') } }
    : {};
  return {
    ...l,
    key: name,
    attrs: { ...l.attrs, backendData: { vni: 1, vtepMac }, ...backendData6 },
  };
}

const sorted = (ls: readonly Lease[]): string[] => ls.map((l) => l.key).sort();

describe('PeerTracker admission', () => {
  for (const seed of [1, 2, 3, 4]) {
    it(`admits what the whole set-level stage admits, step by step (seed ${seed})`, () => {
      const next = random(seed);
      const t = newTracker();
      const model = new Map<string, Lease>();
      t.handle({
        type: 'snapshot',
        records: [{ key: SELF.key, ok: true, lease: SELF }],
        reason: 'x',
      });
      let quiet = 0;
      for (let step = 0; step < 300; step++) {
        const keys = [...model.keys()];
        if (keys.length === 0 || next() < 0.65) {
          const name = `node-${Math.floor(next() * 30)}`;
          // subnets 4..43 and MACs 0..59: collisions happen, often enough to come and go
          const lease = claim(name, 4 + Math.floor(next() * 40), Math.floor(next() * 60));
          t.handle({ type: 'put', record: { key: name, ok: true, lease } });
          model.set(name, lease);
        } else {
          const key = keys[Math.floor(next() * keys.length)] ?? '';
          t.handle({ type: 'delete', key });
          model.delete(key);
        }
        // the daemon makes the quick path's index after a converged pass, at any point
        if (next() < 0.2) t.prepareJoins();
        const want = withoutConflicts([...model.values()], CONFIG);
        expect(sorted(t.list()), `step ${step}`).toEqual(sorted(want.admitted));
        expect([...t.skipped().keys()].sort(), `step ${step}`).toEqual(
          sorted(want.refused.map((r) => r.lease)),
        );
        if (want.refused.length === 0) quiet++;
      }
      // both paths ran: steps without any conflict (the quick path) and steps with some
      expect(quiet).toBeGreaterThan(10);
      expect(quiet).toBeLessThan(300);
    });
  }

  afterEach(() => {
    vi.useRealTimers();
  });

  for (const dual of [false, true]) {
    it(`agrees over several joins and leaves between two looks, deletes lingering${dual ? ', dual-stack' : ''}`, () => {
      vi.useFakeTimers();
      const next = random(dual ? 11 : 12);
      const config = dual ? DUAL : CONFIG;
      const t = newTracker({ config, deleteLingerMs: 50 });
      // what the set holds: peers and lingering ones (until their time), as the tracker keeps them
      const model = new Map<string, Lease>();
      const until = new Map<string, number>();
      t.handle({
        type: 'snapshot',
        records: [{ key: SELF.key, ok: true, lease: SELF }],
        reason: 'x',
      });
      let looks = 0;
      for (let step = 0; step < 400; step++) {
        const keys = [...model.keys()];
        const r = next();
        if (keys.length === 0 || r < 0.6) {
          // each node its own subnet and MAC, so the quick path runs; now and then another MAC
          const i = Math.floor(next() * 200);
          const name = `node-${i}`;
          const lease = claim(name, 4 + i, next() < 0.1 ? 40 + i : i, dual);
          t.handle({ type: 'put', record: { key: name, ok: true, lease } });
          model.set(name, lease);
          until.delete(name);
        } else if (r < 0.85) {
          const key = keys[Math.floor(next() * keys.length)] ?? '';
          t.handle({ type: 'delete', key });
          if (!until.has(key)) until.set(key, Date.now() + 50);
        } else {
          vi.advanceTimersByTime(Math.floor(next() * 80));
          for (const [key, at] of until)
            if (at + 1 <= Date.now()) {
              model.delete(key);
              until.delete(key);
            }
        }
        if (next() < 0.1) t.prepareJoins();
        // several changes may pile up between two looks (the journal of more than one)
        if (next() < 0.3) {
          looks++;
          const want = withoutConflicts([...model.values()], config);
          expect(sorted(t.list()), `step ${step}`).toEqual(sorted(want.admitted));
        }
      }
      expect(looks).toBeGreaterThan(80);
    });
  }

  it('past 64 changes between two looks the whole stage is redone, with the same outcome', () => {
    const t = newTracker();
    const model = new Map<string, Lease>();
    t.handle({
      type: 'snapshot',
      records: [{ key: SELF.key, ok: true, lease: SELF }],
      reason: 'x',
    });
    for (let i = 0; i < 80; i++) {
      const lease = claim(`node-${i}`, 4 + i, i);
      t.handle({ type: 'put', record: { key: lease.key, ok: true, lease } });
      model.set(lease.key, lease);
    }
    // node-80 claims node-0's subnet: both conflicting, among 81 joins since the last look
    const dup = claim('node-80', 4, 200);
    t.handle({ type: 'put', record: { key: dup.key, ok: true, lease: dup } });
    model.set(dup.key, dup);
    const want = withoutConflicts([...model.values()], CONFIG);
    expect(want.refused.length).toBeGreaterThan(0);
    expect(sorted(t.list())).toEqual(sorted(want.admitted));
  });

  it('keeps the same lease object when a record is put again unchanged', () => {
    const t = newTracker();
    const a = claim('node-a', 4, 1);
    t.handle({
      type: 'snapshot',
      records: [{ key: SELF.key, ok: true, lease: SELF }],
      reason: 'x',
    });
    t.handle({ type: 'put', record: { key: 'node-a', ok: true, lease: a } });
    const first = t.list()[0];
    t.handle({ type: 'put', record: { key: 'node-a', ok: true, lease: { ...a } } });
    t.handle({
      type: 'snapshot',
      records: [
        { key: SELF.key, ok: true, lease: SELF },
        { key: 'node-a', ok: true, lease: { ...a } },
      ],
      reason: 'y',
    });
    expect(t.list()[0]).toBe(first);
    const b = claim('node-a', 5, 1);
    t.handle({ type: 'put', record: { key: 'node-a', ok: true, lease: b } });
    expect(t.list()[0]).not.toBe(first);
    expect(t.list()[0]?.subnet).toEqual(b.subnet);
  });
});
