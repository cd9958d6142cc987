// gRPC over twill's own HTTP/2 client (h2.ts, with hpack.ts; not node:http2, which loads OpenSSL
// even for http:// endpoints), as much as etcd's client API needs: unary calls and one
// bidirectional stream (the watch), to the endpoints in turn. It speaks etcd's real gRPC API, as
// etcdctl and flannel do (not the JSON gateway, which behaves differently with client-certificate
// identities).
// - Framing: each message is a 5-byte prefix (flag 0 = not compressed, 4-byte big-endian length)
//   and the protobuf; the status comes in the grpc-status / grpc-message trailers (or headers of a
//   trailers-only reply). A reply whose prefix announces more than maxReceiveBytes fails at once
//   as RESOURCE_EXHAUSTED without buffering it.
// - Endpoints: one HTTP/2 connection (session) at a time, kept while it works. A call that fails
//   as UNAVAILABLE (no connection, TLS handshake refused, session gone, an HTTP/2 protocol error,
//   GOAWAY) drops the session and is tried on the next endpoint at once, each endpoint once per
//   call.
// - Deadlines: each attempt has callTimeoutMs (sent as grpc-timeout too); one that expires before
//   the session connected (the server's HTTP/2 SETTINGS arrived) drops it, so the next call tries
//   the next endpoint.
// - Keepalive: while a session carries a call or stream, an HTTP/2 ping every 10 s; one unanswered
//   for 5 s destroys the session, so a partitioned etcd is noticed (as grpc-js's keepalive did).
//   No ping on an idle session: etcd's server counts those as abuse and sends GOAWAY.
// - Auth: with a username, a token from Auth/Authenticate rides on each call as the `token`
//   header; a call refused for an invalid or expired token re-authenticates once.
import { truncated } from './admit.ts';
import { decodeAuthenticateResponse, encodeAuthenticateRequest } from './etcd-proto.ts';
import { ErrorCode, H2StreamError } from './h2-errors.ts';
import type { H2Stream } from './h2-stream.ts';
import { H2Connection } from './h2.ts';
import type { HeaderField } from './hpack.ts';

/** gRPC status codes used here (https://grpc.github.io/grpc/core/md_doc_statuscodes.html) */
export const Status = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  OUT_OF_RANGE: 11,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

const STATUS_NAMES = [
  'OK',
  'CANCELLED',
  'UNKNOWN',
  'INVALID_ARGUMENT',
  'DEADLINE_EXCEEDED',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'PERMISSION_DENIED',
  'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION',
  'ABORTED',
  'OUT_OF_RANGE',
  'UNIMPLEMENTED',
  'INTERNAL',
  'UNAVAILABLE',
  'DATA_LOSS',
  'UNAUTHENTICATED',
];

/** A failed call: the gRPC status code and etcd's (or our) text, as "14 UNAVAILABLE: …". */
export class GrpcError extends Error {
  readonly code: number;
  readonly details: string;

  constructor(code: number, details: string, options?: { cause?: unknown }) {
    super(`${code} ${STATUS_NAMES[code] ?? 'UNKNOWN'}: ${details}`, options);
    this.name = 'GrpcError';
    this.code = code;
    this.details = details;
  }
}

export interface GrpcOptions {
  /** http://host:port or https://host:port */
  readonly endpoints: readonly string[];
  /** TLS for every endpoint, when given (an empty object: Node's system roots, no client cert) */
  readonly tls?: { ca?: Buffer | undefined; cert?: Buffer | undefined; key?: Buffer | undefined };
  readonly auth?: { username: string; password: string } | undefined;
  readonly callTimeoutMs: number;
  readonly maxReceiveBytes: number;
  readonly keepaliveMs?: number;
  readonly keepaliveTimeoutMs?: number;
}

/** Length-prefixed messages from a byte stream: each whole message to `onMessage`. */
export class FrameReader {
  private header = Buffer.alloc(0);
  private chunks: Buffer[] = [];
  private have = 0;
  private want = -1;
  private readonly max: number;
  private readonly onMessage: (msg: Buffer) => void;

  constructor(max: number, onMessage: (msg: Buffer) => void) {
    this.max = max;
    this.onMessage = onMessage;
  }

  /** Throws GrpcError for a message over the limit (read from its prefix) or a compressed one. */
  push(data: Buffer): void {
    let rest = data;
    while (rest.length > 0) {
      if (this.want < 0) {
        const need = 5 - this.header.length;
        this.header = Buffer.concat([this.header, rest.subarray(0, need)]);
        rest = rest.subarray(need);
        if (this.header.length < 5) return;
        if (this.header[0] !== 0)
          throw new GrpcError(Status.INTERNAL, 'etcd sent a compressed message, never asked for');
        const len = this.header.readUInt32BE(1);
        if (len > this.max)
          throw new GrpcError(
            Status.RESOURCE_EXHAUSTED,
            `Received message larger than max (${len} vs. ${this.max})`,
          );
        this.want = len;
      }
      const take = rest.subarray(0, this.want - this.have);
      rest = rest.subarray(take.length);
      if (take.length > 0) this.chunks.push(take);
      this.have += take.length;
      if (this.have === this.want) {
        const msg =
          this.chunks.length === 1 ? (this.chunks[0] as Buffer) : Buffer.concat(this.chunks);
        this.header = Buffer.alloc(0);
        this.chunks = [];
        this.have = 0;
        this.want = -1;
        this.onMessage(msg);
      }
    }
  }

  /** bytes of a message begun but not finished */
  get partial(): boolean {
    return this.want >= 0 || this.header.length > 0;
  }
}

/** One message with its 5-byte prefix. */
export function frame(msg: Buffer): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(msg.length, 1);
  return Buffer.concat([prefix, msg]);
}

/** The server's grpc-message, decoded and cut short: it ends up in errors and log lines. */
function grpcMessage(raw: unknown): string {
  if (typeof raw !== 'string') return '';
  let text = raw;
  try {
    text = decodeURIComponent(raw);
  } catch {
    // not percent-encoded as the spec asks: shown as sent
  }
  return truncated(text, 200);
}

/** The status a reply's trailers (or a trailers-only reply's headers) carry, if any. */
function statusOf(h: ReadonlyMap<string, string>): GrpcError | 'ok' | undefined {
  const raw = h.get('grpc-status');
  if (raw === undefined) return undefined;
  const code = raw === '' ? NaN : Number(raw);
  if (!Number.isInteger(code) || code < 0 || code > 16)
    return new GrpcError(Status.UNKNOWN, `etcd sent grpc-status ${JSON.stringify(raw)}`);
  return code === 0 ? 'ok' : new GrpcError(code, grpcMessage(h.get('grpc-message')));
}

/** An HTTP status that is not gRPC's 200, as grpc-js maps it. */
function httpStatusError(status: number): GrpcError {
  const code =
    status === 400
      ? Status.INTERNAL
      : status === 401
        ? Status.UNAUTHENTICATED
        : status === 429 || status === 502 || status === 503 || status === 504
          ? Status.UNAVAILABLE
          : Status.UNKNOWN;
  return new GrpcError(code, `etcd answered HTTP ${status}, not gRPC`);
}

/** An RST_STREAM from the server as a status (grpc-js's mapping, less ENHANCE_YOUR_CALM). */
function resetError(rstCode: number): GrpcError {
  if (rstCode === ErrorCode.REFUSED_STREAM)
    return new GrpcError(Status.UNAVAILABLE, 'etcd refused the stream');
  if (rstCode === ErrorCode.CANCEL)
    return new GrpcError(Status.CANCELLED, 'etcd cancelled the call');
  return new GrpcError(
    rstCode === ErrorCode.ENHANCE_YOUR_CALM ? Status.UNAVAILABLE : Status.INTERNAL,
    `etcd reset the stream (HTTP/2 error ${rstCode})`,
  );
}

class Session {
  readonly conn: H2Connection;
  readonly endpoint: string;
  /** the :scheme and :authority of its requests */
  readonly scheme: string;
  readonly authority: string;
  /** why the session failed, when it did: the error every call on it reports */
  failure: Error | undefined;
  private calls = 0;
  private readonly keepalive: NodeJS.Timeout;

  constructor(endpoint: string, opts: GrpcOptions, onGone: (s: Session) => void) {
    this.endpoint = endpoint;
    const url = new URL(endpoint);
    const secure = opts.tls !== undefined;
    this.scheme = secure ? 'https' : 'http';
    this.authority = url.host;
    this.conn = new H2Connection({
      host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: Number(url.port) || (secure ? 443 : 80),
      ...(secure ? { tls: opts.tls } : {}),
      onGoaway: (code) => {
        this.failure ??= new Error(`etcd closed the connection (GOAWAY ${code})`);
        onGone(this);
      },
      onClose: (err) => {
        this.failure ??= err;
        clearInterval(this.keepalive);
        onGone(this);
      },
    });
    const every = opts.keepaliveMs ?? 10_000;
    const timeout = opts.keepaliveTimeoutMs ?? 5_000;
    this.keepalive = setInterval(() => {
      if (!this.conn.connected || this.calls === 0 || this.failure) return;
      const timer = setTimeout(
        () => this.destroy(new Error(`keepalive ping unanswered for ${timeout} ms`)),
        timeout,
      );
      this.conn.ping((err) => {
        clearTimeout(timer);
        if (err) this.destroy(err);
      });
    }, every);
    this.keepalive.unref();
    this.conn.unref();
  }

  get connected(): boolean {
    return this.conn.connected;
  }

  /** While calls are open on the session, it keeps the process alive (and is pinged). */
  callStarted(): void {
    if (this.calls++ === 0) this.conn.ref();
  }

  callEnded(): void {
    if (--this.calls === 0) this.conn.unref();
  }

  destroy(err: Error): void {
    this.failure ??= err;
    clearInterval(this.keepalive);
    this.conn.destroy(err);
  }

  /** a session a new call may use */
  get usable(): boolean {
    return this.conn.usable && this.failure === undefined;
  }
}

/** Callbacks of one open call: messages as they come, then its end exactly once. */
interface CallHandlers {
  readonly onMessage: (msg: Buffer) => void;
  /** undefined on OK */
  readonly onEnd: (err: GrpcError | undefined) => void;
}

/** The write side of an open call. */
export interface CallHandle {
  write(msg: Buffer): void;
  /** half-closes: no more messages from us */
  end(): void;
  /** ends the call from our side (RST_STREAM CANCEL); no onEnd follows */
  cancel(): void;
}

export class EtcdGrpc {
  private readonly opts: GrpcOptions;
  private index = 0;
  private session: Session | undefined;
  private readonly tokens = new Map<string, string>();
  private closed = false;

  constructor(opts: GrpcOptions) {
    if (opts.endpoints.length === 0) throw new Error('etcd: no endpoints');
    this.opts = opts;
  }

  get endpoint(): string {
    return this.opts.endpoints[this.index] as string;
  }

  private sessionFor(): Session {
    if (this.closed) throw new GrpcError(Status.CANCELLED, 'etcd client closed');
    if (this.session?.usable) return this.session;
    // an unusable session is destroyed already, or (after GOAWAY) closes once its calls finish
    const s = new Session(this.endpoint, this.opts, (gone) => {
      if (this.session === gone) this.session = undefined;
    });
    this.session = s;
    return s;
  }

  /**
   * A call on `session` failed as UNAVAILABLE: drop that session (not a newer one), and later calls
   * start on the next endpoint (once, however many calls failed on it).
   */
  private moveOn(session: Session): void {
    if (this.session === session) this.session = undefined;
    session.destroy(new Error('dropped after a failure'));
    if (this.endpoint === session.endpoint)
      this.index = (this.index + 1) % this.opts.endpoints.length;
  }

  /**
   * Opens one call on the current session. `deadlineMs` (unary calls) bounds it whole. The error
   * of a session that failed (refused connection, TLS handshake) is reported as UNAVAILABLE with
   * that session's text.
   */
  private open(
    path: string,
    token: string | undefined,
    deadlineMs: number | undefined,
    h: CallHandlers,
  ): CallHandle {
    const session = this.sessionFor();
    const given = h;
    h = {
      onMessage: given.onMessage,
      onEnd: (err) => {
        if (err?.code === Status.UNAVAILABLE) this.moveOn(session);
        given.onEnd(err);
      },
    };
    const fields: HeaderField[] = [
      [':method', 'POST'],
      [':scheme', session.scheme],
      [':path', path],
      [':authority', session.authority],
      ['content-type', 'application/grpc'],
      ['te', 'trailers'],
      ['user-agent', 'twill'],
    ];
    if (deadlineMs !== undefined) fields.push(['grpc-timeout', `${deadlineMs}m`]);
    if (token !== undefined) fields.push(['token', token]);
    let stream: H2Stream | undefined;
    let ended = false;
    let replied = false;
    let status: GrpcError | 'ok' | undefined;
    let timer: NodeJS.Timeout | undefined;
    const end = (err: GrpcError | undefined): void => {
      if (ended) return;
      ended = true;
      session.callEnded();
      if (timer) clearTimeout(timer);
      stream?.cancel();
      h.onEnd(err);
    };
    const sessionError = (fallback: string): GrpcError => {
      const cause = session.failure;
      return new GrpcError(Status.UNAVAILABLE, cause ? describeCause(cause) : fallback, { cause });
    };
    const reader = new FrameReader(this.opts.maxReceiveBytes, (msg) => {
      if (!ended) h.onMessage(msg);
    });
    session.callStarted();
    try {
      stream = session.conn.request(fields, {
        onHeaders: (list, endStream) => {
          const headers = new Map(list);
          if (!replied) {
            replied = true;
            const code = Number(headers.get(':status'));
            if (code !== 200) return end(httpStatusError(code));
            const ctype = headers.get('content-type') ?? '';
            if (!ctype.startsWith('application/grpc'))
              return end(
                new GrpcError(Status.UNKNOWN, `etcd answered ${ctype || 'no content-type'}`),
              );
            // a trailers-only reply has its status here
            status = statusOf(headers);
          } else if (endStream) {
            status = statusOf(headers) ?? status;
          }
        },
        onData: (chunk) => {
          if (ended) return;
          try {
            reader.push(chunk);
          } catch (err) {
            end(err instanceof GrpcError ? err : new GrpcError(Status.INTERNAL, String(err)));
          }
        },
        onEnd: (err) => {
          if (ended) return;
          if (status === 'ok')
            return end(
              reader.partial ? new GrpcError(Status.INTERNAL, 'truncated message') : undefined,
            );
          if (status) return end(status);
          if (err instanceof H2StreamError && !err.remote)
            return end(new GrpcError(Status.INTERNAL, `etcd sent a broken reply: ${err.message}`));
          if (session.failure || !session.connected)
            return end(sessionError(err ? describeCause(err) : 'connection closed'));
          if (err instanceof H2StreamError && err.code !== ErrorCode.NO_ERROR)
            return end(resetError(err.code));
          end(new GrpcError(Status.UNAVAILABLE, 'etcd ended the call without a status'));
        },
      });
    } catch (err) {
      session.destroy(err as Error);
      const e = sessionError(describeCause(err as Error));
      ended = true;
      session.callEnded();
      queueMicrotask(() => h.onEnd(e));
      return { write: () => undefined, end: () => undefined, cancel: () => undefined };
    }
    if (deadlineMs !== undefined) {
      timer = setTimeout(() => {
        const connected = session.connected;
        end(new GrpcError(Status.DEADLINE_EXCEEDED, `Deadline exceeded after ${deadlineMs} ms`));
        if (!connected) {
          // never connected (a partitioned or black-holed endpoint): the next call tries the next
          session.destroy(new Error(`no connection to ${session.endpoint} in ${deadlineMs} ms`));
          this.moveOn(session);
        }
      }, deadlineMs);
      timer.unref();
    }
    const s = stream;
    return {
      write: (msg) => {
        if (!ended) s.write(frame(msg));
      },
      end: () => {
        if (!ended) s.end();
      },
      cancel: () => {
        if (ended) return;
        ended = true;
        session.callEnded();
        if (timer) clearTimeout(timer);
        s.cancel();
      },
    };
  }

  /** One unary attempt on the current endpoint. */
  private unaryOnce(path: string, body: Buffer, token: string | undefined): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      let reply: Buffer | undefined;
      const call = this.open(path, token, this.opts.callTimeoutMs, {
        onMessage: (msg) => (reply ??= msg),
        onEnd: (err) => {
          if (err) reject(err);
          else if (reply === undefined)
            reject(new GrpcError(Status.INTERNAL, 'etcd ended the call without a reply'));
          else resolve(reply);
        },
      });
      call.write(body);
      call.end();
    });
  }

  /** The auth token for the current endpoint (etcd's simple tokens belong to one member). */
  private async token(fresh: boolean): Promise<string | undefined> {
    const auth = this.opts.auth;
    if (!auth) return undefined;
    const endpoint = this.endpoint;
    const known = this.tokens.get(endpoint);
    if (known !== undefined && !fresh) return known;
    const reply = await this.unaryOnce(
      '/etcdserverpb.Auth/Authenticate',
      encodeAuthenticateRequest({ name: auth.username, password: auth.password }),
      undefined,
    );
    const { token } = decodeAuthenticateResponse(reply);
    this.tokens.set(endpoint, token);
    return token;
  }

  /**
   * A unary call: tried on each endpoint in turn while it fails as UNAVAILABLE, from the current
   * one, each once; re-authenticated once when etcd refuses the token.
   */
  async unary(path: string, body: Buffer): Promise<Buffer> {
    let last: unknown;
    for (let tried = 0; tried < this.opts.endpoints.length; tried++) {
      try {
        try {
          return await this.unaryOnce(path, body, await this.token(false));
        } catch (err) {
          if (!this.opts.auth || !tokenRefused(err)) throw err;
          return await this.unaryOnce(path, body, await this.token(true));
        }
      } catch (err) {
        // open() has dropped the session and moved on to the next endpoint
        if (!(err instanceof GrpcError) || err.code !== Status.UNAVAILABLE) throw err;
        last = err;
      }
    }
    throw last;
  }

  /**
   * Opens a bidirectional stream (no deadline) on the current endpoint, authenticated first when
   * there is a username. Its failure as UNAVAILABLE or for a refused token makes the next one
   * start on the next endpoint or with a fresh token.
   */
  async stream(path: string, h: CallHandlers): Promise<CallHandle> {
    const endpoint = this.endpoint;
    const token = await this.token(false);
    return this.open(path, token, undefined, {
      onMessage: (msg) => h.onMessage(msg),
      onEnd: (err) => {
        if (err && tokenRefused(err)) this.tokens.delete(endpoint);
        h.onEnd(err);
      },
    });
  }

  close(): void {
    this.closed = true;
    this.session?.destroy(new Error('etcd client closed'));
    this.session = undefined;
  }
}

/** etcd refused the token: expired, or issued before an auth change (re-authenticating helps). */
function tokenRefused(err: unknown): boolean {
  return (
    err instanceof GrpcError &&
    (err.code === Status.UNAUTHENTICATED || err.code === Status.INVALID_ARGUMENT) &&
    /invalid auth token|auth store is old|user name is empty/.test(err.details)
  );
}

/** A connection failure's text: Node's message, with its code when the message lacks it. */
function describeCause(err: Error): string {
  const code = (err as NodeJS.ErrnoException).code;
  return code && !err.message.includes(code) ? `${err.message} (${code})` : err.message;
}
