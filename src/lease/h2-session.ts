// The HTTP/2 connection's state and all it sends (RFC 9113 sections 5 and 6); h2.ts adds the
// receive side on top, and H2Connection there is the class callers use.
// - One connection, many streams: the client preface and our SETTINGS first; streams opened as
//   the server's MAX_CONCURRENT_STREAMS allows, the others kept waiting; each stream's end
//   reported once; RST_STREAM to cancel, or for a reply that broke the protocol or ended before
//   our request did; PING sent on request (keepalive); GOAWAY when we end the connection.
// - Flow control: DATA is sent only within the server's connection and stream windows (and in
//   frames no larger than its SETTINGS_MAX_FRAME_SIZE). DATA also waits while the socket has
//   64 KiB unsent, and a server that does not read what we write is cut off once a megabyte waits.
import type { Socket } from 'node:net';
import { dial, type DialOptions } from './h2-dial.ts';
import { ErrorCode, H2StreamError } from './h2-errors.ts';
import {
  DEFAULT_MAX_FRAME,
  encodeFrame,
  encodeGoaway,
  encodeSettings,
  Flag,
  FrameType,
  PREFACE,
  Setting,
  u32,
} from './h2-frame.ts';
import { OUR_TABLE_SIZE } from './h2-headers.ts';
import { H2Stream, type StreamEvents } from './h2-stream.ts';
import { DEFAULT_WINDOW, ReceiveWindow } from './h2-window.ts';
import { encodeHeaders, type HeaderField } from './hpack.ts';

/** the largest frame we accept: the protocol's default, which we advertise too */
export const OUR_MAX_FRAME = DEFAULT_MAX_FRAME;
const MAX_STREAM_ID = 2 ** 31 - 1;
/** bytes waiting in the socket past which the server is taken not to read what we send */
const MAX_UNSENT = 1024 * 1024;
/**
 * DATA waits (for the socket's 'drain') while this much is unsent, so only frames we owe the
 * server (SETTINGS and PING acknowledgements, RST_STREAM, WINDOW_UPDATE) can approach MAX_UNSENT
 */
const DATA_HIGH_WATER = 64 * 1024;

export interface H2Options extends DialOptions {
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

export abstract class H2Session {
  /** the server's first SETTINGS arrived: it speaks HTTP/2 */
  connected = false;
  /** why the connection ended, once it has */
  failure: Error | undefined;
  /** the server's GOAWAY, once sent */
  goaway: { code: number; lastStreamId: number } | undefined;
  protected readonly opts: H2Options;
  protected readonly maxHeaderList: number;
  protected readonly streams = new Map<number, H2Stream>();
  /** streams waiting for the server's MAX_CONCURRENT_STREAMS to allow them */
  protected readonly waiting: H2Stream[] = [];
  /** our connection window */
  protected readonly recv: ReceiveWindow;
  protected nextId = 1;
  protected closed = false;
  protected peerMaxFrame = DEFAULT_MAX_FRAME;
  protected peerInitialWindow = DEFAULT_WINDOW;
  protected peerMaxStreams = Infinity;
  /** what the server's connection window lets us send */
  protected sendWindow = DEFAULT_WINDOW;
  protected readonly pings = new Map<string, (err?: Error) => void>();
  private readonly socket: Socket;
  private readonly streamWindow: number;
  private pingSeq = 0;

  constructor(opts: H2Options) {
    this.opts = opts;
    this.streamWindow = opts.streamWindow ?? 1024 * 1024;
    const connectionWindow = Math.max(DEFAULT_WINDOW, opts.connectionWindow ?? 4 * 1024 * 1024);
    this.recv = new ReceiveWindow(connectionWindow);
    this.maxHeaderList = opts.maxHeaderListSize ?? 64 * 1024;
    this.socket = dial(opts, (err) => this.fail(err));
    this.socket.setNoDelay(true);
    this.socket.on('data', (chunk: Buffer) => this.receive(chunk));
    this.socket.on('error', (err) => this.fail(err));
    this.socket.on('drain', () => this.flushAll());
    this.socket.on('close', () => this.fail(new Error('connection closed')));
    this.socket.write(PREFACE);
    const settings = encodeSettings([
      [Setting.HEADER_TABLE_SIZE, OUR_TABLE_SIZE],
      [Setting.ENABLE_PUSH, 0],
      [Setting.INITIAL_WINDOW_SIZE, this.streamWindow],
      [Setting.MAX_FRAME_SIZE, OUR_MAX_FRAME],
      [Setting.MAX_HEADER_LIST_SIZE, this.maxHeaderList],
    ]);
    this.send(FrameType.SETTINGS, 0, 0, settings);
    if (connectionWindow > DEFAULT_WINDOW)
      this.send(FrameType.WINDOW_UPDATE, 0, 0, u32(connectionWindow - DEFAULT_WINDOW));
  }

  /** The server's bytes, as they arrive. */
  protected abstract receive(chunk: Buffer): void;

  /** The connection failed: what the receive side holds of unfinished input may go. */
  protected abstract dropInput(): void;

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
    const goaway = encodeFrame(FrameType.GOAWAY, 0, 0, encodeGoaway(code, err.message));
    const sock = this.socket;
    this.fail(err, () => {
      // the GOAWAY is worth a try; a server that does not take it in a second loses it
      sock.end(goaway);
      setTimeout(() => sock.destroy(), 1_000).unref();
    });
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

  /**
   * The connection is over: `close` ends the socket (default: at once); the streams and pings
   * learn why.
   */
  protected fail(err: Error, close?: () => void): void {
    if (this.closed) return;
    this.closed = true;
    this.failure = err;
    this.dropInput();
    if (close) close();
    else this.socket.destroy();
    this.opts.onClose?.(err);
    for (const done of this.pings.values()) done(err);
    this.pings.clear();
    for (const s of [...this.waiting, ...this.streams.values()]) this.finish(s, err);
  }

  protected open(s: H2Stream): void {
    if (this.nextId > MAX_STREAM_ID) {
      this.finish(s, new Error('stream ids used up on this connection'));
      return;
    }
    s.id = this.nextId;
    this.nextId += 2;
    s.sendWindow = this.peerInitialWindow;
    s.recv = new ReceiveWindow(this.streamWindow);
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

  /** The stream is over: forgotten, its end reported (unless cancelled), a waiting one let in. */
  protected finish(s: H2Stream, err: Error | undefined, report = true): void {
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

  /** The server ended its side: the reply is whole. What we still had to send is moot. */
  protected remoteEnd(s: H2Stream): void {
    if (s.done) return;
    if (!s.localEnded && !this.closed)
      this.send(FrameType.RST_STREAM, 0, s.id, u32(ErrorCode.CANCEL));
    this.finish(s, undefined);
  }

  /** Our RST_STREAM for a reply that broke the protocol; the stream fails with `message`. */
  protected reset(s: H2Stream, code: number, message: string): void {
    if (!this.closed) this.send(FrameType.RST_STREAM, 0, s.id, u32(code));
    this.finish(s, new H2StreamError(code, message, false));
  }

  protected send(type: number, flags: number, streamId: number, payload: Buffer): void {
    if (this.closed) return;
    this.socket.write(encodeFrame(type, flags, streamId, payload));
    if (this.socket.writableLength > MAX_UNSENT)
      this.fail(new Error(`the server does not read: over ${MAX_UNSENT} bytes wait to be sent`));
  }

  protected flushAll(): void {
    for (const s of [...this.streams.values()]) {
      if (this.closed || this.sendWindow <= 0) return;
      this.flush(s);
    }
  }
}
