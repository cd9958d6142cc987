// A lease prefix far larger than gRPC's 4 MiB default receive limit, on a
// real etcd (issue 14): the big-prefix contract at gRPC's default limit,
// a list that stays one snapshot while keys change and that starts over
// when its revision is compacted mid-list, values too large for any reply
// skipped and reported, and a daemon that gets its subnet.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EtcdKv, type EtcdOptions } from '../../src/lease/etcd-kv.ts';
import type { RangeRequest, RangeResponse } from '../../src/lease/etcd-proto.ts';
import type { KvPage } from '../../src/lease/kv.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import {
  bigKey,
  bigPrefixContract,
  bigPrefixEntries,
  BIG_KEYS,
  BIG_NETCONF,
  VALID_KEYS,
} from '../contract/big-prefix.ts';
import { startTestDaemon } from '../helpers/daemon.ts';
import { startEtcd, type EtcdServer } from '../../lab/kit/etcd.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const PREFIX = '/big-etcd';
const GRPC_DEFAULT = 4 * 1024 * 1024;
let etcd: EtcdServer;
let admin: Etcd3;
let dir: string;
const opened: EtcdKv[] = [];
const signal = new AbortController().signal;

beforeAll(async () => {
  etcd = await startEtcd();
  admin = new Etcd3({ hosts: etcd.endpoint });
  dir = await mkdtemp(join(tmpdir(), 'twill-big-'));
});
afterAll(async () => {
  await Promise.all(opened.map((k) => k.close()));
  admin?.close();
  await etcd?.destroy();
  await rm(dir, { recursive: true, force: true });
});

async function connect(o: Partial<EtcdOptions> = {}): Promise<EtcdKv> {
  const kv = await EtcdKv.connect({ endpoints: [etcd.endpoint], ...o });
  opened.push(kv);
  return kv;
}

async function putAll(entries: readonly [string, string][]): Promise<void> {
  // ~250 KB transactions of small values; each large value alone
  let batch: [string, string][] = [];
  const flush = async (): Promise<void> => {
    if (batch.length === 0) return;
    await admin.kv.txn({
      success: batch.map(([k, v]) => ({
        request_put: { key: Buffer.from(k), value: Buffer.from(v) },
      })),
    });
    batch = [];
  };
  for (const [k, v] of entries) {
    if (v.length > 100_000) await admin.put(k).value(v);
    else batch.push([k, v]);
    if (batch.length >= 100) await flush();
  }
  await flush();
}

// at gRPC's default receive limit, so paging (not a larger limit) is what lists it
bigPrefixContract('etcd', () => ({
  prefix: PREFIX,
  putAll,
  kv: () => connect({ maxReceiveBytes: GRPC_DEFAULT }),
  store: async () =>
    new KvLeaseStore({ kv: await connect({ maxReceiveBytes: GRPC_DEFAULT }), prefix: PREFIX }),
}));

describe('etcd list of a big prefix', () => {
  const subnets = `${PREFIX}/subnets/`;

  it('lists with the default client options too', async () => {
    const kv = await connect();
    const started = performance.now();
    const listing = await kv.list(subnets, signal);
    console.log(
      `etcd default options: listed ${listing.entries.length} keys in ${Math.round(performance.now() - started)} ms`,
    );
    expect(listing.entries.length).toBeGreaterThanOrEqual(bigPrefixEntries().length);
    expect(listing.skipped).toEqual([]);
  });

  it('stays one snapshot while keys change under it', async () => {
    const kv = await connect({ listPageSize: 50 });
    const writes: Promise<unknown>[] = [];
    let stop = false;
    const churn = (async () => {
      for (let i = 0; !stop; i++) {
        writes.push(
          admin
            .put(`${subnets}10.251.${i % 256}.0-24`)
            .value(`{"churn":${i}}`)
            .exec(),
        );
        writes.push(
          admin
            .delete()
            .key(`${subnets}10.${2 + ((i * 7) % 10)}.${(i * 13) % 256}.0-24`)
            .exec(),
        );
        await new Promise((r) => setTimeout(r, 2));
      }
    })();
    const pages: KvPage[] = [];
    const listing = await kv.list(subnets, signal, (p) => pages.push(p));
    stop = true;
    await churn;
    // told page by page, 50 keys at most, the first page first: the listing is their sum
    expect(pages.map((p) => p.first)).toEqual(pages.map((_, i) => i === 0));
    expect(pages.every((p) => p.entries.length <= 50)).toBe(true);
    expect(pages.flatMap((p) => p.entries)).toEqual(listing.entries);
    await Promise.all(writes);
    const then = await admin.kv.range({
      key: Buffer.from(subnets),
      range_end: Buffer.from(`${PREFIX}/subnets0`),
      revision: String(listing.revision),
      keys_only: true,
    });
    expect(listing.entries.map((e) => `${e.key}@${e.modRevision}`)).toEqual(
      then.kvs.map((kv) => `${kv.key.toString()}@${kv.mod_revision}`),
    );
    const now = await admin.kv.range({
      key: Buffer.from(subnets),
      range_end: Buffer.from(`${PREFIX}/subnets0`),
      keys_only: true,
    });
    expect(BigInt(now.header.revision)).toBeGreaterThan(listing.revision);
  });

  it('starts over when its revision is compacted mid-list', async () => {
    const kv = await connect({ listPageSize: 100 });
    // EtcdKv reads every page through its private range(): count the pages, compact at the third
    type Range = (req: RangeRequest) => Promise<RangeResponse>;
    const inside = kv as unknown as { range: Range };
    const range = inside.range.bind(kv);
    let pages = 0;
    inside.range = async (req) => {
      if (++pages === 3) {
        const rev = (await admin.put('/compact-me').value(String(pages))).header.revision;
        await admin.kv.compact({ revision: rev, physical: true });
      }
      return range(req);
    };
    const before = (await admin.get('/compact-me').exec()).header.revision;
    const told: KvPage[] = [];
    const listing = await kv.list(subnets, signal, (p) => told.push(p));
    // the first attempt failed at page 3; the second read every page
    expect(pages).toBeGreaterThan(3 + 30);
    // two pages told of the first attempt, then the second's from a first page again
    expect(told.map((p) => p.first).slice(0, 4)).toEqual([true, false, true, false]);
    expect(told.slice(2).flatMap((p) => p.entries)).toEqual(listing.entries);
    expect(listing.revision).toBeGreaterThan(BigInt(before));
    expect(listing.entries.length).toBeGreaterThan(2_900);
  });

  it('skips and reports a value too large for any reply, and lists the rest', async () => {
    const kv = await connect({ maxReceiveBytes: 1024 * 1024 });
    const listing = await kv.list(subnets, signal);
    expect(listing.skipped.map((s) => s.key).sort()).toEqual(
      Array.from({ length: BIG_KEYS }, (_, i) => subnets + bigKey(i)).sort(),
    );
    for (const s of listing.skipped) expect(s.reason).toMatch(/larger than the 1048576 bytes/);
    expect(listing.entries.length).toBeGreaterThan(2_900);
    const store = new KvLeaseStore({ kv, prefix: PREFIX });
    const records: { key: string; ok: boolean }[] = [];
    const ctl = new AbortController();
    const watching = store.watchLeases({
      signal: ctl.signal,
      onEvent: (e) => e.type === 'snapshot' && records.push(...e.records),
    });
    await waitFor(() => records.length > 0, { timeoutMs: 30_000, what: 'snapshot' });
    ctl.abort();
    await watching;
    for (let i = 0; i < BIG_KEYS; i++)
      expect(records.find((r) => r.key === bigKey(i))).toMatchObject({ ok: false });
  });

  it('a daemon gets its subnet and its peers, and logs no value whole', async () => {
    await admin.put(`${PREFIX}/config`).value(BIG_NETCONF);
    const store = new KvLeaseStore({ kv: await connect(), prefix: PREFIX });
    const node = await startTestDaemon({
      store,
      nodeName: 'big-1',
      publicIp: '192.0.2.251',
      subnetFile: join(dir, 'big-1.env'),
    });
    await waitFor(() => node.state() !== undefined, {
      timeoutMs: 60_000,
      what: 'lease on the big prefix',
    });
    // the padded vxlan leases; the host-gw ones are refused for their backend, the big and bad ones
    // as malformed
    await waitFor(() => (node.state()?.peers.length ?? 0) >= VALID_KEYS, {
      timeoutMs: 60_000,
      what: 'peers',
    });
    const malformed = node.log.lines.filter(
      (l) => l.msg === 'skipping invalid peer lease' && l.reason === 'malformed',
    );
    expect(malformed.map((l) => l.key)).toEqual(
      expect.arrayContaining([bigKey(0), '10.201.0.0-24']),
    );
    for (const l of node.log.lines) expect(JSON.stringify(l).length).toBeLessThan(4_000);
    await node.stop();
  });
});
