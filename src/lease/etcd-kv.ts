// The Kv primitives on etcd v3 through the etcd3 client. Writes are single
// transactions (create-if-absent, compare-mod-revision-and-put) bound to a
// freshly granted etcd lease, so a renewal never depends on a keepalive
// stream surviving an etcd restart. The watch detects a wiped store (the
// revision or cluster id going backwards on reconnect) and compaction, and
// hands both back to the caller to re-list.
import { readFile } from 'node:fs/promises';
import { Etcd3, type IKeyValue, type IOptions, type IResponseHeader, type Watcher } from 'etcd3';
import { GRPCUnavailableError } from 'etcd3';
import { TwillError, describeError } from '../errors.ts';
import { redactUrlCredentials } from '../log.ts';
import { abortable, backoffDelay, retry } from '../util/abort.ts';
import type {
  Kv,
  KvChange,
  KvEntry,
  KvListing,
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
 * the first page. A flannel lease is ~200 bytes, so a page is ~40 KB.
 */
export const LIST_PAGE_SIZE = 200;
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
 * The reply was larger than we accept (grpc-js: RESOURCE_EXHAUSTED, "Received message larger than
 * max").
 */
function tooLarge(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return (
    (err as { code?: unknown }).code === 8 ||
    err.name === 'GRPCResourceExhastedError' ||
    /RESOURCE_EXHAUSTED|larger than max/i.test(err.message)
  );
}

/** etcd no longer holds the revision a page asked for. */
function compacted(err: unknown): boolean {
  return err instanceof Error && /required revision has been compacted/.test(err.message);
}

class ListRestart extends Error {}

function toEntry(kv: IKeyValue): KvEntry {
  return {
    key: kv.key.toString('utf8'),
    value: kv.value.toString('utf8'),
    modRevision: kv.mod_revision,
    createRevision: kv.create_revision,
  };
}

/**
 * What went wrong in a TLS handshake, from grpc-js's text (an OpenSSL alert
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

/** Retries that need no wait: a list started over, a call sent to the next endpoint. */
const AT_ONCE = { next: (): number => 0 };
const NEVER_ABORTED = new AbortController().signal;

/** etcd3's fault-handling hooks, typed from its options (they are cockatiel's interfaces). */
type EtcdFaults = Required<NonNullable<IOptions['faultHandling']>>;

/**
 * A policy for etcd3, which only ever calls its `execute`: the call is tried up to `attempts`
 * times, at once, while it fails in a way `retryIf` accepts. Its events never fire.
 */
function policy(attempts: number, retryIf: (err: unknown) => boolean): EtcdFaults['global'] {
  return {
    _altReturn: undefined as never, // a type-only member of cockatiel's IPolicy
    onSuccess: () => ({ dispose: () => undefined }),
    onFailure: () => ({ dispose: () => undefined }),
    execute: (fn, signal = NEVER_ABORTED) =>
      retry(async () => fn({ signal }), { signal, attempts, retryIf, backoff: AT_ONCE }),
  };
}

/**
 * etcd3 declares watchBackoff as an IBackoff but calls it as cockatiel's backoff factory: `next()`
 * gives the first reconnect's delay, each delay's `next()` the one after, and it starts from the
 * factory again once the stream answers. These are Backoff's delays, 200 ms doubling to 2 s.
 */
function watchBackoff(): EtcdFaults['watchBackoff'] {
  const delay = (attempt: number): EtcdFaults['watchBackoff'] => ({
    duration: backoffDelay(200, 2_000, attempt),
    next: () => delay(attempt + 1),
  });
  return { duration: 0, next: () => delay(0) };
}

async function buildClientOptions(opts: EtcdOptions): Promise<IOptions> {
  const tls = opts.caFile || opts.certFile || opts.keyFile;
  const callTimeoutMs = opts.callTimeoutMs ?? 5_000;
  return {
    hosts: [...opts.endpoints],
    dialTimeout: callTimeoutMs,
    credentials: tls
      ? {
          // without --etcd-cafile, grpc-js falls back to the system roots (null, not an empty CA)
          rootCertificate: opts.caFile
            ? await readTlsFile('etcd-cafile', opts.caFile)
            : (null as unknown as Buffer),
          ...(opts.certFile
            ? { certChain: await readTlsFile('etcd-certfile', opts.certFile) }
            : {}),
          ...(opts.keyFile ? { privateKey: await readTlsFile('etcd-keyfile', opts.keyFile) } : {}),
        }
      : undefined,
    auth: opts.username ? { username: opts.username, password: opts.password ?? '' } : undefined,
    defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + callTimeoutMs }),
    // twill retries with its own backoff; the client's circuit breaker would
    // fail calls fast for seconds after etcd comes back. The client picks one
    // endpoint per call: an unreachable member (UNAVAILABLE only) is retried on
    // the next one at once, so losing one member of three costs no call.
    faultHandling: {
      host: () => policy(1, () => false),
      global: policy(opts.endpoints.length, (e) => e instanceof GRPCUnavailableError),
      watchBackoff: watchBackoff(),
    },
    grpcOptions: {
      'grpc.initial_reconnect_backoff_ms': 200,
      'grpc.max_reconnect_backoff_ms': 2_000,
      'grpc.keepalive_time_ms': 10_000,
      'grpc.keepalive_timeout_ms': 5_000,
      'grpc.max_receive_message_length': opts.maxReceiveBytes ?? MAX_RECEIVE_BYTES,
    },
  };
}

export class EtcdKv implements Kv {
  readonly description: string;
  private readonly client: Etcd3;
  private readonly pageSize: number;
  private readonly maxReceiveBytes: number;

  private constructor(client: Etcd3, opts: EtcdOptions) {
    this.client = client;
    this.pageSize = Math.max(1, opts.listPageSize ?? LIST_PAGE_SIZE);
    this.maxReceiveBytes = opts.maxReceiveBytes ?? MAX_RECEIVE_BYTES;
    this.description = `etcd ${redactUrlCredentials(opts.endpoints.join(','))}`;
  }

  static async connect(opts: EtcdOptions): Promise<EtcdKv> {
    return new EtcdKv(new Etcd3(await buildClientOptions(opts)), opts);
  }

  /**
   * One Kv call: refused after the abort and given up as soon as `signal` aborts (the etcd3 client
   * takes no signal: the request runs on and its answer is dropped), both with the signal's reason;
   * any other failure is STORE_UNAVAILABLE naming `what`.
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

  async get(key: string, signal: AbortSignal): Promise<KvEntry | undefined> {
    return this.call(`get ${key}`, signal, async () => {
      const kv = (await this.client.kv.range({ key: enc(key) })).kvs[0];
      return kv ? toEntry(kv) : undefined;
    });
  }

  async expiresAt(key: string, signal: AbortSignal): Promise<number | undefined> {
    return this.call(`expiry of ${key}`, signal, async () => {
      const kv = (await this.client.kv.range({ key: enc(key) })).kvs[0];
      if (!kv || !kv.lease || kv.lease === '0') return undefined;
      const ttl = Number(
        (await this.client.leaseClient.leaseTimeToLive({ ID: kv.lease, keys: false })).TTL,
      );
      return ttl >= 0 ? Date.now() + ttl * 1000 : undefined;
    });
  }

  /**
   * Lists `prefix` in pages of at most `pageSize` keys, every page at the
   * revision of the first, so the result is one consistent snapshot however
   * large the prefix. If that revision is compacted away mid-list, the list
   * starts over at a fresh revision.
   */
  async list(prefix: string, signal: AbortSignal): Promise<KvListing> {
    return this.call(`list ${prefix}`, signal, () =>
      retry(() => this.listOnce(prefix, signal), {
        signal,
        attempts: LIST_ATTEMPTS,
        retryIf: (err) => err instanceof ListRestart,
        backoff: AT_ONCE,
      }),
    );
  }

  private async listOnce(prefix: string, signal: AbortSignal): Promise<KvListing> {
    const end = prefixEnd(prefix);
    const entries: KvEntry[] = [];
    const skipped: KvSkipped[] = [];
    let from = enc(prefix);
    let revision: string | undefined;
    let limit = this.pageSize;
    for (;;) {
      signal.throwIfAborted();
      let res;
      try {
        res = await this.client.kv.range({
          key: from,
          range_end: end,
          limit,
          ...(revision ? { revision } : {}),
        });
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
        const head = await this.client.kv.range({
          key: from,
          range_end: end,
          limit: 1,
          keys_only: true,
          ...(revision ? { revision } : {}),
        });
        const kv = head.kvs[0];
        if (!kv) throw err;
        revision ??= head.header.revision;
        skipped.push({
          key: kv.key.toString('utf8'),
          modRevision: kv.mod_revision,
          reason: `value of ${shown(kv.key)} is larger than the ${this.maxReceiveBytes} bytes an etcd reply may hold; skipped`,
        });
        from = after(kv.key);
        limit = this.pageSize;
        continue;
      }
      // the first page fixes the snapshot; later replies carry the current revision in their header
      revision ??= res.header.revision;
      for (const kv of res.kvs) entries.push(toEntry(kv));
      const last = res.kvs.at(-1);
      if (!res.more || !last) break;
      from = after(last.key);
      limit = Math.min(this.pageSize, limit * 2);
    }
    return { entries, skipped, revision: BigInt(revision) };
  }

  private async grant(ttlSeconds: number): Promise<{ id: string; expiresAt: number }> {
    const res = await this.client.leaseClient.leaseGrant({ TTL: ttlSeconds, ID: 0 });
    return { id: String(res.ID), expiresAt: Date.now() + Number(res.TTL) * 1000 };
  }

  private async revoke(id: string): Promise<void> {
    await this.client.leaseClient.leaseRevoke({ ID: id }).catch(() => undefined);
  }

  /**
   * Puts `key` if it is absent (no modRevision) or at `modRevision`, bound to
   * a new TTL lease (revoked when the compare fails). On success the old
   * record's etcd lease, which now holds nothing of ours, is revoked too.
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
      const compare =
        o.modRevision === undefined
          ? { target: 'Create' as const, create_revision: 0 }
          : { target: 'Mod' as const, mod_revision: o.modRevision };
      const res = await this.client.kv.txn({
        compare: [{ key: enc(o.key), result: 'Equal', ...compare }],
        success: [
          {
            request_put: { key: enc(o.key), value: enc(o.value), lease: granted.id, prev_kv: true },
          },
        ],
      });
      if (!res.succeeded) {
        await this.revoke(granted.id);
        return undefined;
      }
      // prev_kv is exactly the version the compare matched, read atomically with the put.
      const oldLease = res.responses[0]?.response_put.prev_kv?.lease;
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
      const res = await this.client.kv.txn({
        compare: [{ key: enc(key), result: 'Equal', target: 'Mod', mod_revision: expected }],
        success: [{ request_delete_range: { key: enc(key) } }],
      });
      return res.succeeded;
    });
  }

  async watch(prefix: string, opts: KvWatchOptions): Promise<WatchEnd> {
    const session = new WatchSession(opts);
    let watcher: Watcher | undefined;
    try {
      // watcher() returns at once, so no event (a compaction error on the
      // very first attach included) can fire before our listeners exist.
      watcher = this.client
        .watch()
        .prefix(prefix)
        .startRevision(String(opts.fromRevision))
        .watcher();
      session.attach(watcher);
    } catch (err) {
      session.finish({
        reason: 'failed',
        detail: `etcd watch ${prefix}: ${describeEtcdError(err)}`,
      });
    }
    const end = await session.ended;
    // A watch etcd cancelled itself (compaction) never answers a cancel: only
    // cancel live ones, and never wait long for it. The session ignores any
    // event that still arrives, so a stale watcher cannot replay old changes.
    if (watcher && end.reason !== 'compacted') {
      await Promise.race([
        watcher.cancel().catch(() => undefined),
        new Promise((r) => setTimeout(r, 1000).unref()),
      ]);
    }
    watcher?.removeAllListeners();
    return end;
  }

  async close(): Promise<void> {
    this.client.close();
  }
}

/** Tracks one etcd watch stream: revisions seen, reconnects, and how it ended. */
class WatchSession {
  readonly ended: Promise<WatchEnd>;
  private resolve!: (end: WatchEnd) => void;
  private highest: bigint;
  private clusterId: string | undefined;
  private readonly opts: KvWatchOptions;
  private done = false;
  private disconnected = false;

  constructor(opts: KvWatchOptions) {
    this.opts = opts;
    this.highest = opts.fromRevision - 1n;
    this.ended = new Promise((r) => (this.resolve = r));
    if (opts.signal.aborted) this.finish({ reason: 'aborted' });
    opts.signal.addEventListener('abort', () => this.finish({ reason: 'aborted' }), { once: true });
  }

  finish(end: WatchEnd): void {
    this.done = true;
    this.resolve(end);
  }

  attach(w: Watcher): void {
    w.on('connected', (res: { header: IResponseHeader }) => {
      if (this.done) return;
      this.onHeader(res.header);
      this.opts.onConnectivity(true, 'etcd watch connected');
      // After a broken stream anything may have happened (a wipe whose new
      // revision already caught up, missed events): re-list rather than trust
      // the resumed stream.
      if (this.disconnected)
        this.finish({ reason: 'reconnected', detail: 'etcd watch reconnected' });
    });
    w.on('disconnected', (err: Error) => {
      if (this.done) return;
      this.disconnected = true;
      this.opts.onConnectivity(false, `etcd watch disconnected: ${describeEtcdError(err)}`);
    });
    // etcd3 emits 'error' only when etcd cancelled the watch: in practice a
    // start revision that was compacted away (the reason is often empty).
    w.on('error', (err: Error) =>
      this.finish({
        reason: 'compacted',
        detail: `etcd watch: ${err.message || 'cancelled by etcd'}`,
      }),
    );
    w.on('data', (res: { header: IResponseHeader; events: { type: string; kv: IKeyValue }[] }) => {
      if (this.done) return;
      this.onHeader(res.header);
      const changes: KvChange[] = res.events.map((ev) =>
        ev.type === 'Delete'
          ? { type: 'delete', key: ev.kv.key.toString('utf8') }
          : { type: 'put', entry: toEntry(ev.kv) },
      );
      if (changes.length > 0 && !this.done) this.opts.onChanges(changes);
    });
  }

  /** Every response header: a revision below one already seen means etcd lost its data. */
  private onHeader(header: IResponseHeader): void {
    const revision = BigInt(header.revision);
    const clusterChanged = this.clusterId !== undefined && header.cluster_id !== this.clusterId;
    if (revision < this.highest || clusterChanged) {
      this.finish({
        reason: 'wiped',
        detail: `etcd revision went back from ${this.highest} to ${revision}${clusterChanged ? ' (new cluster id)' : ''}`,
      });
      return;
    }
    this.clusterId = header.cluster_id;
    if (revision > this.highest) this.highest = revision;
  }
}
