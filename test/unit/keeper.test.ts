// LeaseKeeper's answer to a record someone else keeps taking away: the first
// loss is reclaimed at once, each further loss soon after a reclaim waits
// longer (so two writers cannot hammer the store), and too many in a row end
// the keeper with LEASE_TAKEN naming the likely cause. A loss long after the
// last reclaim starts afresh. A renewal that hangs in the store is given up
// and tried again while the lease still holds. On the in-memory store.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import {
  ATTEMPT_FLOOR_MS,
  LeaseKeeper,
  attemptBudget,
  type FlapLimits,
} from '../../src/lease/keeper.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import type { Lease } from '../../src/lease/types.ts';
import { vxlanAttrs } from '../contract/lease-store.ts';
import { captureLog } from '../helpers/log.ts';

const LIMITS: FlapLimits = { windowMs: 1_000, baseMs: 50, maxMs: 200, max: 4 };

async function setup(
  o: { ttlSeconds?: number } = {},
): Promise<{ kv: MemoryKv; store: KvLeaseStore; lease: Lease }> {
  const kv = new MemoryKv();
  kv.putRaw('/k/config', '{"Network":"10.60.0.0/16"}');
  const store = new KvLeaseStore({ kv, prefix: '/k', ...o });
  const lease = await store.acquireLease(
    {
      config: parseNetConfig('{"Network":"10.60.0.0/16"}'),
      attrs: vxlanAttrs(1),
      previous: undefined,
    },
    new AbortController().signal,
  );
  return { kv, store, lease };
}

describe('LeaseKeeper against a second writer', () => {
  it('waits longer after each quick loss and gives up with LEASE_TAKEN', async () => {
    const { kv, store, lease } = await setup();
    const log = captureLog();
    const reclaimedAt: number[] = [];
    const keeper: LeaseKeeper = new LeaseKeeper({
      store,
      lease,
      renewMarginMs: 3_600_000,
      logger: log.logger,
      flapLimits: LIMITS,
      // the rival: every time twill restores the record, it is taken away again at once
      onLease: () => {
        reclaimedAt.push(Date.now());
        kv.deleteRaw(`/k/subnets/${lease.key}`);
        setImmediate(() => keeper.notifyLost('deleted by the rival'));
      },
    });
    const start = Date.now();
    kv.deleteRaw(`/k/subnets/${lease.key}`);
    keeper.notifyLost('deleted by the rival');
    await expect(keeper.run(AbortSignal.timeout(10_000))).rejects.toMatchObject({
      code: 'LEASE_TAKEN',
      message: expect.stringContaining('second twill running with the same node name'),
    });
    // reclaimed at once, then after 50, 100 and 200 ms; the fifth loss ends it
    expect(reclaimedAt).toHaveLength(4);
    const gaps = reclaimedAt.map((t, i) => t - (reclaimedAt[i - 1] ?? start));
    expect(gaps[1]).toBeGreaterThanOrEqual(50);
    expect(gaps[2]).toBeGreaterThanOrEqual(100);
    expect(gaps[3]).toBeGreaterThanOrEqual(200);
    expect(log.lines.map((l) => l.msg)).toContain(
      'own lease lost again right after it was restored: another writer? waiting before reclaiming',
    );
    await store.close();
  });

  it('reclaims at once when the last reclaim is longer ago than the window', async () => {
    const { kv, store, lease } = await setup();
    const log = captureLog();
    const reclaimedAt: number[] = [];
    const keeper = new LeaseKeeper({
      store,
      lease,
      renewMarginMs: 3_600_000,
      logger: log.logger,
      flapLimits: { ...LIMITS, windowMs: 100, baseMs: 5_000 },
      onLease: () => reclaimedAt.push(Date.now()),
    });
    const ctl = new AbortController();
    const running = keeper.run(ctl.signal);
    for (let i = 0; i < 3; i++) {
      kv.deleteRaw(`/k/subnets/${lease.key}`);
      const lostAt = Date.now();
      keeper.notifyLost('deleted');
      while (reclaimedAt.length <= i && Date.now() - lostAt < 2_000)
        await new Promise((r) => setTimeout(r, 5));
      expect(reclaimedAt[i]! - lostAt).toBeLessThan(1_000);
      await new Promise((r) => setTimeout(r, 150));
    }
    ctl.abort();
    await running;
    expect(log.lines.filter((l) => l.msg.includes('right after it was restored'))).toEqual([]);
    await store.close();
  });
});

describe('LeaseKeeper with a renewal that hangs', () => {
  it('gives the call up and renews on a second try before the lease expires', async () => {
    const { store, lease } = await setup({ ttlSeconds: 3 });
    const log = captureLog();
    const calls: { at: number; aborted?: unknown }[] = [];
    // the first renewal never answers (a proposal lost with etcd's leader); it ends only when
    // the keeper gives it up through its signal, as EtcdKv's calls do
    const renewLease = store.renewLease.bind(store);
    store.renewLease = (l, signal) => {
      const call: { at: number; aborted?: unknown } = { at: Date.now() };
      calls.push(call);
      if (calls.length > 1) return renewLease(l, signal);
      return new Promise((_, reject) =>
        signal.addEventListener('abort', () => reject((call.aborted = signal.reason as Error)), {
          once: true,
        }),
      );
    };
    const renewed: Lease[] = [];
    const keeper = new LeaseKeeper({
      store,
      lease,
      renewMarginMs: 3_600_000,
      logger: log.logger,
      onLease: (l) => renewed.push(l),
    });
    const ctl = new AbortController();
    const running = keeper.run(ctl.signal);
    while (renewed.length === 0 && Date.now() < lease.expiresAt + 1_000)
      await new Promise((r) => setTimeout(r, 20));
    ctl.abort();
    await running;
    expect(calls.length, 'renewal attempts').toBe(2);
    expect(calls[0]!.aborted).toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringMatching(
        /^renewal of .+ took over \d+ ms; given up with \d+ ms of the lease left$/,
      ),
    });
    expect(renewed).toHaveLength(1);
    // the second try went in while the lease still held, and renewed it
    expect(calls[1]!.at).toBeLessThan(lease.expiresAt);
    expect(renewed[0]!.expiresAt).toBeGreaterThan(lease.expiresAt);
    expect(log.lines.map((l) => l.msg)).toContain('renewal failed; retrying');
    expect(log.lines.map((l) => l.msg)).not.toContain('own lease lost; reclaiming it');
    await store.close();
  });

  it('gives each attempt a third of what the lease has left, at least a second', () => {
    const lease = { expiresAt: 100_000 } as Lease;
    expect(attemptBudget(lease, 100_000 - 3_600_000)).toBe(1_200_000);
    expect(attemptBudget(lease, 100_000 - 6_000)).toBe(2_000);
    expect(attemptBudget(lease, 100_000 - 1_500)).toBe(ATTEMPT_FLOOR_MS);
    expect(attemptBudget(lease, 200_000)).toBe(ATTEMPT_FLOOR_MS);
    // a lease that never expires: the longest timer Node keeps (a longer one would fire at once)
    const never = { expiresAt: Number.MAX_SAFE_INTEGER } as Lease;
    expect(attemptBudget(never, Date.now())).toBe(2 ** 31 - 1);
    expect(attemptBudget({ expiresAt: Number.NaN } as Lease, 0)).toBe(2 ** 31 - 1);
  });
});
