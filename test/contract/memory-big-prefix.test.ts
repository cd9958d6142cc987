// The big-prefix contract (big-prefix.ts) on the in-memory Kv.
import { afterAll } from 'vitest';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv, shared } from '../../src/lease/memory-kv.ts';
import { bigPrefixContract } from './big-prefix.ts';

const kv = new MemoryKv();
afterAll(() => kv.close());

const sharedKv = shared(kv);

bigPrefixContract('memory', () => ({
  prefix: '/big-memory',
  putAll: async (entries) => {
    for (const [k, v] of entries) kv.putRaw(k, v);
  },
  kv: async () => sharedKv,
  store: async () => new KvLeaseStore({ kv: sharedKv, prefix: '/big-memory' }),
}));
