// A small HTTP/2 client (RFC 9113) over node:net, or node:tls for https:// endpoints, for the
// etcd client's gRPC calls. It replaces node:http2, which loads node:tls (OpenSSL) even for plain
// http:// endpoints and costs several MiB of RSS more than this file and hpack.ts.
// - One connection, many streams: the client preface and our SETTINGS first; the server's
//   SETTINGS acknowledged and applied; PING answered, and sent on request (keepalive) with the
//   answer matched to it; GOAWAY stops new streams and fails those above its last stream id;
//   RST_STREAM both ways.
// - Flow control both ways: DATA is sent only within the server's connection and stream windows
//   (and in frames no larger than its SETTINGS_MAX_FRAME_SIZE), and our windows are replenished
//   with WINDOW_UPDATE as each DATA frame is handed on, so long replies flow at full speed. DATA
//   also waits while the socket has 64 KiB unsent.
// - Bounds against a hostile or broken server: a frame over our maximum frame size, a header block
//   (HEADERS and its CONTINUATIONs) or decoded header list over the limit, more DATA than our
//   windows allow, frames on streams we never opened, and any other protocol error end the
//   connection with GOAWAY, failing every open stream with the reason; nothing thrown while
//   handling the server's bytes escapes the socket's event handlers. A server that does not read
//   what we write is cut off once a megabyte waits in the socket.
// - node:tls is loaded only when a TLS connection is dialed, with process.getBuiltinModule, so
//   neither Node nor the bundle (scripts/build-daemon.ts) loads it for plain http:// endpoints.
import * as net from 'node:net';
import { encodeHeaders, HpackDecoder, HpackError, type HeaderField } from './hpack.ts';

export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

export const Flag = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

export const Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

/** RFC 9113 section 7: error codes of RST_STREAM and GOAWAY. */
export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  CONNECT_ERROR: 0xa,
  ENHANCE_YOUR_CALM: 0xb,
  INADEQUATE_SECURITY: 0xc,
  HTTP_1_1_REQUIRED: 0xd,
} as const;

const ERROR_NAMES = Object.fromEntries(Object.entries(ErrorCode).map(([k, v]) => [v, k]));

/** An error code by name, for messages: "PROTOCOL_ERROR", or the number when unknown. */
export function errorName(code: number): string {
  return ERROR_NAMES[code] ?? `error ${code}`;
}

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const FRAME_HEADER = 9;
/** RFC 9113 6.5.2: the initial window (both levels) and frame size until SETTINGS say otherwise */
const DEFAULT_WINDOW = 65_535;
const DEFAULT_MAX_FRAME = 16_384;
const MAX_WINDOW = 2 ** 31 - 1;
const MAX_STREAM_ID = 2 ** 31 - 1;
/** the largest frame we accept: the protocol's default, which we advertise too */
const OUR_MAX_FRAME = DEFAULT_MAX_FRAME;
/** our HPACK table: the protocol's default */
const OUR_TABLE_SIZE = 4_096;
/** most CONTINUATION frames in one header block: more is a flood, whatever their size */
const MAX_CONTINUATIONS = 64;
/** bytes waiting in the socket past which the server is taken not to read what we send */
const MAX_UNSENT = 1024 * 1024;
/**
 * DATA waits (for the socket's 'drain') while this much is unsent, so only frames we owe the
 * server (SETTINGS and PING acknowledgements, RST_STREAM, WINDOW_UPDATE) can approach MAX_UNSENT
 */
const DATA_HIGH_WATER = 64 * 1024;

/** One frame: its 9-byte header and payload. */
export function encodeFrame(
  type: number,
  flags: number,
  streamId: number,
  payload: Buffer,
): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_HEADER + payload.length);
  frame.writeUIntBE(payload.length, 0, 3);
  frame[3] = type;
  frame[4] = flags;
  frame.writeUInt32BE(streamId, 5);
  payload.copy(frame, FRAME_HEADER);
  return frame;
}

/** A frame's header: payload length, type, flags and stream id (the reserved bit dropped). */
export function decodeFrameHeader(buf: Buffer, at = 0) {
  return {
    length: buf.readUIntBE(at, 3),
    type: buf[at + 3] as number,
    flags: buf[at + 4] as number,
    streamId: buf.readUInt32BE(at + 5) & 0x7fffffff,
  };
}

/** A SETTINGS payload: each setting as 16-bit id and 32-bit value. */
export function encodeSettings(settings: readonly (readonly [number, number])[]): Buffer {
  const payload = Buffer.alloc(settings.length * 6);
  settings.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, i * 6);
    payload.writeUInt32BE(value, i * 6 + 2);
  });
  return payload;
}

const u32 = (n: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};

/** The connection broke the protocol, by us or by the server; `code` is what GOAWAY carried. */
export class H2ConnectionError extends Error {
  readonly code: number;

  constructor(code: number, message: string) {
    super(message);
    this.name = 'H2ConnectionError';
    this.code = code;
  }
}

/** A stream ended by RST_STREAM: from the server (`remote`) or from us, for a malformed reply. */
export class H2StreamError extends Error {
  readonly code: number;
  readonly remote: boolean;

  constructor(code: number, message: string, remote: boolean) {
    super(message);
    this.name = 'H2StreamError';
    this.code = code;
    this.remote = remote;
  }
}

/** What a stream reports, in order: headers (the reply's, then trailers), data, then its end. */
export interface StreamEvents {
  /** the final reply headers (1xx ones are skipped), then the trailers (endStream true) */
  onHeaders(fields: HeaderField[], endStream: boolean): void;
  onData(chunk: Buffer): void;
  /**
   * Once, unless the stream was cancelled: undefined once the server ended its side (its
   * END_STREAM), else why not (H2StreamError, or the connection's failure).
   */
  onEnd(err: Error | undefined): void;
}

export interface H2Options {
  /** a host name or IP address (no brackets) */
  readonly host: string;
  readonly port: number;
  /** TLS, with ALPN h2, when given (an empty object: Node's system roots, no client cert) */
  readonly tls?: { ca?: Buffer | undefined; cert?: Buffer | undefined; key?: Buffer | undefined };
  /** the server sent GOAWAY: no new streams (the first one only) */
  readonly onGoaway?: (code: number, lastStreamId: number, debug: string) => void;
  /** the connection is gone (before its streams are told), once */
  readonly onClose?: (err: Error) => void;
  /** our stream window (SETTINGS_INITIAL_WINDOW_SIZE), default 1 MiB */
  readonly streamWindow?: number;
  /** our connection window, default 4 MiB */
  readonly connectionWindow?: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE we advertise and enforce, default 64 KiB */
  readonly maxHeaderListSize?: number;
}

/** One request's stream: what the caller writes on it. */
export class H2Stream {
  /** 0 until its HEADERS are sent (it may wait for MAX_CONCURRENT_STREAMS) */
  id = 0;
  readonly fields: readonly HeaderField[];
  readonly events: StreamEvents;
  sendWindow = 0;
  recvWindow = 0;
  recvUnacked = 0;
  /** data written and not yet sent (flow control) */
  queue: Buffer[] = [];
  endQueued = false;
  localEnded = false;
  gotHeaders = false;
  done = false;
  private readonly conn: H2Connection;

  constructor(conn: H2Connection, fields: readonly HeaderField[], events: StreamEvents) {
    this.conn = conn;
    this.fields = fields;
    this.events = events;
  }

  /** Sends `data` as the flow-control windows allow. */
  write(data: Buffer): void {
    if (this.done || this.endQueued || data.length === 0) return;
    this.queue.push(data);
    this.conn.flush(this);
  }

  /** Half-closes: END_STREAM after the data written. */
  end(): void {
    if (this.done || this.endQueued) return;
    this.endQueued = true;
    this.conn.flush(this);
  }

  /** Ends the stream from our side (RST_STREAM CANCEL); no onEnd follows. */
  cancel(): void {
    this.conn.cancel(this);
  }
}

interface PendingBlock {
  readonly streamId: number;
  readonly endStream: boolean;
  readonly chunks: Buffer[];
  size: number;
  frames: number;
}

export class H2Connection {
  /** the server's first SETTINGS arrived: it speaks HTTP/2 */
  connected = false;
  /** why the connection ended, once it has */
  failure: Error | undefined;
  /** the server's GOAWAY, once sent */
  goaway: { code: number; lastStreamId: number } | undefined;
  private readonly opts: H2Options;
  private readonly socket: net.Socket;
  private readonly decoder: HpackDecoder;
  private readonly streamWindow: number;
  private readonly connectionWindow: number;
  private readonly maxHeaderBlock: number;
  private readonly streams = new Map<number, H2Stream>();
  /** streams waiting for the server's MAX_CONCURRENT_STREAMS to allow them */
  private readonly waiting: H2Stream[] = [];
  private nextId = 1;
  private closed = false;
  private input: Buffer = Buffer.alloc(0);
  private block: PendingBlock | undefined;
  private peerMaxFrame = DEFAULT_MAX_FRAME;
  private peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxStreams = Infinity;
  private sendWindow = DEFAULT_WINDOW;
  private recvWindow: number;
  private recvUnacked = 0;
  private pingSeq = 0;
  private readonly pings = new Map<string, (err?: Error) => void>();

  constructor(opts: H2Options) {
    this.opts = opts;
    this.streamWindow = opts.streamWindow ?? 1024 * 1024;
    this.connectionWindow = Math.max(DEFAULT_WINDOW, opts.connectionWindow ?? 4 * 1024 * 1024);
    const maxList = opts.maxHeaderListSize ?? 64 * 1024;
    this.decoder = new HpackDecoder(OUR_TABLE_SIZE, maxList);
    // Huffman can make a legitimate block longer than the list it decodes to, a little
    this.maxHeaderBlock = 2 * maxList;
    this.recvWindow = this.connectionWindow;
    if (opts.tls) {
      const tls = process.getBuiltinModule('node:tls');
      const sock = tls.connect({
        host: opts.host,
        port: opts.port,
        ALPNProtocols: ['h2'],
        // SNI takes host names only
        ...(net.isIP(opts.host) ? {} : { servername: opts.host }),
        ...(opts.tls.ca ? { ca: opts.tls.ca } : {}),
        ...(opts.tls.cert ? { cert: opts.tls.cert } : {}),
        ...(opts.tls.key ? { key: opts.tls.key } : {}),
      });
      sock.once('secureConnect', () => {
        if (sock.alpnProtocol !== 'h2')
          this.fail(
            new Error(
              `the server did not agree to HTTP/2 in the TLS handshake (ALPN ${JSON.stringify(sock.alpnProtocol)})`,
            ),
          );
      });
      this.socket = sock;
    } else {
      this.socket = net.connect({ host: opts.host, port: opts.port });
    }
    this.socket.setNoDelay(true);
    this.socket.on('data', (chunk: Buffer) => this.receive(chunk));
    this.socket.on('error', (err) => this.fail(err));
    this.socket.on('drain', () => this.flushAll());
    this.socket.on('close', () => this.fail(new Error('connection closed')));
    this.socket.write(PREFACE);
    this.send(
      FrameType.SETTINGS,
      0,
      0,
      encodeSettings([
        [Setting.HEADER_TABLE_SIZE, OUR_TABLE_SIZE],
        [Setting.ENABLE_PUSH, 0],
        [Setting.INITIAL_WINDOW_SIZE, this.streamWindow],
        [Setting.MAX_FRAME_SIZE, OUR_MAX_FRAME],
        [Setting.MAX_HEADER_LIST_SIZE, maxList],
      ]),
    );
    if (this.connectionWindow > DEFAULT_WINDOW)
      this.send(FrameType.WINDOW_UPDATE, 0, 0, u32(this.connectionWindow - DEFAULT_WINDOW));
  }

  /** new streams may be opened */
  get usable(): boolean {
    return !this.closed && this.goaway === undefined && this.nextId <= MAX_STREAM_ID;
  }

  /** streams open or waiting to open */
  get activeStreams(): number {
    return this.streams.size + this.waiting.length;
  }

  ref(): void {
    this.socket.ref();
  }

  unref(): void {
    this.socket.unref();
  }

  /**
   * A request: `fields` are its headers (pseudo-headers first, names in lower case). Throws when
   * the connection takes no new streams.
   */
  request(fields: readonly HeaderField[], events: StreamEvents): H2Stream {
    if (!this.usable) throw this.failure ?? new Error('the connection takes no new streams');
    const s = new H2Stream(this, fields, events);
    if (this.streams.size >= this.peerMaxStreams) this.waiting.push(s);
    else this.open(s);
    return s;
  }

  /** Sends a PING; `done` is called once with its ACK, or with the connection's failure. */
  ping(done: (err?: Error) => void): void {
    if (this.closed) {
      const err = this.failure;
      queueMicrotask(() => done(err));
      return;
    }
    const payload = Buffer.alloc(8);
    payload.writeUInt32BE(++this.pingSeq, 4);
    this.pings.set(payload.toString('hex'), done);
    this.send(FrameType.PING, 0, 0, payload);
  }

  /**
   * Ends the connection: GOAWAY with `code` when it is up, then the socket; every stream fails with
   * `err`.
   */
  destroy(err: Error, code: number = ErrorCode.NO_ERROR): void {
    if (this.closed) return;
    if (this.socket.connecting || this.socket.destroyed) {
      this.fail(err);
      return;
    }
    const debug = Buffer.from(err.message.slice(0, 200), 'utf8');
    const goaway = encodeFrame(FrameType.GOAWAY, 0, 0, Buffer.concat([u32(0), u32(code), debug]));
    const sock = this.socket;
    this.fail(err, () => {
      // the GOAWAY is worth a try; a server that does not take it in a second loses it
      sock.end(goaway);
      setTimeout(() => sock.destroy(), 1_000).unref();
    });
  }

  /**
   * The connection is over: `close` ends the socket (default: at once); the streams and pings
   * learn why.
   */
  private fail(err: Error, close?: () => void): void {
    if (this.closed) return;
    this.closed = true;
    this.failure = err;
    this.input = Buffer.alloc(0);
    this.block = undefined;
    if (close) close();
    else this.socket.destroy();
    this.opts.onClose?.(err);
    for (const done of this.pings.values()) done(err);
    this.pings.clear();
    for (const s of [...this.waiting, ...this.streams.values()]) this.finish(s, err);
  }

  private open(s: H2Stream): void {
    if (this.nextId > MAX_STREAM_ID) {
      this.finish(s, new Error('stream ids used up on this connection'));
      return;
    }
    s.id = this.nextId;
    this.nextId += 2;
    s.sendWindow = this.peerInitialWindow;
    s.recvWindow = this.streamWindow;
    this.streams.set(s.id, s);
    const block = encodeHeaders(s.fields);
    let at = 0;
    do {
      const part = block.subarray(at, at + this.peerMaxFrame);
      at += part.length;
      const last = at >= block.length;
      this.send(
        at === part.length ? FrameType.HEADERS : FrameType.CONTINUATION,
        last ? Flag.END_HEADERS : 0,
        s.id,
        part,
      );
    } while (at < block.length);
    this.flush(s);
  }

  /** Sends what `s` has queued, as far as the windows allow, and its END_STREAM once all is out. */
  flush(s: H2Stream): void {
    if (s.id === 0 || s.done || s.localEnded || this.closed) return;
    while (s.queue.length > 0) {
      const allowed = Math.min(this.sendWindow, s.sendWindow, this.peerMaxFrame);
      if (allowed <= 0 || this.socket.writableLength >= DATA_HIGH_WATER) return;
      const head = s.queue[0] as Buffer;
      const n = Math.min(head.length, allowed);
      if (n === head.length) s.queue.shift();
      else s.queue[0] = head.subarray(n);
      this.sendWindow -= n;
      s.sendWindow -= n;
      const last = s.queue.length === 0 && s.endQueued;
      this.send(FrameType.DATA, last ? Flag.END_STREAM : 0, s.id, head.subarray(0, n));
      if (last) {
        s.localEnded = true;
        return;
      }
    }
    if (s.endQueued) {
      this.send(FrameType.DATA, Flag.END_STREAM, s.id, Buffer.alloc(0));
      s.localEnded = true;
    }
  }

  cancel(s: H2Stream): void {
    if (s.done) return;
    if (s.id !== 0 && !this.closed) this.send(FrameType.RST_STREAM, 0, s.id, u32(ErrorCode.CANCEL));
    this.finish(s, undefined, false);
  }

  /** The stream is over: forgotten, its end reported (unless cancelled), a waiting one let in. */
  private finish(s: H2Stream, err: Error | undefined, report = true): void {
    if (s.done) return;
    s.done = true;
    s.queue = [];
    if (s.id !== 0) this.streams.delete(s.id);
    else {
      const i = this.waiting.indexOf(s);
      if (i >= 0) this.waiting.splice(i, 1);
    }
    if (report) s.events.onEnd(err);
    if (this.closed) return;
    if (this.goaway) {
      // the server is going away: once our last stream is done, so is the connection
      if (this.streams.size === 0) this.destroy(new Error('connection closed after GOAWAY'));
      return;
    }
    while (this.waiting.length > 0 && this.streams.size < this.peerMaxStreams)
      this.open(this.waiting.shift() as H2Stream);
  }

  /** Our RST_STREAM for a reply that broke the protocol; the stream fails with `message`. */
  private reset(s: H2Stream, code: number, message: string): void {
    if (!this.closed) this.send(FrameType.RST_STREAM, 0, s.id, u32(code));
    this.finish(s, new H2StreamError(code, message, false));
  }

  private send(type: number, flags: number, streamId: number, payload: Buffer): void {
    if (this.closed) return;
    this.socket.write(encodeFrame(type, flags, streamId, payload));
    if (this.socket.writableLength > MAX_UNSENT)
      this.fail(new Error(`the server does not read: over ${MAX_UNSENT} bytes wait to be sent`));
  }

  private receive(chunk: Buffer): void {
    try {
      this.parse(chunk);
    } catch (err) {
      if (err instanceof H2ConnectionError) this.destroy(err, err.code);
      else if (err instanceof HpackError)
        this.destroy(
          new H2ConnectionError(ErrorCode.COMPRESSION_ERROR, `bad header block: ${err.message}`),
          ErrorCode.COMPRESSION_ERROR,
        );
      else this.destroy(err as Error, ErrorCode.INTERNAL_ERROR);
    }
  }

  /** Splits the bytes into frames: at most one frame (of at most our maximum size) is kept. */
  private parse(chunk: Buffer): void {
    if (this.closed) return;
    const buf = this.input.length > 0 ? Buffer.concat([this.input, chunk]) : chunk;
    let at = 0;
    while (!this.closed && buf.length - at >= FRAME_HEADER) {
      const { length, type, flags, streamId } = decodeFrameHeader(buf, at);
      if (!this.connected && type !== FrameType.SETTINGS)
        throw protocolError(
          `the server's first frame is not SETTINGS (type ${type}): it does not speak HTTP/2`,
        );
      if (length > OUR_MAX_FRAME)
        throw new H2ConnectionError(
          ErrorCode.FRAME_SIZE_ERROR,
          `frame of ${length} bytes, over our maximum of ${OUR_MAX_FRAME} (FRAME_SIZE_ERROR)`,
        );
      if (buf.length - at - FRAME_HEADER < length) break;
      const payload = buf.subarray(at + FRAME_HEADER, at + FRAME_HEADER + length);
      at += FRAME_HEADER + length;
      this.frame(type, flags, streamId, payload);
    }
    // a copy: a small remainder must not keep a large chunk alive
    if (!this.closed) this.input = Buffer.from(buf.subarray(at));
  }

  private frame(type: number, flags: number, id: number, payload: Buffer): void {
    if (this.block && type !== FrameType.CONTINUATION)
      throw protocolError(`frame type ${type} inside a header block, CONTINUATION expected`);
    switch (type) {
      case FrameType.DATA:
        return this.onData(flags, id, payload);
      case FrameType.HEADERS:
        return this.onHeaders(flags, id, payload);
      case FrameType.CONTINUATION:
        return this.onContinuation(flags, id, payload);
      case FrameType.PRIORITY:
        // advice on the server's own scheduling of our streams: nothing for a client to do
        if (id === 0) throw protocolError('PRIORITY on stream 0');
        if (payload.length !== 5) throw frameSizeError('PRIORITY', payload.length);
        return;
      case FrameType.RST_STREAM:
        return this.onReset(id, payload);
      case FrameType.SETTINGS:
        return this.onSettings(flags, id, payload);
      case FrameType.PUSH_PROMISE:
        throw protocolError('PUSH_PROMISE, though we disabled push');
      case FrameType.PING:
        return this.onPing(flags, id, payload);
      case FrameType.GOAWAY:
        return this.onGoaway(id, payload);
      case FrameType.WINDOW_UPDATE:
        return this.onWindowUpdate(id, payload);
      default:
        // unknown frame types are ignored (RFC 9113 section 4.1)
        return;
    }
  }

  /** A stream frame must name a stream we opened (odd, below the next id). */
  private opened(id: number, what: string): void {
    if (id === 0) throw protocolError(`${what} on stream 0`);
    if (id % 2 === 0 || id >= this.nextId)
      throw protocolError(`${what} on stream ${id}, which we never opened`);
  }

  private onData(flags: number, id: number, payload: Buffer): void {
    this.opened(id, 'DATA');
    const data = unpad(flags, payload, 0, 'DATA');
    // padding counts against the windows too
    this.recvWindow -= payload.length;
    if (this.recvWindow < 0)
      throw new H2ConnectionError(
        ErrorCode.FLOW_CONTROL_ERROR,
        'the server sent more DATA than the connection window allows',
      );
    const s = this.streams.get(id);
    if (s) {
      s.recvWindow -= payload.length;
      if (s.recvWindow < 0)
        throw new H2ConnectionError(
          ErrorCode.FLOW_CONTROL_ERROR,
          `the server sent more DATA than stream ${id}'s window allows`,
        );
      if (!s.gotHeaders) this.reset(s, ErrorCode.PROTOCOL_ERROR, 'DATA before the reply headers');
      else {
        if (data.length > 0) s.events.onData(data);
        if (flags & Flag.END_STREAM) this.remoteEnd(s);
      }
    }
    // a stream already closed (cancelled by us) still takes from the connection window
    this.consumed(s, payload.length);
  }

  /** `n` bytes of DATA were handed on: the windows are given back once half is used. */
  private consumed(s: H2Stream | undefined, n: number): void {
    if (this.closed || n === 0) return;
    this.recvUnacked += n;
    if (this.recvUnacked >= this.connectionWindow / 2) {
      this.send(FrameType.WINDOW_UPDATE, 0, 0, u32(this.recvUnacked));
      this.recvWindow += this.recvUnacked;
      this.recvUnacked = 0;
    }
    if (!s || s.done) return;
    s.recvUnacked += n;
    if (s.recvUnacked >= this.streamWindow / 2) {
      this.send(FrameType.WINDOW_UPDATE, 0, s.id, u32(s.recvUnacked));
      s.recvWindow += s.recvUnacked;
      s.recvUnacked = 0;
    }
  }

  private onHeaders(flags: number, id: number, payload: Buffer): void {
    this.opened(id, 'HEADERS');
    const fragment = unpad(flags, payload, flags & Flag.PRIORITY ? 5 : 0, 'HEADERS');
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if (flags & Flag.END_HEADERS) return this.headerBlock(id, endStream, fragment);
    this.block = { streamId: id, endStream, chunks: [fragment], size: 0, frames: 0 };
    this.growBlock(fragment.length);
  }

  private onContinuation(flags: number, id: number, payload: Buffer): void {
    const b = this.block;
    if (!b || b.streamId !== id) throw protocolError(`CONTINUATION on stream ${id} out of place`);
    b.chunks.push(payload);
    this.growBlock(payload.length);
    if (flags & Flag.END_HEADERS) {
      this.block = undefined;
      this.headerBlock(id, b.endStream, Buffer.concat(b.chunks));
    }
  }

  private growBlock(n: number): void {
    const b = this.block as PendingBlock;
    b.size += n;
    b.frames++;
    if (b.size > this.maxHeaderBlock || b.frames > MAX_CONTINUATIONS)
      throw new H2ConnectionError(
        ErrorCode.ENHANCE_YOUR_CALM,
        `header block over ${this.maxHeaderBlock} bytes or ${MAX_CONTINUATIONS} frames`,
      );
  }

  private headerBlock(id: number, endStream: boolean, block: Buffer): void {
    // decoded even for a stream already closed: the table must stay in step with the server's
    const fields = this.decoder.decode(block);
    const s = this.streams.get(id);
    if (!s) return;
    if (!s.gotHeaders) {
      const status = fields.find(([name]) => name === ':status')?.[1] ?? '';
      if (!/^[1-5]\d\d$/.test(status))
        return this.reset(s, ErrorCode.PROTOCOL_ERROR, 'reply headers without a valid :status');
      if (status.startsWith('1')) {
        // an informational reply: the final one follows
        if (endStream) this.reset(s, ErrorCode.PROTOCOL_ERROR, 'stream ended after a 1xx reply');
        return;
      }
      s.gotHeaders = true;
      s.events.onHeaders(fields, endStream);
    } else {
      if (!endStream) return this.reset(s, ErrorCode.PROTOCOL_ERROR, 'trailers without END_STREAM');
      s.events.onHeaders(fields, true);
    }
    if (endStream) this.remoteEnd(s);
  }

  /** The server ended its side: the reply is whole. What we still had to send is moot. */
  private remoteEnd(s: H2Stream): void {
    if (s.done) return;
    if (!s.localEnded && !this.closed)
      this.send(FrameType.RST_STREAM, 0, s.id, u32(ErrorCode.CANCEL));
    this.finish(s, undefined);
  }

  private onReset(id: number, payload: Buffer): void {
    this.opened(id, 'RST_STREAM');
    if (payload.length !== 4) throw frameSizeError('RST_STREAM', payload.length);
    const s = this.streams.get(id);
    if (!s) return;
    const code = payload.readUInt32BE(0);
    this.finish(
      s,
      new H2StreamError(code, `the server reset the stream (${errorName(code)})`, true),
    );
  }

  private onSettings(flags: number, id: number, payload: Buffer): void {
    if (id !== 0) throw protocolError(`SETTINGS on stream ${id}`);
    if (flags & Flag.ACK) {
      if (payload.length !== 0) throw frameSizeError('SETTINGS ACK', payload.length);
      return;
    }
    if (payload.length % 6 !== 0) throw frameSizeError('SETTINGS', payload.length);
    for (let at = 0; at < payload.length; at += 6) {
      const setting = payload.readUInt16BE(at);
      const value = payload.readUInt32BE(at + 2);
      switch (setting) {
        case Setting.ENABLE_PUSH:
          if (value > 1) throw protocolError(`SETTINGS_ENABLE_PUSH ${value}`);
          break;
        case Setting.MAX_CONCURRENT_STREAMS:
          this.peerMaxStreams = value;
          break;
        case Setting.INITIAL_WINDOW_SIZE: {
          if (value > MAX_WINDOW)
            throw new H2ConnectionError(
              ErrorCode.FLOW_CONTROL_ERROR,
              `SETTINGS_INITIAL_WINDOW_SIZE ${value}`,
            );
          // the change applies to every open stream's window, which may go below zero
          const delta = value - this.peerInitialWindow;
          this.peerInitialWindow = value;
          for (const s of this.streams.values()) {
            s.sendWindow += delta;
            if (s.sendWindow > MAX_WINDOW)
              throw new H2ConnectionError(
                ErrorCode.FLOW_CONTROL_ERROR,
                `stream ${s.id}'s window over 2^31-1`,
              );
          }
          break;
        }
        case Setting.MAX_FRAME_SIZE:
          if (value < DEFAULT_MAX_FRAME || value > 0xffffff)
            throw protocolError(`SETTINGS_MAX_FRAME_SIZE ${value}`);
          this.peerMaxFrame = value;
          break;
        default:
          // HEADER_TABLE_SIZE bounds a table our encoder never uses; MAX_HEADER_LIST_SIZE is
          // advice our few small headers meet; unknown settings are ignored
          break;
      }
    }
    this.send(FrameType.SETTINGS, Flag.ACK, 0, Buffer.alloc(0));
    this.connected = true;
    while (this.waiting.length > 0 && this.streams.size < this.peerMaxStreams && this.usable)
      this.open(this.waiting.shift() as H2Stream);
    this.flushAll();
  }

  private onPing(flags: number, id: number, payload: Buffer): void {
    if (id !== 0) throw protocolError(`PING on stream ${id}`);
    if (payload.length !== 8) throw frameSizeError('PING', payload.length);
    if (!(flags & Flag.ACK)) return this.send(FrameType.PING, Flag.ACK, 0, payload);
    const key = payload.toString('hex');
    const done = this.pings.get(key);
    this.pings.delete(key);
    done?.();
  }

  private onGoaway(id: number, payload: Buffer): void {
    if (id !== 0) throw protocolError(`GOAWAY on stream ${id}`);
    if (payload.length < 8) throw frameSizeError('GOAWAY', payload.length);
    const lastStreamId = payload.readUInt32BE(0) & 0x7fffffff;
    const code = payload.readUInt32BE(4);
    // the debug data is the server's text: shown, but short and printable only
    const debug = payload
      .subarray(8, 208)
      .toString('latin1')
      .replace(/[^\x20-\x7e]/g, '?');
    if (!this.goaway) {
      this.goaway = { code, lastStreamId };
      this.opts.onGoaway?.(code, lastStreamId, debug);
    } else {
      this.goaway.lastStreamId = Math.min(this.goaway.lastStreamId, lastStreamId);
    }
    // streams the server never processed may be retried elsewhere
    const refused = new Error(
      `the server sent GOAWAY (${errorName(code)}${debug ? `: ${debug}` : ''}) before processing the stream`,
    );
    const gone = [...this.waiting, ...this.streams.values()].filter(
      (s) => s.id === 0 || s.id > lastStreamId,
    );
    for (const s of gone) this.finish(s, refused);
    if (!this.closed && this.streams.size === 0)
      this.destroy(new Error('connection closed after GOAWAY'));
  }

  private onWindowUpdate(id: number, payload: Buffer): void {
    if (payload.length !== 4) throw frameSizeError('WINDOW_UPDATE', payload.length);
    const increment = payload.readUInt32BE(0) & 0x7fffffff;
    if (id === 0) {
      if (increment === 0) throw protocolError('WINDOW_UPDATE of 0 on the connection');
      this.sendWindow += increment;
      if (this.sendWindow > MAX_WINDOW)
        throw new H2ConnectionError(
          ErrorCode.FLOW_CONTROL_ERROR,
          'the connection window over 2^31-1',
        );
      this.flushAll();
      return;
    }
    this.opened(id, 'WINDOW_UPDATE');
    const s = this.streams.get(id);
    if (!s) return;
    if (increment === 0) return this.reset(s, ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
    s.sendWindow += increment;
    if (s.sendWindow > MAX_WINDOW)
      return this.reset(s, ErrorCode.FLOW_CONTROL_ERROR, 'stream window over 2^31-1');
    this.flush(s);
  }

  private flushAll(): void {
    for (const s of [...this.streams.values()]) {
      if (this.closed || this.sendWindow <= 0) return;
      this.flush(s);
    }
  }
}

function protocolError(message: string): H2ConnectionError {
  return new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `${message} (PROTOCOL_ERROR)`);
}

function frameSizeError(what: string, length: number): H2ConnectionError {
  return new H2ConnectionError(
    ErrorCode.FRAME_SIZE_ERROR,
    `${what} frame of ${length} bytes (FRAME_SIZE_ERROR)`,
  );
}

/** A DATA or HEADERS payload without its padding (and `skip` more leading bytes: priority). */
function unpad(flags: number, payload: Buffer, skip: number, what: string): Buffer {
  let start = skip;
  let end = payload.length;
  if (flags & Flag.PADDED) {
    if (payload.length < 1) throw frameSizeError(what, payload.length);
    start += 1;
    end -= payload[0] as number;
  }
  if (end < start) throw protocolError(`${what} padding longer than its frame`);
  return payload.subarray(start, end);
}
