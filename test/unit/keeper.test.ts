// LeaseKeeper's answer to a record someone else keeps taking away: the first
// loss is reclaimed at once, each further loss soon after a reclaim waits
// longer (so two writers cannot hammer the store), and too many in a row end
// the keeper with LEASE_TAKEN naming the likely cause. A loss long after the
// last reclaim starts afresh. On the in-memory store.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { LeaseKeeper, type FlapLimits } from '../../src/lease/keeper.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import type { Lease } from '../../src/lease/types.ts';
import { vxlanAttrs } from '../contract/lease-store.ts';
import { captureLog } from '../helpers/log.ts';

const LIMITS: FlapLimits = { windowMs: 1_000, baseMs: 50, maxMs: 200, max: 4 };

async function setup(): Promise<{ kv: MemoryKv; store: KvLeaseStore; lease: Lease }> {
  const kv = new MemoryKv();
  kv.putRaw('/k/config', '{"Network":"10.60.0.0/16"}');
  const store = new KvLeaseStore({ kv, prefix: '/k' });
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
