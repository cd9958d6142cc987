// A small HTTP/2 client (RFC 9113) over node:net, or node:tls for https:// endpoints, for the
// etcd client's gRPC calls. It replaces node:http2, which loads node:tls (OpenSSL) even for plain
// http:// endpoints and costs several MiB of RSS more than this client and hpack.ts. H2Connection
// is the whole client; this file is what it does with the server's frames, h2-session.ts its
// state and all it sends, h2-frame.ts the wire format.
// - The server's SETTINGS are acknowledged and applied; its PING answered, and the answer to ours
//   matched to it; its GOAWAY stops new streams and fails those above its last stream id; its
//   RST_STREAM ends a stream. Each DATA frame handed on gives back our windows (h2-window.ts).
// - Bounds against a hostile or broken server: a frame over our maximum frame size, more DATA
//   than our windows allow, frames on streams we never opened, a header block too large
//   (h2-headers.ts), and any other protocol error end the connection with GOAWAY, failing every
//   open stream with the reason; nothing thrown while handling the server's bytes escapes the
//   socket's event handlers.
import {
  ErrorCode,
  errorName,
  flowControlError,
  frameSizeError,
  H2ConnectionError,
  H2StreamError,
  protocolError,
} from './h2-errors.ts';
import {
  checkSetting,
  decodeFrameHeader,
  decodeGoaway,
  decodeSettings,
  Flag,
  FRAME_HEADER,
  FrameType,
  Setting,
  u32,
  unpad,
} from './h2-frame.ts';
import { HeaderBlockReader, type HeaderBlock } from './h2-headers.ts';
import { H2Session, OUR_MAX_FRAME, type H2Options } from './h2-session.ts';
import type { H2Stream } from './h2-stream.ts';
import { MAX_WINDOW } from './h2-window.ts';
import { HpackError } from './hpack.ts';

/** An HTTP/2 client connection: an H2Session that handles what the server sends. */
export class H2Connection extends H2Session {
  private readonly headerBlocks: HeaderBlockReader;
  /** the start of a frame whose rest has not arrived */
  private input: Buffer = Buffer.alloc(0);

  constructor(opts: H2Options) {
    super(opts);
    this.headerBlocks = new HeaderBlockReader(this.maxHeaderList);
  }

  protected override receive(chunk: Buffer): void {
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

  protected override dropInput(): void {
    this.input = Buffer.alloc(0);
    this.headerBlocks.clear();
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
    if (this.headerBlocks.open && type !== FrameType.CONTINUATION)
      throw protocolError(`frame type ${type} inside a header block, CONTINUATION expected`);
    switch (type) {
      case FrameType.DATA:
        return this.onData(flags, id, payload);
      case FrameType.HEADERS:
        this.opened(id, 'HEADERS');
        return this.onHeaderBlock(this.headerBlocks.headers(flags, id, payload));
      case FrameType.CONTINUATION:
        return this.onHeaderBlock(this.headerBlocks.continuation(flags, id, payload));
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
    if (!this.recv.take(payload.length))
      throw flowControlError('the server sent more DATA than the connection window allows');
    const s = this.streams.get(id);
    if (s) {
      if (!s.recv.take(payload.length))
        throw flowControlError(`the server sent more DATA than stream ${id}'s window allows`);
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
    const increment = this.recv.release(n);
    if (increment > 0) this.send(FrameType.WINDOW_UPDATE, 0, 0, u32(increment));
    if (!s || s.done) return;
    const streamIncrement = s.recv.release(n);
    if (streamIncrement > 0) this.send(FrameType.WINDOW_UPDATE, 0, s.id, u32(streamIncrement));
  }

  /** A whole header block (undefined: more to come): the reply's headers, or its trailers. */
  private onHeaderBlock(block: HeaderBlock | undefined): void {
    if (!block) return;
    const { streamId, endStream, fields } = block;
    const s = this.streams.get(streamId);
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
    for (const [setting, value] of decodeSettings(payload)) {
      checkSetting(setting, value);
      this.apply(setting, value);
    }
    this.send(FrameType.SETTINGS, Flag.ACK, 0, Buffer.alloc(0));
    this.connected = true;
    while (this.waiting.length > 0 && this.streams.size < this.peerMaxStreams && this.usable)
      this.open(this.waiting.shift() as H2Stream);
    this.flushAll();
  }

  /** One of the server's settings, checked already. */
  private apply(setting: number, value: number): void {
    switch (setting) {
      case Setting.MAX_CONCURRENT_STREAMS:
        this.peerMaxStreams = value;
        break;
      case Setting.INITIAL_WINDOW_SIZE: {
        // the change applies to every open stream's window, which may go below zero
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const s of this.streams.values()) {
          s.sendWindow += delta;
          if (s.sendWindow > MAX_WINDOW)
            throw flowControlError(`stream ${s.id}'s window over 2^31-1`);
        }
        break;
      }
      case Setting.MAX_FRAME_SIZE:
        this.peerMaxFrame = value;
        break;
      default:
        // ENABLE_PUSH only needs checking; HEADER_TABLE_SIZE bounds a table our encoder never
        // uses; MAX_HEADER_LIST_SIZE is advice our few small headers meet; unknown settings are
        // ignored
        break;
    }
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
    const { lastStreamId, code, debug } = decodeGoaway(payload);
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
      if (this.sendWindow > MAX_WINDOW) throw flowControlError('the connection window over 2^31-1');
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
}
