// A restarted daemon must not touch a dataplane that is already right, even
// when the store's first listing is slow: no pass runs before the peer set
// is known, so the peers' entries are never swept and re-added.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeLeaseValue } from '../../src/lease/codec.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import type { LeaseStore } from '../../src/lease/types.ts';
import { pause } from '../../src/util/abort.ts';
import { vxlanAttrs } from '../contract/lease-store.ts';
import { startTestDaemon } from '../helpers/daemon.ts';
import { NetnsLab, nsRunner, sweepStaleNetns } from '../../lab/kit/netns.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const lab = new NetnsLab();
let dir: string;
beforeAll(async () => {
  await sweepStaleNetns();
  dir = await mkdtemp(join(tmpdir(), 'twill-restart-'));
});
afterAll(async () => {
  await lab.destroy();
  await rm(dir, { recursive: true, force: true });
});

/**
 * The same store, whose watch lists only after `delayMs` (a slow or remote etcd with many leases).
 */
function slowListing(store: LeaseStore, delayMs: number): LeaseStore {
  return Object.create(store, {
    watchLeases: {
      value: async (o: Parameters<LeaseStore['watchLeases']>[0]) => (
        await pause(delayMs, o.signal).catch(() => undefined),
        store.watchLeases(o)
      ),
    },
  }) as LeaseStore;
}

describe('restart with a slow first listing', () => {
  it('leaves the peers entries alone until it knows the peers, and then changes nothing', async () => {
    const ns = await lab.add('restart');
    const kv = new MemoryKv();
    kv.putRaw('/n/config', '{"Network":"10.50.0.0/16","Backend":{"Type":"vxlan"}}');
    kv.putRaw('/n/subnets/10.50.9.0-24', encodeLeaseValue(vxlanAttrs(9)));
    const subnetFile = join(dir, 'subnet.env');
    const runner = nsRunner(ns);
    const route = async (): Promise<string> =>
      (await runner('ip', ['route', 'show', '10.50.9.0/24'])).stdout;
    const first = await startTestDaemon({
      store: new KvLeaseStore({ kv, prefix: '/n' }),
      nodeName: 'r1',
      publicIp: '127.0.0.1',
      subnetFile,
      ns,
    });
    await waitFor(
      async () => (await route()).includes('proto 151') && first.state()?.pass?.converged === true,
      { timeoutMs: 10_000, what: 'the first daemon converged' },
    );
    await first.stop();

    const second = await startTestDaemon({
      store: slowListing(new KvLeaseStore({ kv, prefix: '/n' }), 1_500),
      nodeName: 'r1',
      publicIp: '127.0.0.1',
      subnetFile,
      ns,
    });
    await waitFor(() => second.log.lines.some((l) => l.msg === 'lease acquired'), {
      timeoutMs: 10_000,
      what: 'lease',
    });
    for (let i = 0; i < 10; i++) {
      expect(await route(), 'the peer route during the slow listing').toContain('proto 151');
      await pause(100);
    }
    await waitFor(() => second.state()?.pass !== undefined, {
      timeoutMs: 10_000,
      what: 'a pass after the listing',
    });
    await pause(300);
    expect(
      second.log.lines.filter((l) => /^(dataplane updated|repaired dataplane drift)$/.test(l.msg)),
    ).toEqual([]);
    expect(await route()).toContain('proto 151');
    await second.stop();
    await kv.close();
  });
});
