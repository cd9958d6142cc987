// The protobuf messages of etcd's v3 gRPC API that twill sends and reads, by hand: field numbers
// and types from etcd's api/etcdserverpb/rpc.proto and api/mvccpb/kv.proto. Only what twill uses
// is here; fields it never reads are skipped on decode like any unknown field. int64 and uint64
// values (revisions, lease IDs, cluster ids) are decimal strings, so none loses precision. A
// malformed reply (a truncated field, a varint longer than 10 bytes, a group) throws
// EtcdProtoError.

/** A reply that is not the protobuf it claims to be. */
export class EtcdProtoError extends Error {
  constructor(message: string) {
    super(`malformed etcd reply: ${message}`);
    this.name = 'EtcdProtoError';
  }
}

// ---- encoding ----

/** An int64 as given: a decimal string, a bigint or a safe integer. */
export type Int64 = string | bigint | number;

const U64 = (1n << 64n) - 1n;

/**
 * Appends fields in the order written; proto3 defaults are left out unless `always`. Requests are
 * written with it, and the canned replies of the build's warm-up (src/cli/warm-up-etcd.ts).
 */
export class ProtoWriter {
  private readonly parts: Buffer[] = [];

  private varintRaw(v: bigint): void {
    const bytes: number[] = [];
    let n = v & U64; // a negative int64 is its 64-bit two's complement, 10 bytes
    while (n > 0x7fn) {
      bytes.push(Number(n & 0x7fn) | 0x80);
      n >>= 7n;
    }
    bytes.push(Number(n));
    this.parts.push(Buffer.from(bytes));
  }

  private tag(field: number, wire: number): void {
    this.varintRaw(BigInt((field << 3) | wire));
  }

  /** int64, uint64, bool or enum */
  varint(field: number, value: Int64 | boolean | undefined, always = false): this {
    if (value === undefined) return this;
    const v = typeof value === 'boolean' ? (value ? 1n : 0n) : BigInt(value);
    if (v === 0n && !always) return this;
    this.tag(field, 0);
    this.varintRaw(v);
    return this;
  }

  bytes(field: number, value: Buffer | string | undefined, always = false): this {
    if (value === undefined) return this;
    const b = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
    if (b.length === 0 && !always) return this;
    this.tag(field, 2);
    this.varintRaw(BigInt(b.length));
    this.parts.push(b);
    return this;
  }

  /** an embedded message: always written, an empty one included (it is how a oneof is set) */
  message(field: number, body: Buffer): this {
    return this.bytes(field, body, true);
  }

  finish(): Buffer {
    return Buffer.concat(this.parts);
  }
}

export interface RangeRequest {
  readonly key: Buffer;
  readonly rangeEnd?: Buffer | undefined;
  readonly limit?: Int64 | undefined;
  readonly revision?: Int64 | undefined;
  readonly keysOnly?: boolean | undefined;
  /** only keys created at or after this revision (0: no bound) */
  readonly minCreateRevision?: Int64 | undefined;
  /** only keys created at or before this revision (0: no bound) */
  readonly maxCreateRevision?: Int64 | undefined;
}

export function encodeRangeRequest(r: RangeRequest): Buffer {
  return new ProtoWriter()
    .bytes(1, r.key)
    .bytes(2, r.rangeEnd)
    .varint(3, r.limit)
    .varint(4, r.revision)
    .varint(8, r.keysOnly)
    .varint(12, r.minCreateRevision)
    .varint(13, r.maxCreateRevision)
    .finish();
}

export interface Compare {
  readonly key: Buffer;
  /** CompareResult: EQUAL only (0) is used */
  readonly result: 'equal';
  /** one of the targets, the oneof target_union */
  readonly createRevision?: Int64;
  readonly modRevision?: Int64;
}

const COMPARE_TARGET = { create: 1, mod: 2 } as const;

function encodeCompare(c: Compare): Buffer {
  const w = new ProtoWriter().varint(1, 0); // EQUAL
  if (c.createRevision !== undefined)
    w.varint(2, COMPARE_TARGET.create).bytes(3, c.key).varint(5, c.createRevision, true);
  else if (c.modRevision !== undefined)
    w.varint(2, COMPARE_TARGET.mod).bytes(3, c.key).varint(6, c.modRevision, true);
  else throw new Error('etcd compare: no target');
  return w.finish();
}

export type RequestOp =
  | {
      readonly put: {
        readonly key: Buffer;
        readonly value: Buffer;
        readonly lease?: Int64 | undefined;
        readonly prevKv?: boolean | undefined;
      };
    }
  | { readonly deleteRange: { readonly key: Buffer; readonly rangeEnd?: Buffer | undefined } };

function encodeRequestOp(op: RequestOp): Buffer {
  if ('put' in op) {
    const p = op.put;
    const body = new ProtoWriter()
      .bytes(1, p.key)
      .bytes(2, p.value)
      .varint(3, p.lease)
      .varint(4, p.prevKv)
      .finish();
    return new ProtoWriter().message(2, body).finish();
  }
  const d = op.deleteRange;
  return new ProtoWriter()
    .message(3, new ProtoWriter().bytes(1, d.key).bytes(2, d.rangeEnd).finish())
    .finish();
}

export interface TxnRequest {
  readonly compare: readonly Compare[];
  readonly success: readonly RequestOp[];
  readonly failure?: readonly RequestOp[];
}

export function encodeTxnRequest(t: TxnRequest): Buffer {
  const w = new ProtoWriter();
  for (const c of t.compare) w.message(1, encodeCompare(c));
  for (const op of t.success) w.message(2, encodeRequestOp(op));
  for (const op of t.failure ?? []) w.message(3, encodeRequestOp(op));
  return w.finish();
}

export function encodeLeaseGrantRequest(r: { ttl: Int64; id?: Int64 }): Buffer {
  return new ProtoWriter().varint(1, r.ttl).varint(2, r.id).finish();
}

export function encodeLeaseRevokeRequest(r: { id: Int64 }): Buffer {
  return new ProtoWriter().varint(1, r.id).finish();
}

export function encodeLeaseTimeToLiveRequest(r: { id: Int64; keys?: boolean }): Buffer {
  return new ProtoWriter().varint(1, r.id).varint(2, r.keys).finish();
}

export function encodeAuthenticateRequest(r: { name: string; password: string }): Buffer {
  return new ProtoWriter().bytes(1, r.name).bytes(2, r.password).finish();
}

export type WatchRequest =
  | {
      readonly create: {
        readonly key: Buffer;
        readonly rangeEnd?: Buffer | undefined;
        readonly startRevision?: Int64 | undefined;
        readonly progressNotify?: boolean | undefined;
        readonly prevKv?: boolean | undefined;
      };
    }
  | { readonly cancel: { readonly watchId: Int64 } };

export function encodeWatchRequest(r: WatchRequest): Buffer {
  if ('create' in r) {
    const c = r.create;
    const body = new ProtoWriter()
      .bytes(1, c.key)
      .bytes(2, c.rangeEnd)
      .varint(3, c.startRevision)
      .varint(4, c.progressNotify)
      .varint(6, c.prevKv)
      .finish();
    return new ProtoWriter().message(1, body).finish();
  }
  return new ProtoWriter()
    .message(2, new ProtoWriter().varint(1, r.cancel.watchId, true).finish())
    .finish();
}

// ---- decoding ----

/** Reads one message's fields; `each` is called per field with a reader positioned on its value. */
class Reader {
  pos: number;
  readonly buf: Buffer;
  /** where the message ends in `buf` (a message read in place within a larger one) */
  private readonly end: number;

  constructor(buf: Buffer, start = 0, end = buf.length) {
    this.buf = buf;
    this.pos = start;
    this.end = end;
  }

  get done(): boolean {
    return this.pos >= this.end;
  }

  /**
   * A varint: a number while it has at most 7 bytes (49 bits, every tag, length and revision of
   * a store that has not made 2^49 revisions), else a bigint. Arithmetic on numbers: a bigint
   * operation for each byte cost a 5,000-lease listing about 10 ms in the interpreter twill runs
   * in (--max-opt=1).
   */
  varintRaw(): number | bigint {
    const buf = this.buf;
    const end = this.end;
    let pos = this.pos;
    let result = 0;
    let scale = 1;
    for (let i = 0; i < 7; i++) {
      if (pos >= end) throw new EtcdProtoError('truncated varint');
      const b = buf[pos++] ?? 0;
      result += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) {
        this.pos = pos;
        return result;
      }
      scale *= 128;
    }
    this.pos = pos;
    // 8 to 10 bytes: a large uint64, or a negative int64 (its two's complement, 10 bytes)
    let big = BigInt(result);
    for (let i = 7; i < 10; i++) {
      if (this.pos >= this.end) throw new EtcdProtoError('truncated varint');
      const b = buf[this.pos++] ?? 0;
      big |= BigInt(b & 0x7f) << BigInt(7 * i);
      if ((b & 0x80) === 0) return big & U64;
    }
    throw new EtcdProtoError('varint longer than 10 bytes');
  }

  /** the fields in order: field number, wire type, and a reader for the value */
  fields(each: (field: number, wire: number, value: FieldValue) => void): void {
    while (this.pos < this.end) {
      this.nextTag();
      const { field, wire } = this;
      switch (wire) {
        case 0: {
          const v = this.varintRaw();
          each(field, wire, { varint: v });
          break;
        }
        case 2: {
          const start = this.lengthDelimited(field);
          each(field, wire, { bytes: this.buf.subarray(start, this.pos) });
          break;
        }
        default:
          this.skipFixed(field, wire);
      }
    }
  }

  /** the last tag's field number and wire type */
  field = 0;
  wire = 0;

  /** Reads a field's tag into `field` and `wire`. */
  nextTag(): void {
    const tag = this.varintRaw();
    // a tag past 49 bits names a field number no message has: its low bits still give the wire
    this.field = typeof tag === 'number' ? Math.floor(tag / 8) : Number(tag >> 3n);
    this.wire = typeof tag === 'number' ? tag % 8 : Number(tag & 7n);
    if (this.field === 0) throw new EtcdProtoError('field number 0');
  }

  /** A length-delimited value: where it starts; `pos` is left at its end. */
  lengthDelimited(field: number): number {
    const len = this.varintRaw();
    if (typeof len !== 'number' || len > this.end - this.pos)
      throw new EtcdProtoError(`field ${field} runs past the end`);
    const start = this.pos;
    this.pos += len;
    return start;
  }

  /** Skips a fixed64 or fixed32 value; any other wire type here is malformed. */
  skipFixed(field: number, wire: number): void {
    const n = wire === 1 ? 8 : wire === 5 ? 4 : 0;
    if (n === 0) throw new EtcdProtoError(`wire type ${wire} of field ${field}`);
    if (this.pos + n > this.end) throw new EtcdProtoError('truncated fixed field');
    this.pos += n;
  }
}

interface FieldValue {
  /** a number below 2^49, else a bigint (Reader.varintRaw) */
  readonly varint?: number | bigint;
  readonly bytes?: Buffer;
}

function fieldsOf(buf: Buffer, each: (field: number, v: FieldValue) => void): void {
  new Reader(buf).fields((field, _wire, v) => each(field, v));
}

/**
 * A varint field as int64 (signed) in decimal; a length-delimited value where a varint belongs is
 * malformed.
 */
function int64(v: FieldValue, field: number): string {
  if (v.varint === undefined) throw notVarint(field);
  return int64Text(v.varint);
}

/** A varint as int64 (signed) in decimal. */
function int64Text(v: number | bigint): string {
  // a number is below 2^49: the same as a signed or an unsigned value
  return typeof v === 'number' ? String(v) : BigInt.asIntN(64, v).toString();
}

const notVarint = (field: number): EtcdProtoError =>
  new EtcdProtoError(`field ${field} is not a varint`);
const notBytes = (field: number): EtcdProtoError =>
  new EtcdProtoError(`field ${field} is not length-delimited`);

function uint64(v: FieldValue, field: number): string {
  if (v.varint === undefined) throw new EtcdProtoError(`field ${field} is not a varint`);
  return String(v.varint);
}

function bool(v: FieldValue, field: number): boolean {
  if (v.varint === undefined) throw new EtcdProtoError(`field ${field} is not a varint`);
  return v.varint !== 0 && v.varint !== 0n;
}

function bytes(v: FieldValue, field: number): Buffer {
  if (v.bytes === undefined) throw notBytes(field);
  return v.bytes;
}

function text(v: FieldValue, field: number): string {
  return bytes(v, field).toString('utf8');
}

export interface ResponseHeader {
  readonly clusterId: string;
  readonly memberId: string;
  readonly revision: string;
  readonly raftTerm: string;
}

export function decodeResponseHeader(buf: Buffer): ResponseHeader {
  const h = { clusterId: '0', memberId: '0', revision: '0', raftTerm: '0' };
  fieldsOf(buf, (f, v) => {
    if (f === 1) h.clusterId = uint64(v, f);
    else if (f === 2) h.memberId = uint64(v, f);
    else if (f === 3) h.revision = int64(v, f);
    else if (f === 4) h.raftTerm = uint64(v, f);
  });
  return h;
}

const NO_HEADER: ResponseHeader = { clusterId: '0', memberId: '0', revision: '0', raftTerm: '0' };
const EMPTY: Buffer = Buffer.alloc(0);

export interface KeyValue {
  readonly key: Buffer;
  readonly createRevision: string;
  readonly modRevision: string;
  readonly version: string;
  readonly value: Buffer;
  readonly lease: string;
}

export function decodeKeyValue(buf: Buffer): KeyValue {
  const kv = {
    key: EMPTY,
    createRevision: '0',
    modRevision: '0',
    version: '0',
    value: EMPTY,
    lease: '0',
  };
  fieldsOf(buf, (f, v) => {
    if (f === 1) kv.key = bytes(v, f);
    else if (f === 2) kv.createRevision = int64(v, f);
    else if (f === 3) kv.modRevision = int64(v, f);
    else if (f === 4) kv.version = int64(v, f);
    else if (f === 5) kv.value = bytes(v, f);
    else if (f === 6) kv.lease = int64(v, f);
  });
  return kv;
}

/** A key-value of a RangeResponse, key and value as text (bytes that are not UTF-8 replaced). */
export interface RangeKv {
  readonly key: string;
  readonly createRevision: string;
  readonly modRevision: string;
  readonly version: string;
  readonly value: string;
  readonly lease: string;
}

export interface RangeResponse {
  readonly header: ResponseHeader;
  readonly kvs: RangeKv[];
  readonly more: boolean;
  readonly count: string;
  /** the last kv's key as etcd sent it, byte for byte (a next page starts after it) */
  readonly lastKey: Buffer | undefined;
}

/**
 * A RangeResponse. Its kvs are read in place, field by field, straight into text, where `fieldsOf`
 * made an object and a sub-buffer for every field and the listing turned them into text after: a
 * 5,000-lease reply decoded into entries in 20-26 ms, now 16-22 (micro-benchmark, same run, the
 * daemon's V8 flags).
 */
export function decodeRangeResponse(buf: Buffer): RangeResponse {
  let header = NO_HEADER;
  let more = false;
  let count = '0';
  const kvs: RangeKv[] = [];
  let lastKey = { start: 0, end: 0 };
  const r = new Reader(buf);
  while (!r.done) {
    r.nextTag();
    const { field, wire } = r;
    if (wire === 2) {
      const start = r.lengthDelimited(field);
      if (field === 1) header = decodeResponseHeader(buf.subarray(start, r.pos));
      else if (field === 2) {
        const kv = rangeKv(new Reader(buf, start, r.pos));
        kvs.push(kv.kv);
        lastKey = kv.keyAt;
      } else if (field === 3 || field === 4) throw notVarint(field);
    } else if (wire === 0) {
      const v = r.varintRaw();
      if (field === 3) more = v !== 0 && v !== 0n;
      else if (field === 4) count = int64Text(v);
      else if (field === 1 || field === 2) throw notBytes(field);
    } else r.skipFixed(field, wire);
  }
  const keyBytes = kvs.length > 0 ? buf.subarray(lastKey.start, lastKey.end) : undefined;
  return { header, kvs, more, count, lastKey: keyBytes };
}

/** One KeyValue of a RangeResponse, read in place by `r`; where its key lies in the buffer. */
function rangeKv(r: Reader): { kv: RangeKv; keyAt: { start: number; end: number } } {
  const buf = r.buf;
  let key = '';
  let value = '';
  let createRevision = '0';
  let modRevision = '0';
  let version = '0';
  let lease = '0';
  let keyStart = 0;
  let keyEnd = 0;
  while (!r.done) {
    r.nextTag();
    const field = r.field;
    const wire = r.wire;
    if (wire === 2) {
      const start = r.lengthDelimited(field);
      if (field === 1) {
        key = buf.toString('utf8', start, r.pos);
        keyStart = start;
        keyEnd = r.pos;
      } else if (field === 5) value = buf.toString('utf8', start, r.pos);
      else if (field >= 2 && field <= 6) throw notVarint(field);
    } else if (wire === 0) {
      const v = r.varintRaw();
      if (field === 2) createRevision = int64Text(v);
      else if (field === 3) modRevision = int64Text(v);
      else if (field === 4) version = int64Text(v);
      else if (field === 6) lease = int64Text(v);
      else if (field === 1 || field === 5) throw notBytes(field);
    } else r.skipFixed(field, wire);
  }
  const kv = { key, createRevision, modRevision, version, value, lease };
  return { kv, keyAt: { start: keyStart, end: keyEnd } };
}

/** A ResponseOp: only response_put is read (twill's transactions put or delete). */
export interface ResponseOp {
  readonly put?: { readonly header: ResponseHeader; readonly prevKv?: KeyValue | undefined };
  readonly deleteRange?: { readonly header: ResponseHeader; readonly deleted: string };
}

function decodeResponseOp(buf: Buffer): ResponseOp {
  let op: ResponseOp = {};
  fieldsOf(buf, (f, v) => {
    if (f === 2) {
      const put: { header: ResponseHeader; prevKv?: KeyValue } = { header: NO_HEADER };
      fieldsOf(bytes(v, f), (g, w) => {
        if (g === 1) put.header = decodeResponseHeader(bytes(w, g));
        else if (g === 2) put.prevKv = decodeKeyValue(bytes(w, g));
      });
      op = { put };
    } else if (f === 3) {
      const del = { header: NO_HEADER, deleted: '0' };
      fieldsOf(bytes(v, f), (g, w) => {
        if (g === 1) del.header = decodeResponseHeader(bytes(w, g));
        else if (g === 2) del.deleted = int64(w, g);
      });
      op = { deleteRange: del };
    }
  });
  return op;
}

export interface TxnResponse {
  readonly header: ResponseHeader;
  readonly succeeded: boolean;
  readonly responses: ResponseOp[];
}

export function decodeTxnResponse(buf: Buffer): TxnResponse {
  const r = { header: NO_HEADER, succeeded: false, responses: [] as ResponseOp[] };
  fieldsOf(buf, (f, v) => {
    if (f === 1) r.header = decodeResponseHeader(bytes(v, f));
    else if (f === 2) r.succeeded = bool(v, f);
    else if (f === 3) r.responses.push(decodeResponseOp(bytes(v, f)));
  });
  return r;
}

export interface LeaseGrantResponse {
  readonly header: ResponseHeader;
  readonly id: string;
  readonly ttl: string;
  readonly error: string;
}

export function decodeLeaseGrantResponse(buf: Buffer): LeaseGrantResponse {
  const r = { header: NO_HEADER, id: '0', ttl: '0', error: '' };
  fieldsOf(buf, (f, v) => {
    if (f === 1) r.header = decodeResponseHeader(bytes(v, f));
    else if (f === 2) r.id = int64(v, f);
    else if (f === 3) r.ttl = int64(v, f);
    else if (f === 4) r.error = text(v, f);
  });
  return r;
}

export interface LeaseTimeToLiveResponse {
  readonly header: ResponseHeader;
  readonly id: string;
  /** seconds left; -1 when the lease has expired or does not exist */
  readonly ttl: string;
  readonly grantedTtl: string;
}

export function decodeLeaseTimeToLiveResponse(buf: Buffer): LeaseTimeToLiveResponse {
  const r = { header: NO_HEADER, id: '0', ttl: '0', grantedTtl: '0' };
  fieldsOf(buf, (f, v) => {
    if (f === 1) r.header = decodeResponseHeader(bytes(v, f));
    else if (f === 2) r.id = int64(v, f);
    else if (f === 3) r.ttl = int64(v, f);
    else if (f === 4) r.grantedTtl = int64(v, f);
  });
  return r;
}

/** LeaseRevokeResponse: only a header. */
export function decodeLeaseRevokeResponse(buf: Buffer): { readonly header: ResponseHeader } {
  let header = NO_HEADER;
  fieldsOf(buf, (f, v) => {
    if (f === 1) header = decodeResponseHeader(bytes(v, f));
  });
  return { header };
}

export interface AuthenticateResponse {
  readonly header: ResponseHeader;
  readonly token: string;
}

export function decodeAuthenticateResponse(buf: Buffer): AuthenticateResponse {
  const r = { header: NO_HEADER, token: '' };
  fieldsOf(buf, (f, v) => {
    if (f === 1) r.header = decodeResponseHeader(bytes(v, f));
    else if (f === 2) r.token = text(v, f);
  });
  return r;
}

export interface WatchEvent {
  readonly type: 'put' | 'delete';
  readonly kv: KeyValue;
  readonly prevKv?: KeyValue | undefined;
}

export interface WatchResponse {
  readonly header: ResponseHeader;
  readonly watchId: string;
  readonly created: boolean;
  readonly canceled: boolean;
  readonly compactRevision: string;
  readonly cancelReason: string;
  readonly fragment: boolean;
  readonly events: WatchEvent[];
}

function decodeEvent(buf: Buffer): WatchEvent {
  let type: WatchEvent['type'] = 'put';
  let kv: KeyValue | undefined;
  let prevKv: KeyValue | undefined;
  fieldsOf(buf, (f, v) => {
    if (f === 1) {
      const n = uint64(v, f);
      if (n !== '0' && n !== '1') throw new EtcdProtoError(`event type ${n}`);
      type = n === '1' ? 'delete' : 'put';
    } else if (f === 2) kv = decodeKeyValue(bytes(v, f));
    else if (f === 3) prevKv = decodeKeyValue(bytes(v, f));
  });
  return { type, kv: kv ?? decodeKeyValue(EMPTY), ...(prevKv ? { prevKv } : {}) };
}

export function decodeWatchResponse(buf: Buffer): WatchResponse {
  const r = {
    header: NO_HEADER,
    watchId: '0',
    created: false,
    canceled: false,
    compactRevision: '0',
    cancelReason: '',
    fragment: false,
    events: [] as WatchEvent[],
  };
  fieldsOf(buf, (f, v) => {
    if (f === 1) r.header = decodeResponseHeader(bytes(v, f));
    else if (f === 2) r.watchId = int64(v, f);
    else if (f === 3) r.created = bool(v, f);
    else if (f === 4) r.canceled = bool(v, f);
    else if (f === 5) r.compactRevision = int64(v, f);
    else if (f === 6) r.cancelReason = text(v, f);
    else if (f === 7) r.fragment = bool(v, f);
    else if (f === 11) r.events.push(decodeEvent(bytes(v, f)));
  });
  return r;
}
