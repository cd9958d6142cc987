// The hand-written etcd protobuf codec (src/lease/etcd-proto.ts) against protobufjs loading etcd's
// own rpc.proto from the etcd3 package, a dev-only oracle: each request twill sends, encoded here,
// decodes there to the same fields; each reply, encoded there, decodes here to the same values.
// int64 values above 2^53 (and negative ones) keep every digit; keys hold bytes that are not UTF-8.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import protobuf from 'protobufjs';
import { describe, expect, it } from 'vitest';
import {
  decodeAuthenticateResponse,
  decodeKeyValue,
  decodeLeaseGrantResponse,
  decodeLeaseRevokeResponse,
  decodeLeaseTimeToLiveResponse,
  decodeRangeResponse,
  decodeTxnResponse,
  decodeWatchResponse,
  encodeAuthenticateRequest,
  encodeLeaseGrantRequest,
  encodeLeaseRevokeRequest,
  encodeLeaseTimeToLiveRequest,
  encodeRangeRequest,
  encodeTxnRequest,
  encodeWatchRequest,
  EtcdProtoError,
} from '../../src/lease/etcd-proto.ts';

const PROTO = join(
  createRequire(import.meta.url).resolve('etcd3/package.json'),
  '..',
  'proto',
  'rpc.proto',
);
const root = new protobuf.Root().loadSync(PROTO, { keepCase: true });
const type = (name: string): protobuf.Type => root.lookupType(name);
/** protobufjs's view of a message: int64 as decimal strings, bytes as Buffers, enums by name */
const decoded = (name: string, buf: Buffer, oneofs = true): Record<string, unknown> =>
  type(name).toObject(type(name).decode(buf), {
    longs: String,
    enums: String,
    bytes: Buffer,
    defaults: false,
    oneofs,
  });
const encoded = (name: string, obj: Record<string, unknown>): Buffer => {
  const buf = Buffer.from(type(name).encode(type(name).fromObject(obj)).finish());
  // the oracle itself keeps every digit (it holds int64 as Long) and knows every field given
  expect(decoded(name, buf, false)).toEqual(obj);
  return buf;
};

const BIG = '9223372036854775807'; // int64 max, far above 2^53
const BIG2 = '9007199254740993'; // 2^53 + 1: a double would round it to 2^53
const NEG = '-9223372036854775808';
const U64_BIG = '18446744073709551615'; // uint64 max (cluster ids are uint64)
const RAW_KEY = Buffer.from([0x2f, 0xff, 0xfe, 0x00, 0xc3, 0x28, 0x80]); // not UTF-8
const RAW_VALUE = Buffer.from([0xf0, 0x28, 0x8c, 0xbc, 0x00, 0x01]);

describe('requests: encoded here, decoded by protobufjs from rpc.proto', () => {
  it('RangeRequest', () => {
    const buf = encodeRangeRequest({
      key: RAW_KEY,
      rangeEnd: Buffer.from([0x2f, 0xff, 0xff]),
      limit: 200,
      revision: BIG,
      keysOnly: true,
      minCreateRevision: 7n,
      maxCreateRevision: BIG,
    });
    expect(decoded('etcdserverpb.RangeRequest', buf)).toEqual({
      key: RAW_KEY,
      range_end: Buffer.from([0x2f, 0xff, 0xff]),
      limit: '200',
      revision: BIG,
      keys_only: true,
      min_create_revision: '7',
      max_create_revision: BIG,
    });
    // proto3 defaults are left out
    expect(decoded('etcdserverpb.RangeRequest', encodeRangeRequest({ key: RAW_KEY }))).toEqual({
      key: RAW_KEY,
    });
  });

  it('TxnRequest: create-if-absent put with lease and prev_kv', () => {
    const buf = encodeTxnRequest({
      compare: [{ key: RAW_KEY, result: 'equal', createRevision: 0 }],
      success: [{ put: { key: RAW_KEY, value: RAW_VALUE, lease: BIG2, prevKv: true } }],
    });
    expect(decoded('etcdserverpb.TxnRequest', buf)).toEqual({
      // the oneof is set even at 0 (target_union names it), as etcd's own client sends it
      compare: [
        { target: 'Create', key: RAW_KEY, create_revision: '0', target_union: 'create_revision' },
      ],
      success: [
        {
          request: 'request_put',
          request_put: { key: RAW_KEY, value: RAW_VALUE, lease: BIG2, prev_kv: true },
        },
      ],
    });
  });

  it('TxnRequest: compare mod revision, delete', () => {
    const buf = encodeTxnRequest({
      compare: [{ key: RAW_KEY, result: 'equal', modRevision: BIG }],
      success: [{ deleteRange: { key: RAW_KEY } }],
      failure: [{ deleteRange: { key: Buffer.from('a'), rangeEnd: Buffer.from('b') } }],
    });
    expect(decoded('etcdserverpb.TxnRequest', buf)).toEqual({
      compare: [{ target: 'Mod', key: RAW_KEY, mod_revision: BIG, target_union: 'mod_revision' }],
      success: [{ request: 'request_delete_range', request_delete_range: { key: RAW_KEY } }],
      failure: [
        {
          request: 'request_delete_range',
          request_delete_range: { key: Buffer.from('a'), range_end: Buffer.from('b') },
        },
      ],
    });
  });

  it('Lease requests', () => {
    expect(
      decoded('etcdserverpb.LeaseGrantRequest', encodeLeaseGrantRequest({ ttl: 86400 })),
    ).toEqual({ TTL: '86400' });
    expect(
      decoded('etcdserverpb.LeaseGrantRequest', encodeLeaseGrantRequest({ ttl: 5, id: BIG })),
    ).toEqual({ TTL: '5', ID: BIG });
    expect(
      decoded('etcdserverpb.LeaseRevokeRequest', encodeLeaseRevokeRequest({ id: BIG2 })),
    ).toEqual({ ID: BIG2 });
    expect(
      decoded('etcdserverpb.LeaseTimeToLiveRequest', encodeLeaseTimeToLiveRequest({ id: NEG })),
    ).toEqual({ ID: NEG });
  });

  it('AuthenticateRequest', () => {
    expect(
      decoded(
        'etcdserverpb.AuthenticateRequest',
        encodeAuthenticateRequest({ name: 'root', password: 'pä$$ wörd' }),
      ),
    ).toEqual({ name: 'root', password: 'pä$$ wörd' });
  });

  it('WatchRequest: create and cancel', () => {
    expect(
      decoded(
        'etcdserverpb.WatchRequest',
        encodeWatchRequest({
          create: {
            key: RAW_KEY,
            rangeEnd: Buffer.from([0x30]),
            startRevision: BIG,
            progressNotify: true,
            prevKv: true,
          },
        }),
      ),
    ).toEqual({
      request_union: 'create_request',
      create_request: {
        key: RAW_KEY,
        range_end: Buffer.from([0x30]),
        start_revision: BIG,
        progress_notify: true,
        prev_kv: true,
      },
    });
    expect(
      decoded('etcdserverpb.WatchRequest', encodeWatchRequest({ cancel: { watchId: 0 } })),
    ).toEqual({ request_union: 'cancel_request', cancel_request: { watch_id: '0' } });
    expect(
      decoded('etcdserverpb.WatchRequest', encodeWatchRequest({ cancel: { watchId: BIG2 } })),
    ).toEqual({ request_union: 'cancel_request', cancel_request: { watch_id: BIG2 } });
  });
});

const HEADER = { cluster_id: U64_BIG, member_id: '42', revision: BIG, raft_term: '7' };
const OUR_HEADER = { clusterId: U64_BIG, memberId: '42', revision: BIG, raftTerm: '7' };
const KV = {
  key: RAW_KEY,
  create_revision: BIG2,
  mod_revision: BIG,
  version: '3',
  value: RAW_VALUE,
  lease: NEG,
};
const OUR_KV = {
  key: RAW_KEY,
  createRevision: BIG2,
  modRevision: BIG,
  version: '3',
  value: RAW_VALUE,
  lease: NEG,
};

describe('replies: encoded by protobufjs from rpc.proto, decoded here', () => {
  it('RangeResponse', () => {
    const buf = encoded('etcdserverpb.RangeResponse', {
      header: HEADER,
      kvs: [{ key: Buffer.from('/b'), mod_revision: '5' }, KV],
      more: true,
      count: BIG2,
    });
    // keys and values as text; the last key byte for byte, bytes that are not UTF-8 too (the
    // next page starts after it)
    expect(decodeRangeResponse(buf)).toEqual({
      header: OUR_HEADER,
      kvs: [
        {
          key: '/b',
          createRevision: '0',
          modRevision: '5',
          version: '0',
          value: '',
          lease: '0',
        },
        { ...OUR_KV, key: RAW_KEY.toString('utf8'), value: RAW_VALUE.toString('utf8') },
      ],
      more: true,
      count: BIG2,
      lastKey: RAW_KEY,
    });
    // an empty reply: every field at its default
    expect(decodeRangeResponse(Buffer.alloc(0))).toEqual({
      header: { clusterId: '0', memberId: '0', revision: '0', raftTerm: '0' },
      kvs: [],
      more: false,
      count: '0',
      lastKey: undefined,
    });
  });

  it('TxnResponse with a put reply carrying prev_kv, and a delete reply', () => {
    const buf = encoded('etcdserverpb.TxnResponse', {
      header: HEADER,
      succeeded: true,
      responses: [
        { response_put: { header: HEADER, prev_kv: KV } },
        { response_delete_range: { header: HEADER, deleted: '1' } },
        { response_range: { header: HEADER, kvs: [KV] } },
      ],
    });
    expect(decodeTxnResponse(buf)).toEqual({
      header: OUR_HEADER,
      succeeded: true,
      responses: [
        { put: { header: OUR_HEADER, prevKv: OUR_KV } },
        { deleteRange: { header: OUR_HEADER, deleted: '1' } },
        {},
      ],
    });
    const failed = decodeTxnResponse(
      encoded('etcdserverpb.TxnResponse', { header: HEADER, succeeded: false }),
    );
    expect(failed.succeeded).toBe(false);
    expect(failed.responses).toEqual([]);
    // a put without prev_kv (the key was absent)
    expect(
      decodeTxnResponse(
        encoded('etcdserverpb.TxnResponse', {
          succeeded: true,
          responses: [{ response_put: { header: HEADER } }],
        }),
      ).responses[0]?.put?.prevKv,
    ).toBeUndefined();
  });

  it('Lease replies', () => {
    expect(
      decodeLeaseGrantResponse(
        encoded('etcdserverpb.LeaseGrantResponse', {
          header: HEADER,
          ID: BIG,
          TTL: '86400',
          error: 'no space',
        }),
      ),
    ).toEqual({ header: OUR_HEADER, id: BIG, ttl: '86400', error: 'no space' });
    expect(
      decodeLeaseTimeToLiveResponse(
        encoded('etcdserverpb.LeaseTimeToLiveResponse', {
          header: HEADER,
          ID: BIG2,
          TTL: '-1',
          grantedTTL: '60',
          keys: [RAW_KEY],
        }),
      ),
    ).toEqual({ header: OUR_HEADER, id: BIG2, ttl: '-1', grantedTtl: '60' });
    expect(
      decodeLeaseRevokeResponse(encoded('etcdserverpb.LeaseRevokeResponse', { header: HEADER })),
    ).toEqual({ header: OUR_HEADER });
  });

  it('AuthenticateResponse', () => {
    expect(
      decodeAuthenticateResponse(
        encoded('etcdserverpb.AuthenticateResponse', {
          header: HEADER,
          token: 'VzYWgoDKhLcNxKhW.42',
        }),
      ),
    ).toEqual({ header: OUR_HEADER, token: 'VzYWgoDKhLcNxKhW.42' });
  });

  it('WatchResponse: created, events, cancelled for compaction', () => {
    expect(
      decodeWatchResponse(
        encoded('etcdserverpb.WatchResponse', { header: HEADER, watch_id: '0', created: true }),
      ),
    ).toEqual({
      header: OUR_HEADER,
      watchId: '0',
      created: true,
      canceled: false,
      compactRevision: '0',
      cancelReason: '',
      fragment: false,
      events: [],
    });
    const events = decodeWatchResponse(
      encoded('etcdserverpb.WatchResponse', {
        header: HEADER,
        watch_id: BIG2,
        events: [
          { type: 'Put', kv: KV },
          { type: 'Delete', kv: { key: RAW_KEY, mod_revision: BIG }, prev_kv: KV },
        ],
      }),
    );
    expect(events.watchId).toBe(BIG2);
    expect(events.events).toEqual([
      { type: 'put', kv: OUR_KV },
      {
        type: 'delete',
        kv: { ...OUR_KV, createRevision: '0', version: '0', value: Buffer.alloc(0), lease: '0' },
        prevKv: OUR_KV,
      },
    ]);
    expect(
      decodeWatchResponse(
        encoded('etcdserverpb.WatchResponse', {
          header: HEADER,
          canceled: true,
          created: true,
          compact_revision: BIG2,
          cancel_reason: 'mvcc: required revision has been compacted',
          fragment: true,
        }),
      ),
    ).toMatchObject({
      created: true,
      canceled: true,
      compactRevision: BIG2,
      cancelReason: 'mvcc: required revision has been compacted',
      fragment: true,
    });
  });
});

describe('known bytes', () => {
  it('encodes a negative int64 as ten bytes of two’s complement, and reads it back', () => {
    // LeaseRevokeRequest{ID: -1}: tag 0x08, then 0xff×9 0x01
    const buf = encodeLeaseRevokeRequest({ id: -1 });
    expect(buf.toString('hex')).toBe('08ffffffffffffffffff01');
    // the same bytes as KeyValue.create_revision (field 2: tag 0x10)
    expect(decodeKeyValue(Buffer.from('10ffffffffffffffffff01', 'hex')).createRevision).toBe('-1');
  });

  // a varint is read as a number up to 7 bytes (2^49 - 1) and as a bigint past that
  it.each([
    '127',
    '128',
    '562949953421311',
    '562949953421312',
    '9007199254740993',
    '9223372036854775807',
    '-9223372036854775808',
  ])('reads revision %s, at the edges of a 7-byte varint and past them', (rev) => {
    const buf = encoded('mvccpb.KeyValue', { key: RAW_KEY, create_revision: rev, version: '1' });
    const kv = decodeKeyValue(buf);
    expect(kv.createRevision).toBe(rev);
    expect(kv.version).toBe('1');
    expect(kv.key).toEqual(RAW_KEY);
  });

  it('skips fields it does not know, of every wire type', () => {
    // field 15 varint 1, field 14 fixed64, field 13 fixed32, field 12 bytes "xy", then key "k"
    const buf = Buffer.from(
      '7801' + '71' + '00'.repeat(8) + '6d' + '00'.repeat(4) + '62027879' + '0a016b',
      'hex',
    );
    expect(decodeKeyValue(buf).key).toEqual(Buffer.from('k'));
  });

  it.each([
    ['a truncated varint', '1080'],
    ['a varint longer than 10 bytes', `10${'ff'.repeat(10)}01`],
    ['a length past the end', '0a05abcd'],
    ['a huge length', '0affffffff0f'],
    ['a group (wire type 3)', '0b'],
    ['field number 0', '0001'],
    ['a varint where bytes belong', '0801'],
  ])('refuses %s', (_what, hex) => {
    expect(() => decodeKeyValue(Buffer.from(hex, 'hex'))).toThrow(EtcdProtoError);
    // the same KeyValue inside a RangeResponse, read in place
    const kv = Buffer.from(hex, 'hex');
    const range = Buffer.concat([Buffer.from([0x12, kv.length]), kv]);
    expect(() => decodeRangeResponse(range)).toThrow(EtcdProtoError);
  });

  it("refuses a RangeResponse kv's field that runs past the kv, though not past the reply", () => {
    // a kv of 3 bytes whose key (field 1) claims 5; the 5 bytes after the kv are a well-formed
    // count (field 4, twice): read to the reply's end, the key would fit and nothing would fail
    const buf = Buffer.from('12030a056120012001', 'hex');
    expect(() => decodeRangeResponse(buf)).toThrow(/field 1 runs past the end/);
  });

  it.each([
    ['a revision as bytes', '120131'],
    ['a value as a varint', '2801'],
  ])('refuses a RangeResponse kv with %s', (_what, hex) => {
    const kv = Buffer.from(`0a012f${hex}`, 'hex');
    const range = Buffer.concat([Buffer.from([0x12, kv.length]), kv]);
    expect(() => decodeRangeResponse(range)).toThrow(/is not (a varint|length-delimited)/);
  });
});
