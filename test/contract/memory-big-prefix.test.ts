// The big-prefix contract (big-prefix.ts) on the in-memory Kv.
import { afterAll } from 'vitest';
import type { Kv } from '../../src/lease/kv.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import { bigPrefixContract } from './big-prefix.ts';

const kv = new MemoryKv();
afterAll(() => kv.close());

/** Stores share one MemoryKv; closing a store must not close it. */
const shared: Kv = {
  description: kv.description,
  list: (p) => kv.list(p),
  get: (k) => kv.get(k),
  create: (k, v, t) => kv.create(k, v, t),
  replace: (k, v, e, t) => kv.replace(k, v, e, t),
  deleteIf: (k, e) => kv.deleteIf(k, e),
  expiresAt: (k) => kv.expiresAt(k),
  watch: (p, o) => kv.watch(p, o),
  close: async () => undefined,
};

bigPrefixContract('memory', () => ({
  prefix: '/big-memory',
  putAll: async (entries) => {
    for (const [k, v] of entries) kv.putRaw(k, v);
  },
  kv: async () => shared,
  store: async () => new KvLeaseStore({ kv: shared, prefix: '/big-memory' }),
}));
