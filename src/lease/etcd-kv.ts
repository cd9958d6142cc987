// The Kv primitives on etcd v3 through twill's own gRPC client (etcd-grpc.ts
// over h2.ts, twill's HTTP/2 client; etcd-proto.ts for the messages). Writes are single
// transactions (create-if-absent, compare-mod-revision-and-put) bound to a
// freshly granted etcd lease, so a renewal never depends on a keepalive
// stream surviving an etcd restart. The watch detects a wiped store (the
// revision or cluster id going backwards on reconnect) and compaction, and
// hands both back to the caller to re-list.
import { readFile } from 'node:fs/promises';
import { TwillError, describeError } from '../errors.ts';
import { redactUrlCredentials } from '../log.ts';
import { abortable, backoffDelay, pause, retry } from '../util/abort.ts';
import { EtcdGrpc, GrpcError, Status, type CallHandle } from './etcd-grpc.ts';
import {
  decodeLeaseGrantResponse,
  decodeLeaseRevokeResponse,
  decodeLeaseTimeToLiveResponse,
  decodeRangeResponse,
  decodeTxnResponse,
  decodeWatchResponse,
  encodeLeaseGrantRequest,
  encodeLeaseRevokeRequest,
  encodeLeaseTimeToLiveRequest,
  encodeRangeRequest,
  encodeTxnRequest,
  encodeWatchRequest,
  type KeyValue,
  type RangeKv,
  type RangeRequest,
  type RangeResponse,
  type ResponseHeader,
  type TxnRequest,
  type TxnResponse,
  type WatchResponse,
} from './etcd-proto.ts';
import type {
  Kv,
  KvChange,
  KvEntry,
  KvListing,
  KvPage,
  KvReplace,
  KvSkipped,
  KvWatchOptions,
  KvWritten,
  WatchEnd,
} from './kv.ts';

export interface EtcdOptions {
  readonly endpoints: readonly string[];
  readonly caFile?: string | undefined;
  readonly certFile?: string | undefined;
  readonly keyFile?: string | undefined;
  readonly username?: string | undefined;
  readonly password?: string | undefined;
  /** deadline of each unary call, ms (default 5 s) */
  readonly callTimeoutMs?: number;
  /** keys per list page (default 200); a test knob */
  readonly listPageSize?: number;
  /** largest gRPC reply accepted, bytes (default 16 MiB); a test knob */
  readonly maxReceiveBytes?: number;
}

/**
 * Lists are read in pages of at most this many keys, all at the revision of
 * the first page. A flannel lease is 120 to 200 bytes, so a page is 120 to
 * 200 KB: 5,000 leases in 5 round trips (25 with pages of 200, which made a
 * cold start's listing about 10 ms longer on one machine with etcd beside it,
 * and costs a round trip each to an etcd across a network).
 */
export const LIST_PAGE_SIZE = 1000;
/**
 * The largest reply we accept (gRPC's default is 4 MiB; etcd's own Go client
 * accepts any size). 16 MiB holds any single value etcd accepts with its
 * default --max-request-bytes (1.5 MiB) or the recommended maximum (10 MiB),
 * while bounding what one reply can make us buffer. A page that would be
 * larger is read again with half as many keys; a single value that still does
 * not fit is skipped and reported by key.
 */
export const MAX_RECEIVE_BYTES = 16 * 1024 * 1024;
/** restarts of a list whose snapshot revision was compacted away under it */
const LIST_ATTEMPTS = 4;

const enc = (s: string): Buffer => Buffer.from(s, 'utf8');

function prefixEnd(prefix: string): Buffer {
  const end = enc(prefix);
  end[end.length - 1] = (end[end.length - 1] ?? 0) + 1;
  return end;
}

/** The smallest key after `key`: the next page starts there. */
function after(key: Buffer): Buffer {
  return Buffer.concat([key, Buffer.from([0])]);
}

/** A key for messages: never a hostile key whole. */
function shown(key: Buffer): string {
  const text = key.toString('utf8');
  return text.length <= 120 ? text : `${text.slice(0, 120)}… (${key.length} bytes)`;
}

/**
 * The reply was larger than we accept (etcd-grpc.ts: RESOURCE_EXHAUSTED, "Received message larger
 * than max", from the reply's length prefix).
 */
function tooLarge(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return (
    (err instanceof GrpcError && err.code === Status.RESOURCE_EXHAUSTED) ||
    /RESOURCE_EXHAUSTED|larger than max/i.test(err.message)
  );
}

/** etcd no longer holds the revision a page asked for. */
function compacted(err: unknown): boolean {
  return err instanceof Error && /required revision has been compacted/.test(err.message);
}

class ListRestart extends Error {}

/** A listing of some keys only, without their values (keysCreatedBetween). */
interface Only {
  readonly keysOnly: true;
  readonly minCreateRevision: bigint;
  readonly maxCreateRevision: bigint;
}

function toEntry(kv: KeyValue | RangeKv): KvEntry {
  return {
    key: typeof kv.key === 'string' ? kv.key : kv.key.toString('utf8'),
    value: typeof kv.value === 'string' ? kv.value : kv.value.toString('utf8'),
    modRevision: kv.modRevision,
    createRevision: kv.createRevision,
  };
}

/**
 * What went wrong in a TLS handshake, from a call's text (an OpenSSL alert
 * from etcd, or Node's verdict on etcd's certificate), for an operator.
 */
export function tlsProblem(text: string): string | undefined {
  const alert = /(?:ssl\/tls|sslv3|tlsv1[0-9]*) alert ([a-z ]+?)(?=[:\n]|$)/i.exec(text);
  if (alert) {
    return `TLS handshake failed: etcd refused our client certificate (${alert[0]}): none was given, or it is not from a CA in etcd's --trusted-ca-file, or it has expired; check --etcd-certfile and --etcd-keyfile`;
  }
  const verify =
    /(unable to verify the first certificate|unable to get (?:local )?issuer certificate|self[- ]signed certificate(?: in certificate chain)?|certificate has expired|certificate is not yet valid|Hostname\/IP does not match certificate's altnames[^.;]*|ERR_TLS_CERT_ALTNAME_INVALID)/i.exec(
      text,
    );
  if (verify) {
    return `TLS handshake failed: etcd's server certificate is not trusted (${verify[1] ?? ''}); check --etcd-cafile (the CA that signed etcd's certificate) and that the certificate names the endpoint's host or IP`;
  }
  if (/wrong version number|packet length too long|http_request|unknown protocol/i.test(text)) {
    return 'TLS handshake failed: the endpoint does not speak TLS; use an http:// endpoint, or enable TLS in etcd';
  }
  return undefined;
}

/** An etcd client failure as text: credentials in URLs redacted, TLS failures named. */
function describeEtcdError(err: unknown): string {
  const text = redactUrlCredentials(describeError(err));
  return tlsProblem(text) ?? text;
}

/** Wraps an etcd client failure into STORE_UNAVAILABLE with the operation named. */
function unavailable(what: string, err: unknown): TwillError {
  return new TwillError('STORE_UNAVAILABLE', `etcd ${what}: ${describeEtcdError(err)}`, {
    cause: err,
  });
}

/** The contents of a TLS file flag, or a FLAG_INVALID error naming it. */
async function readTlsFile(flag: string, path: string): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new TwillError(
      'FLAG_INVALID',
      `--${flag} ${JSON.stringify(path)}: cannot be read (${e.code ?? e.message})`,
      { cause: err },
    );
  }
}

/** Retries that need no wait: a list started over. */
const AT_ONCE = { next: (): number => 0 };

/**
 * The TLS material, when TLS is used: with any TLS file, or any https:// endpoint (the rule of the
 * etcd3 client twill used before), for every endpoint.
 */
async function tlsOptions(
  opts: EtcdOptions,
): Promise<{ ca?: Buffer; cert?: Buffer; key?: Buffer } | undefined> {
  const tls =
    opts.caFile || opts.certFile || opts.keyFile || opts.endpoints.some((e) => /^https:/i.test(e));
  if (!tls) return undefined;
  // without --etcd-cafile, Node's system roots verify etcd's certificate
  return {
    ...(opts.caFile ? { ca: await readTlsFile('etcd-cafile', opts.caFile) } : {}),
    ...(opts.certFile ? { cert: await readTlsFile('etcd-certfile', opts.certFile) } : {}),
    ...(opts.keyFile ? { key: await readTlsFile('etcd-keyfile', opts.keyFile) } : {}),
  };
}

const KV = '/etcdserverpb.KV/';
const LEASE = '/etcdserverpb.Lease/';
const WATCH = '/etcdserverpb.Watch/Watch';

export class EtcdKv implements Kv {
  readonly description: string;
  private readonly grpc: EtcdGrpc;
  private readonly pageSize: number;
  private readonly maxReceiveBytes: number;

  private constructor(grpc: EtcdGrpc, opts: EtcdOptions) {
    this.grpc = grpc;
    this.pageSize = Math.max(1, opts.listPageSize ?? LIST_PAGE_SIZE);
    this.maxReceiveBytes = opts.maxReceiveBytes ?? MAX_RECEIVE_BYTES;
    this.description = `etcd ${redactUrlCredentials(opts.endpoints.join(','))}`;
  }

  static async connect(opts: EtcdOptions): Promise<EtcdKv> {
    const grpc = new EtcdGrpc({
      endpoints: opts.endpoints,
      tls: await tlsOptions(opts),
      auth: opts.username ? { username: opts.username, password: opts.password ?? '' } : undefined,
      callTimeoutMs: opts.callTimeoutMs ?? 5_000,
      maxReceiveBytes: opts.maxReceiveBytes ?? MAX_RECEIVE_BYTES,
    });
    return new EtcdKv(grpc, opts);
  }

  /**
   * One Kv call: refused after the abort and given up as soon as `signal` aborts (the request runs
   * on to its deadline and its answer is dropped), both with the signal's reason; any other failure
   * is STORE_UNAVAILABLE naming `what`.
   */
  private async call<T>(what: string, signal: AbortSignal, work: () => Promise<T>): Promise<T> {
    signal.throwIfAborted();
    try {
      return await abortable(work(), signal);
    } catch (err) {
      signal.throwIfAborted();
      throw unavailable(what, err);
    }
  }

  /** KV/Range (a method of its own so a test can step in between pages). */
  private async range(req: RangeRequest): Promise<RangeResponse> {
    return decodeRangeResponse(await this.grpc.unary(`${KV}Range`, encodeRangeRequest(req)));
  }

  private async txn(req: TxnRequest): Promise<TxnResponse> {
    return decodeTxnResponse(await this.grpc.unary(`${KV}Txn`, encodeTxnRequest(req)));
  }

  async get(key: string, signal: AbortSignal): Promise<KvEntry | undefined> {
    return this.call(`get ${key}`, signal, async () => {
      const kv = (await this.range({ key: enc(key) })).kvs[0];
      return kv ? toEntry(kv) : undefined;
    });
  }

  async expiresAt(key: string, signal: AbortSignal): Promise<number | undefined> {
    return this.call(`expiry of ${key}`, signal, async () => {
      const kv = (await this.range({ key: enc(key) })).kvs[0];
      if (!kv || kv.lease === '0') return undefined;
      const res = decodeLeaseTimeToLiveResponse(
        await this.grpc.unary(
          `${LEASE}LeaseTimeToLive`,
          encodeLeaseTimeToLiveRequest({ id: kv.lease }),
        ),
      );
      const ttl = Number(res.ttl);
      return ttl >= 0 ? Date.now() + ttl * 1000 : undefined;
    });
  }

  /**
   * Lists `prefix` in pages of at most `pageSize` keys, every page at the
   * revision of the first, so the result is one consistent snapshot however
   * large the prefix. If that revision is compacted away mid-list, the list
   * starts over at a fresh revision.
   */
  async list(
    prefix: string,
    signal: AbortSignal,
    onPage?: (page: KvPage) => void,
  ): Promise<KvListing> {
    return this.listing(`list ${prefix}`, prefix, signal, undefined, onPage);
  }

  async keysCreatedBetween(
    prefix: string,
    revisions: { readonly after: bigint; readonly before: bigint },
    signal: AbortSignal,
  ): Promise<string[]> {
    // etcd's create-revision bounds are inclusive; one that is 0 is none
    const only: Only = {
      keysOnly: true,
      minCreateRevision: revisions.after + 1n,
      maxCreateRevision: revisions.before - 1n,
    };
    if (only.maxCreateRevision < only.minCreateRevision) return [];
    const what = `list ${prefix} created after ${revisions.after}`;
    // keys only: no reply is too large for one key, so none is skipped
    return (await this.listing(what, prefix, signal, only)).entries.map((e) => e.key);
  }

  /** listOnce, started over if the snapshot's revision is compacted away under it. */
  private listing(
    what: string,
    prefix: string,
    signal: AbortSignal,
    only?: Only,
    onPage?: (page: KvPage) => void,
  ): Promise<KvListing> {
    return this.call(what, signal, () =>
      retry(() => this.listOnce(prefix, signal, only, onPage), {
        signal,
        attempts: LIST_ATTEMPTS,
        retryIf: (err) => err instanceof ListRestart,
        backoff: AT_ONCE,
      }),
    );
  }

  private async listOnce(
    prefix: string,
    signal: AbortSignal,
    only?: Only,
    onPage?: (page: KvPage) => void,
  ): Promise<KvListing> {
    const end = prefixEnd(prefix);
    const entries: KvEntry[] = [];
    const skipped: KvSkipped[] = [];
    let from = enc(prefix);
    let revision: string | undefined;
    let limit = this.pageSize;
    /** a page was told to onPage in this attempt */
    let told = false;
    for (;;) {
      signal.throwIfAborted();
      let res;
      try {
        res = await this.range({ key: from, rangeEnd: end, limit, revision, ...only });
      } catch (err) {
        if (revision && compacted(err))
          throw new ListRestart(
            `revision ${revision} was compacted during the list; started over ${describeError(err)}`,
          );
        if (!tooLarge(err)) throw err;
        if (limit > 1) {
          // the page is larger than one reply may be: fewer keys per page
          limit = Math.max(1, Math.floor(limit / 2));
          continue;
        }
        // one value alone is larger than a reply may be: name it by key and go on
        const head = await this.range({
          key: from,
          rangeEnd: end,
          limit: 1,
          revision,
          ...only,
          keysOnly: true,
        });
        const [kv, key] = [head.kvs[0], head.lastKey];
        if (!kv || !key) throw err;
        revision ??= head.header.revision;
        skipped.push({
          key: kv.key,
          modRevision: kv.modRevision,
          reason: `value of ${shown(key)} is larger than the ${this.maxReceiveBytes} bytes an etcd reply may hold; skipped`,
        });
        from = after(key);
        limit = this.pageSize;
        continue;
      }
      // the first page fixes the snapshot; later replies carry the current revision in their header
      revision ??= res.header.revision;
      const page = res.kvs.map(toEntry);
      onPage?.({ entries: page, first: !told });
      told = true;
      for (const e of page) entries.push(e);
      if (!res.more || !res.lastKey) break;
      from = after(res.lastKey);
      limit = Math.min(this.pageSize, limit * 2);
    }
    return { entries, skipped, revision: BigInt(revision) };
  }

  private async grant(ttlSeconds: number): Promise<{ id: string; expiresAt: number }> {
    const res = decodeLeaseGrantResponse(
      await this.grpc.unary(`${LEASE}LeaseGrant`, encodeLeaseGrantRequest({ ttl: ttlSeconds })),
    );
    if (res.error) throw new Error(`lease grant: ${res.error}`);
    return { id: res.id, expiresAt: Date.now() + Number(res.ttl) * 1000 };
  }

  private async revoke(id: string): Promise<void> {
    await this.grpc
      .unary(`${LEASE}LeaseRevoke`, encodeLeaseRevokeRequest({ id }))
      .then(decodeLeaseRevokeResponse)
      .catch(() => undefined);
  }

  /**
   * Puts `key` if it is absent (no modRevision) or at `modRevision`, bound to
   * a new TTL lease (revoked when the compare fails, unless the key already
   * holds it: our own put, committed on a try whose reply was lost). On
   * success the old record's etcd lease, which now holds nothing of ours, is
   * revoked too.
   */
  private async guardedPut(o: {
    key: string;
    value: string;
    ttl: number;
    modRevision: string | undefined;
    what: string;
    signal: AbortSignal;
  }): Promise<KvWritten | undefined> {
    // A failure revokes nothing: the transaction may have committed with its reply lost, and
    // revoking the new lease could delete the key we just wrote. Let it expire instead; the
    // caller's retry finds the key by our PublicIP and adopts it.
    return this.call(`${o.what} ${o.key}`, o.signal, async () => {
      const granted = await this.grant(o.ttl);
      const res = await this.txn({
        compare: [
          o.modRevision === undefined
            ? { key: enc(o.key), result: 'equal', createRevision: 0 }
            : { key: enc(o.key), result: 'equal', modRevision: o.modRevision },
        ],
        success: [
          { put: { key: enc(o.key), value: enc(o.value), lease: granted.id, prevKv: true } },
        ],
      });
      if (!res.succeeded) {
        // The compare also fails when this very put committed on an earlier try whose reply was
        // lost (a leader killed mid-call: the call is tried again on the next member): the key
        // is then bound to our new lease, and revoking it would delete the record just written.
        // (The old record's etcd lease is then not revoked, its id being in the lost reply: it
        // holds nothing and runs out with its TTL.)
        const now = (await this.range({ key: enc(o.key) })).kvs[0];
        if (now?.lease === granted.id) {
          return {
            entry: { key: o.key, value: o.value, modRevision: now.modRevision },
            expiresAt: granted.expiresAt,
          };
        }
        await this.revoke(granted.id);
        return undefined;
      }
      // prev_kv is exactly the version the compare matched, read atomically with the put.
      const oldLease = res.responses[0]?.put?.prevKv?.lease;
      if (oldLease && oldLease !== '0') await this.revoke(oldLease);
      return {
        entry: { key: o.key, value: o.value, modRevision: res.header.revision },
        expiresAt: granted.expiresAt,
      };
    });
  }

  async create(
    key: string,
    value: string,
    ttlSeconds: number,
    signal: AbortSignal,
  ): Promise<KvWritten | undefined> {
    const what = 'create';
    return this.guardedPut({ key, value, ttl: ttlSeconds, modRevision: undefined, what, signal });
  }

  async replace(o: KvReplace): Promise<KvWritten | undefined> {
    return this.guardedPut({
      key: o.key,
      value: o.value,
      ttl: o.ttlSeconds,
      modRevision: o.expected,
      what: 'replace',
      signal: o.signal,
    });
  }

  async deleteIf(key: string, expected: string, signal: AbortSignal): Promise<boolean> {
    return this.call(`delete ${key}`, signal, async () => {
      const res = await this.txn({
        compare: [{ key: enc(key), result: 'equal', modRevision: expected }],
        success: [{ deleteRange: { key: enc(key) } }],
      });
      if (res.succeeded) return true;
      // The compare also fails when this very delete committed on an earlier try whose reply was
      // lost (a leader killed mid-call: the call is tried again on the next member), as for a put
      // (guardedPut). A key that is gone counts as deleted, whoever deleted it: the version asked
      // for is no longer there. One at another version is not ours to delete.
      return (await this.range({ key: enc(key), keysOnly: true })).kvs.length === 0;
    });
  }

  /**
   * Watches `prefix` from `opts.fromRevision` on a Watch stream of its own. A broken stream is
   * opened again after 200 ms doubling to 2 s, from the revision after the highest seen; once it
   * answers, the watch ends 'reconnected' (or 'wiped', or 'compacted' when etcd cancels it).
   */
  async watch(prefix: string, opts: KvWatchOptions): Promise<WatchEnd> {
    const session = new WatchSession(opts);
    const create = {
      key: enc(prefix),
      rangeEnd: prefixEnd(prefix),
      progressNotify: true,
    };
    let attempt = 0;
    let call: CallHandle | undefined;
    const stopped = new AbortController();
    void session.ended.then(() => stopped.abort());
    while (!session.done) {
      const broken = await new Promise<GrpcError | Error | undefined>((resolve) => {
        void session.ended.then(() => resolve(undefined));
        this.grpc
          .stream(WATCH, {
            onMessage: (msg) => {
              let res: WatchResponse;
              try {
                res = decodeWatchResponse(msg);
              } catch (err) {
                call?.cancel();
                resolve(err as Error);
                return;
              }
              if (res.created || res.events.length > 0 || res.canceled) attempt = 0;
              session.onResponse(res);
            },
            onEnd: (err) => resolve(err ?? new Error('etcd ended the watch stream')),
          })
          .then((c) => {
            call = c;
            if (session.done) return c.cancel();
            c.write(encodeWatchRequest({ create: { ...create, startRevision: session.next } }));
          }, resolve);
      });
      if (session.done || !broken) break;
      call = undefined;
      session.onDisconnected(broken);
      await pause(backoffDelay(200, 2_000, attempt++), stopped.signal).catch(() => undefined);
    }
    // Closing the stream cancels the watch in etcd; a watch etcd cancelled itself (compaction)
    // needs nothing more. The session ignores anything that still arrives.
    call?.cancel();
    return session.ended;
  }

  async close(): Promise<void> {
    this.grpc.close();
  }
}

/** Tracks one etcd watch: revisions seen, reconnects, and how it ended. */
class WatchSession {
  readonly ended: Promise<WatchEnd>;
  private resolve!: (end: WatchEnd) => void;
  private highest: bigint;
  private clusterId: string | undefined;
  private readonly opts: KvWatchOptions;
  done = false;
  private disconnected = false;

  constructor(opts: KvWatchOptions) {
    this.opts = opts;
    this.highest = opts.fromRevision - 1n;
    this.ended = new Promise((r) => (this.resolve = r));
    if (opts.signal.aborted) this.finish({ reason: 'aborted' });
    opts.signal.addEventListener('abort', () => this.finish({ reason: 'aborted' }), { once: true });
  }

  /** the revision a (re)created watch starts from: after the highest seen */
  get next(): string {
    return String(this.highest + 1n);
  }

  finish(end: WatchEnd): void {
    if (this.done) return;
    this.done = true;
    this.resolve(end);
  }

  onResponse(res: WatchResponse): void {
    if (this.done) return;
    if (res.canceled) {
      // etcd cancels a watch itself when its start revision was compacted away (compact_revision
      // set, the reason often empty), or refuses it (permission): either way, re-list
      const compactedAt =
        res.compactRevision !== '0'
          ? ` (compacted; the oldest revision is ${res.compactRevision})`
          : '';
      const why = res.cancelReason || 'cancelled by etcd';
      this.finish({ reason: 'compacted', detail: `etcd watch: ${why}${compactedAt}` });
      return;
    }
    if (res.created) {
      this.onHeader(res.header);
      if (this.done) return;
      this.opts.onConnectivity(true, 'etcd watch connected');
      // After a broken stream anything may have happened (a wipe whose new
      // revision already caught up, missed events): re-list rather than trust
      // the resumed stream.
      if (this.disconnected)
        this.finish({ reason: 'reconnected', detail: 'etcd watch reconnected' });
      return;
    }
    this.onHeader(res.header);
    if (this.done) return;
    const changes: KvChange[] = res.events.map((ev) =>
      ev.type === 'delete'
        ? { type: 'delete', key: ev.kv.key.toString('utf8') }
        : { type: 'put', entry: toEntry(ev.kv) },
    );
    if (changes.length > 0) this.opts.onChanges(changes);
  }

  onDisconnected(err: Error): void {
    if (this.done) return;
    this.disconnected = true;
    this.opts.onConnectivity(false, `etcd watch disconnected: ${describeEtcdError(err)}`);
  }

  /** Every response header: a revision below one already seen means etcd lost its data. */
  private onHeader(header: ResponseHeader): void {
    const revision = BigInt(header.revision);
    const clusterChanged = this.clusterId !== undefined && header.clusterId !== this.clusterId;
    if (revision < this.highest || clusterChanged) {
      this.finish({
        reason: 'wiped',
        detail: `etcd revision went back from ${this.highest} to ${revision}${clusterChanged ? ' (new cluster id)' : ''}`,
      });
      return;
    }
    this.clusterId = header.clusterId;
    if (revision > this.highest) this.highest = revision;
  }
}
