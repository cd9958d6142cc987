// The big-prefix contract (big-prefix.ts) on the in-memory Kv.
import { afterAll } from 'vitest';
import type { Kv } from '../../src/lease/kv.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../helpers/memory-kv.ts';
import { bigPrefixContract } from './big-prefix.ts';

const kv = new MemoryKv();
afterAll(() => kv.close());

/** Stores share one MemoryKv; closing a store must not close it. */
const shared: Kv = {
  description: kv.description,
  list: (p, s) => kv.list(p, s),
  get: (k, s) => kv.get(k, s),
  create: (k, v, t, s) => kv.create(k, v, t, s),
  replace: (o) => kv.replace(o),
  deleteIf: (k, e, s) => kv.deleteIf(k, e, s),
  expiresAt: (k, s) => kv.expiresAt(k, s),
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
