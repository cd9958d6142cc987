// The LeaseStore contract on the in-memory Kv, plus the memory store's own
// compaction and wipe controls.
import { afterAll, describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { encodeLeaseValue } from '../../src/lease/codec.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import type { Kv } from '../../src/lease/kv.ts';
import { MemoryKv, shared } from '../../src/lease/memory-kv.ts';
import type { LeaseEvent } from '../../src/lease/types.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { keysCreatedContract } from './kv-created.ts';
import { deleteIfContract } from './kv-delete.ts';
import { kvHarness, leaseStoreContract, vxlanAttrs } from './lease-store.ts';

const kv = new MemoryKv();
afterAll(() => kv.close());

leaseStoreContract('memory', () =>
  kvHarness({
    newStore: async (o) => new KvLeaseStore({ kv: shared(kv), ...o }),
    put: async (k, v) => kv.putRaw(k, v),
    del: async (k) => kv.deleteRaw(k),
    get: async (k) => (await kv.get(k))?.value,
  }),
);

keysCreatedContract('memory', async () => shared(kv), '/created-memory');
deleteIfContract('memory', async () => shared(kv), '/delete-memory');

describe('memory store: re-list on compaction and wipe', () => {
  it('re-lists with a snapshot after a wipe and after falling behind a compaction', async () => {
    const own = new MemoryKv();
    const store = new KvLeaseStore({ kv: own, prefix: '/p' });
    own.putRaw('/p/config', '{"Network":"10.10.0.0/16"}');
    const config = parseNetConfig('{"Network":"10.10.0.0/16"}');
    await store.acquireLease(
      { config, attrs: vxlanAttrs(1), previous: undefined },
      new AbortController().signal,
    );
    const events: LeaseEvent[] = [];
    const ctl = new AbortController();
    const watching = store.watchLeases({ signal: ctl.signal, onEvent: (e) => events.push(e) });
    const snapshots = (): string[] =>
      events.flatMap((e) => (e.type === 'snapshot' ? [e.reason] : []));
    await waitFor(() => snapshots().length === 1, { timeoutMs: 2000, what: 'first snapshot' });
    own.wipe();
    await waitFor(() => snapshots().length === 2, { timeoutMs: 2000, what: 'snapshot after wipe' });
    expect(snapshots()[1]).toMatch(/^wiped/);
    const last = events.filter((e) => e.type === 'snapshot').at(-1);
    expect(last?.records).toEqual([]);
    ctl.abort();
    await watching;
    own.putRaw('/p/subnets/10.10.9.0-24', '{}');
    own.compact();
    expect(
      await own.watch('/p/', {
        fromRevision: 1n,
        signal: ctl.signal,
        onChanges: () => {},
        onConnectivity: () => {},
      }),
    ).toMatchObject({ reason: 'aborted' });
    const fresh = new AbortController();
    expect(
      await own.watch('/p/', {
        fromRevision: 1n,
        signal: fresh.signal,
        onChanges: () => {},
        onConnectivity: () => {},
      }),
    ).toMatchObject({ reason: 'compacted' });
    await own.close();
  });
});

describe('memory store: the acquisition primes the first list', () => {
  it("starts the watch from the acquisition's listing: no second list, our new lease in it, our old-config lease gone, later writes as events", async () => {
    const own = new MemoryKv();
    let lists = 0;
    const counted: Kv = { ...shared(own), list: (p, s) => (lists++, own.list(p, s)) };
    const store = new KvLeaseStore({ kv: counted, prefix: '/p' });
    const text = '{"Network":"10.10.0.0/16","SubnetLen":24}';
    own.putRaw('/p/config', text);
    const config = parseNetConfig(text);
    const peer = vxlanAttrs(2);
    own.putRaw('/p/subnets/10.10.2.0-24', encodeLeaseValue(peer));
    // our own lease from an older config (a /16's worth outside SubnetLen 24): deleted on acquire
    own.putRaw('/p/subnets/10.10.0.0-20', encodeLeaseValue(vxlanAttrs(1)));
    const lease = await store.acquireLease(
      { config, attrs: vxlanAttrs(1), previous: undefined },
      new AbortController().signal,
    );
    expect(lists).toBe(1);
    // a write between the acquisition and the watch must arrive as an event
    own.putRaw('/p/subnets/10.10.3.0-24', encodeLeaseValue(vxlanAttrs(3)));
    const events: LeaseEvent[] = [];
    const ctl = new AbortController();
    const watching = store.watchLeases({ signal: ctl.signal, onEvent: (e) => events.push(e) });
    await waitFor(() => events.some((e) => e.type === 'put' && e.record.key === '10.10.3.0-24'), {
      timeoutMs: 2000,
      what: 'the later write as an event',
    });
    expect(lists).toBe(1);
    const first = events.find((e) => e.type === 'snapshot');
    const keys = first?.type === 'snapshot' ? first.records.map((r) => r.key).sort() : [];
    expect(keys).toEqual([lease.key, '10.10.2.0-24'].sort());
    ctl.abort();
    await watching;
    // a later watch lists afresh
    const again = new AbortController();
    const second = store.watchLeases({ signal: again.signal, onEvent: () => undefined });
    await waitFor(() => lists === 2, { timeoutMs: 2000, what: 'a fresh list' });
    again.abort();
    await second;
    await own.close();
  });

  it('lists every lease once for a dual-stack acquisition too: the earlier-claim check reads only the keys created since', async () => {
    const own = new MemoryKv();
    const calls = { lists: 0, created: 0 };
    const counted: Kv = {
      ...shared(own),
      list: (p, s) => (calls.lists++, own.list(p, s)),
      keysCreatedBetween: (p, r, s) => (calls.created++, own.keysCreatedBetween(p, r, s)),
    };
    const store = new KvLeaseStore({ kv: counted, prefix: '/d' });
    const text =
      '{"Network":"10.10.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10::/56","Backend":{"Type":"vxlan"}}';
    own.putRaw('/d/config', text);
    for (let n = 2; n < 6; n++)
      own.putRaw(`/d/subnets/10.10.${n}.0-24&fd00:10:0:${n}::-64`, encodeLeaseValue(vxlanAttrs(n)));
    const lease = await store.acquireLease(
      {
        config: parseNetConfig(text),
        attrs: {
          ...vxlanAttrs(1),
          publicIpv6: 'fd00:56::1',
          backendData6: vxlanAttrs(1).backendData,
        },
        previous: undefined,
      },
      new AbortController().signal,
    );
    expect(lease.subnet6).toBeDefined();
    expect(calls).toEqual({ lists: 1, created: 1 });
    await own.close();
  });
});
