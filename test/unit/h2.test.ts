// The HTTP/2 client (src/lease/h2.ts): its frames with known bytes; requests against node:http2
// servers on loopback (Huffman-coded and indexed reply headers, trailers, flow control both ways
// with multi-MiB bodies, MAX_CONCURRENT_STREAMS, RST_STREAM, GOAWAY mid-call, PING); and against
// raw TCP servers that send garbage, an oversized frame, a frame on a stream never opened, a
// CONTINUATION flood, more DATA than the window, or a broken header block: each ends the
// connection with a GOAWAY naming the error and fails the open stream with a clear reason.
import { createHash } from 'node:crypto';
import * as http2 from 'node:http2';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCode, H2ConnectionError, H2StreamError } from '../../src/lease/h2-errors.ts';
import {
  decodeFrameHeader,
  encodeFrame,
  encodeSettings,
  Flag,
  FrameType,
  PREFACE,
  Setting,
} from '../../src/lease/h2-frame.ts';
import type { H2Stream } from '../../src/lease/h2-stream.ts';
import { H2Connection } from '../../src/lease/h2.ts';
import type { HeaderField } from '../../src/lease/hpack.ts';

describe('frames', () => {
  it('writes the 9-byte header: 24-bit length, type, flags, 31-bit stream id', () => {
    const f = encodeFrame(FrameType.WINDOW_UPDATE, 0, 3, Buffer.from('000003e8', 'hex'));
    expect(f.toString('hex')).toBe('000004080000000003000003e8');
    const big = encodeFrame(
      FrameType.DATA,
      Flag.END_STREAM | Flag.PADDED,
      0x7fffffff,
      Buffer.alloc(70_000),
    );
    expect(big.subarray(0, 9).toString('hex')).toBe('011170' + '00' + '09' + '7fffffff');
    expect(decodeFrameHeader(big)).toEqual({
      length: 70_000,
      type: FrameType.DATA,
      flags: 0x9,
      streamId: 0x7fffffff,
    });
  });

  it('drops the reserved bit of the stream id, and writes SETTINGS as 6-byte entries', () => {
    expect(decodeFrameHeader(Buffer.from('000000040080000005', 'hex')).streamId).toBe(5);
    expect(
      encodeSettings([
        [Setting.ENABLE_PUSH, 0],
        [Setting.INITIAL_WINDOW_SIZE, 1 << 20],
      ]).toString('hex'),
    ).toBe('000200000000' + '000400100000');
    expect(PREFACE.toString('latin1')).toBe('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
  });
});

const cleanups: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function connect(port: number, extra: Partial<ConstructorParameters<typeof H2Connection>[0]> = {}) {
  const conn = new H2Connection({ host: '127.0.0.1', port, ...extra });
  cleanups.push(() => conn.destroy(new Error('test over')));
  return conn;
}

/** An h2c server on loopback; `handle` answers each stream. */
async function h2server(
  handle: (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void,
  settings: http2.Settings = {},
): Promise<{ port: number; server: http2.Http2Server }> {
  const server = http2.createServer({ settings });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('error', () => undefined);
  });
  server.on('stream', (stream, headers) => {
    stream.on('error', () => undefined);
    handle(stream, headers);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => {
    for (const s of sessions) s.destroy();
    return new Promise((r) => server.close(r));
  });
  return { port: (server.address() as AddressInfo).port, server };
}

interface Reply {
  headers: HeaderField[][];
  data: Buffer;
  err: Error | undefined;
}

/** Runs one request to its end: its headers (reply, then trailers), data and end. */
function call(
  conn: H2Connection,
  fields: HeaderField[],
  body?: Buffer,
): { stream: H2Stream; reply: Promise<Reply> } {
  let stream!: H2Stream;
  const reply = new Promise<Reply>((resolve) => {
    const headers: HeaderField[][] = [];
    const chunks: Buffer[] = [];
    stream = conn.request(fields, {
      onHeaders: (f) => headers.push(f),
      onData: (c) => chunks.push(c),
      onEnd: (err) => resolve({ headers, data: Buffer.concat(chunks), err }),
    });
  });
  if (body) stream.write(body);
  stream.end();
  return { stream, reply };
}

const get = (path: string): HeaderField[] => [
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', path],
  [':authority', 'localhost'],
];

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

describe('against node:http2', () => {
  it('sends the request, and reads Huffman-coded, indexed reply headers, the body and trailers', async () => {
    let seen: http2.IncomingHttpHeaders = {};
    const { port } = await h2server((stream, headers) => {
      seen = headers;
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        stream.respond(
          {
            ':status': 200,
            'content-type': 'application/grpc',
            'x-greeting': 'hello, world; hello, world',
          },
          { waitForTrailers: true },
        );
        stream.on('wantTrailers', () =>
          stream.sendTrailers({ 'grpc-status': '0', 'grpc-message': 'all%20fine' }),
        );
        stream.end(Buffer.concat([Buffer.from('echo:'), ...chunks]));
      });
    });
    const conn = connect(port);
    for (let i = 0; i < 3; i++) {
      // the second and third replies reuse the server's dynamic table entries
      const { reply } = call(
        conn,
        [...get('/svc/Method'), ['x-n', String(i)]],
        Buffer.from('ping'),
      );
      const r = await reply;
      expect(r.err).toBeUndefined();
      expect(r.data.toString()).toBe('echo:ping');
      expect(r.headers).toHaveLength(2);
      expect(new Map(r.headers[0])).toEqual(
        new Map([
          [':status', '200'],
          ['content-type', 'application/grpc'],
          ['x-greeting', 'hello, world; hello, world'],
          ['date', expect.any(String) as unknown as string],
        ]),
      );
      expect(new Map(r.headers[1])).toEqual(
        new Map([
          ['grpc-status', '0'],
          ['grpc-message', 'all%20fine'],
        ]),
      );
      expect(seen).toMatchObject({ ':method': 'POST', ':path': '/svc/Method', 'x-n': String(i) });
    }
    expect(conn.connected).toBe(true);
    expect(conn.activeStreams).toBe(0);
  });

  it('receives 8 MiB and sends 3 MiB within the windows, replenishing its own', async () => {
    const big = Buffer.alloc(8 * 1024 * 1024);
    for (let i = 0; i < big.length; i += 4) big.writeUInt32BE(i, i);
    const upload = big.subarray(0, 3 * 1024 * 1024);
    let received = '';
    // the server's default windows are 64 KiB: the upload must wait for its WINDOW_UPDATEs
    const { port } = await h2server((stream) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        received = sha(Buffer.concat(chunks));
        stream.respond({ ':status': 200 });
        stream.end(big);
      });
    });
    // small windows of our own: 8 MiB only flows if they are given back as data is read
    const conn = connect(port, { streamWindow: 65_535, connectionWindow: 65_535 });
    const r = await call(conn, get('/big'), upload).reply;
    expect(r.err).toBeUndefined();
    expect(received).toBe(sha(upload));
    expect(r.data.length).toBe(big.length);
    expect(sha(r.data)).toBe(sha(big));
  });

  it('sends 8 MiB to a server with large windows, pausing while the socket has much unsent', async () => {
    const upload = Buffer.alloc(8 * 1024 * 1024, 0x5a);
    upload.write('end', upload.length - 3);
    let received = '';
    const { port, server } = await h2server(
      (stream) => {
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => {
          received = sha(Buffer.concat(chunks));
          stream.respond({ ':status': 200 });
          stream.end();
        });
      },
      { initialWindowSize: 16 * 1024 * 1024 },
    );
    server.on('session', (s) => s.on('connect', () => s.setLocalWindowSize(16 * 1024 * 1024)));
    const conn = connect(port);
    // the server's SETTINGS (its large window) first
    await call(conn, get('/warm')).reply;
    const r = await call(conn, get('/upload'), upload).reply;
    expect(r.err).toBeUndefined();
    expect(received).toBe(sha(upload));
    expect(conn.usable).toBe(true);
  });

  it('opens no more streams than MAX_CONCURRENT_STREAMS allows, queueing the rest', async () => {
    let open = 0;
    let most = 0;
    const { port } = await h2server(
      (stream) => {
        most = Math.max(most, ++open);
        stream.resume();
        stream.on('end', () =>
          setTimeout(() => {
            open--;
            stream.respond({ ':status': 200 });
            stream.end('ok');
          }, 20),
        );
      },
      { maxConcurrentStreams: 1 },
    );
    const conn = connect(port);
    // the server's SETTINGS must have arrived for its limit to apply
    await call(conn, get('/first')).reply;
    const replies = await Promise.all([1, 2, 3].map((i) => call(conn, get(`/${i}`)).reply));
    expect(replies.map((r) => r.data.toString())).toEqual(['ok', 'ok', 'ok']);
    expect(most).toBe(1);
  });

  it("reports the server's RST_STREAM with its code", async () => {
    const { port } = await h2server((stream) =>
      stream.close(http2.constants.NGHTTP2_REFUSED_STREAM),
    );
    const r = await call(connect(port), get('/x')).reply;
    expect(r.err).toBeInstanceOf(H2StreamError);
    expect(r.err).toMatchObject({ code: ErrorCode.REFUSED_STREAM, remote: true });
    expect(r.err?.message).toBe('the server reset the stream (REFUSED_STREAM)');
  });

  it('on GOAWAY mid-call, finishes the streams it took and fails the later ones; no new streams', async () => {
    const streams: http2.ServerHttp2Stream[] = [];
    const { port } = await h2server((stream) => {
      stream.resume();
      streams.push(stream);
      if (streams.length === 2) {
        // takes stream 1 only, then answers it
        stream.session?.goaway(http2.constants.NGHTTP2_NO_ERROR, 1, Buffer.from('bye'));
        setTimeout(() => {
          streams[0]?.respond({ ':status': 200 });
          streams[0]?.end('first');
        }, 50);
      }
    });
    let goaway: unknown[] = [];
    const conn = connect(port, { onGoaway: (...a) => (goaway = a) });
    const first = call(conn, get('/1')).reply;
    const second = call(conn, get('/2')).reply;
    const r2 = await second;
    expect(r2.err?.message).toBe(
      'the server sent GOAWAY (NO_ERROR: bye) before processing the stream',
    );
    expect(goaway).toEqual([0, 1, 'bye']);
    expect(conn.usable).toBe(false);
    expect(() => conn.request(get('/3'), { onHeaders() {}, onData() {}, onEnd() {} })).toThrow();
    const r1 = await first;
    expect(r1.err).toBeUndefined();
    expect(r1.data.toString()).toBe('first');
  });

  it('answers a PING with its ACK', async () => {
    const { port } = await h2server(() => undefined);
    const conn = connect(port);
    await new Promise<void>((resolve, reject) =>
      conn.ping((err) => (err ? reject(err) : resolve())),
    );
    expect(conn.connected).toBe(true);
  });

  it('fails open streams and pings with the error it is destroyed with', async () => {
    const { port } = await h2server(() => undefined);
    const conn = connect(port);
    const { reply } = call(conn, get('/never'));
    await new Promise<void>((r) => conn.ping(() => r()));
    const pinged = new Promise<Error | undefined>((r) => conn.ping(r));
    conn.destroy(new Error('deadline'));
    expect((await reply).err?.message).toBe('deadline');
    expect((await pinged)?.message).toBe('deadline');
  });
});

/** The frames in bytes a client sent (after the preface). */
function framesOf(
  bytes: Buffer,
): { type: number; flags: number; streamId: number; payload: Buffer }[] {
  const out = [];
  let at = bytes.subarray(0, PREFACE.length).equals(PREFACE) ? PREFACE.length : 0;
  while (bytes.length - at >= 9) {
    const h = decodeFrameHeader(bytes, at);
    if (bytes.length - at - 9 < h.length) break;
    out.push({ ...h, payload: bytes.subarray(at + 9, at + 9 + h.length) });
    at += 9 + h.length;
  }
  return out;
}

/**
 * A TCP server that answers each connection with `bytes` (after its SETTINGS, unless `raw`), and
 * records what the client sent until it closed.
 */
async function hostile(
  bytes: Buffer,
  raw = false,
): Promise<{ port: number; sent: Promise<Buffer> }> {
  let done!: (b: Buffer) => void;
  const sent = new Promise<Buffer>((r) => (done = r));
  const sockets: Socket[] = [];
  const server: Server = createServer((sock) => {
    sockets.push(sock);
    const got: Buffer[] = [];
    sock.on('data', (c: Buffer) => got.push(c));
    sock.on('error', () => undefined);
    sock.on('close', () => done(Buffer.concat(got)));
    const settings = encodeFrame(FrameType.SETTINGS, 0, 0, Buffer.alloc(0));
    sock.write(raw ? bytes : Buffer.concat([settings, bytes]));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => {
    for (const s of sockets) s.destroy();
    return new Promise((r) => server.close(r));
  });
  return { port: (server.address() as AddressInfo).port, sent };
}

/** The reply headers `:status: 200`, as HPACK (static index 8). */
const STATUS_200 = encodeFrame(FrameType.HEADERS, Flag.END_HEADERS, 1, Buffer.from([0x88]));

describe('against a hostile or broken server', () => {
  it.each([
    [
      'HTTP/1.1 instead of HTTP/2',
      Buffer.from('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n'),
      true,
      ErrorCode.PROTOCOL_ERROR,
      "the server's first frame is not SETTINGS (type 80): it does not speak HTTP/2 (PROTOCOL_ERROR)",
    ],
    [
      'a frame over the maximum size',
      // only the header of a 20,000-byte DATA frame: refused before its payload is awaited
      Buffer.concat([STATUS_200, Buffer.from('004e20' + '00' + '00' + '00000001', 'hex')]),
      false,
      ErrorCode.FRAME_SIZE_ERROR,
      'frame of 20000 bytes, over our maximum of 16384 (FRAME_SIZE_ERROR)',
    ],
    [
      'DATA on a stream never opened',
      encodeFrame(FrameType.DATA, 0, 5, Buffer.from('x')),
      false,
      ErrorCode.PROTOCOL_ERROR,
      'DATA on stream 5, which we never opened (PROTOCOL_ERROR)',
    ],
    [
      'a push, which we disabled',
      encodeFrame(FrameType.PUSH_PROMISE, Flag.END_HEADERS, 1, Buffer.from('0000000288', 'hex')),
      false,
      ErrorCode.PROTOCOL_ERROR,
      'PUSH_PROMISE, though we disabled push (PROTOCOL_ERROR)',
    ],
    [
      'a CONTINUATION flood',
      Buffer.concat([
        encodeFrame(FrameType.HEADERS, 0, 1, Buffer.from([0x88])),
        ...Array.from({ length: 20 }, () =>
          encodeFrame(FrameType.CONTINUATION, 0, 1, Buffer.alloc(16_000, 0x88)),
        ),
      ]),
      false,
      ErrorCode.ENHANCE_YOUR_CALM,
      'header block over 131072 bytes or 64 frames',
    ],
    [
      'a header block naming an index beyond the tables',
      encodeFrame(FrameType.HEADERS, Flag.END_HEADERS, 1, Buffer.from([0xff, 0x10])),
      false,
      ErrorCode.COMPRESSION_ERROR,
      'bad header block: header index 143 beyond the tables',
    ],
    [
      'more DATA than the stream window',
      Buffer.concat([STATUS_200, encodeFrame(FrameType.DATA, 0, 1, Buffer.alloc(2_000))]),
      false,
      ErrorCode.FLOW_CONTROL_ERROR,
      "the server sent more DATA than stream 1's window allows",
    ],
  ])('%s: GOAWAY, and the stream fails with the reason', async (_, bytes, raw, code, message) => {
    const { port, sent } = await hostile(bytes, raw);
    const conn = connect(port, { streamWindow: 1_000 });
    const r = await call(conn, get('/x')).reply;
    expect(r.err).toBeInstanceOf(H2ConnectionError);
    expect(r.err?.message).toBe(message);
    expect(conn.failure).toBe(r.err);
    expect(conn.usable).toBe(false);
    const goaway = framesOf(await sent).find((f) => f.type === FrameType.GOAWAY);
    expect(goaway?.payload.readUInt32BE(4)).toBe(code);
    expect(goaway?.payload.subarray(8).toString()).toBe(message);
  });

  it('fails the stream when the server closes the connection, with no frame', async () => {
    const server = createServer((sock) => sock.destroy());
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => server.close(r)));
    let closed: Error | undefined;
    const conn = connect((server.address() as AddressInfo).port, { onClose: (e) => (closed = e) });
    const r = await call(conn, get('/x')).reply;
    expect(r.err).toBe(closed);
    expect(r.err?.message).toMatch(/connection closed|ECONNRESET|EPIPE/);
  });

  it('ignores DATA and HEADERS on a stream it cancelled, still keeping the HPACK table', async () => {
    // the reply to stream 1 (cancelled by then) adds "x-a: b" to the dynamic table (literal with
    // incremental indexing); the reply to stream 3 names it by index 62
    const { port } = await hostile(
      Buffer.concat([
        encodeFrame(
          FrameType.HEADERS,
          Flag.END_HEADERS,
          1,
          Buffer.from([0x88, 0x40, 0x03, 0x78, 0x2d, 0x61, 0x01, 0x62]),
        ),
        encodeFrame(FrameType.DATA, Flag.END_STREAM, 1, Buffer.from('late')),
        encodeFrame(FrameType.HEADERS, Flag.END_HEADERS, 3, Buffer.from([0x88, 0xbe])),
        encodeFrame(FrameType.DATA, Flag.END_STREAM, 3, Buffer.from('ok')),
      ]),
    );
    const conn = connect(port);
    let events = 0;
    const first = conn.request(get('/1'), {
      onHeaders: () => events++,
      onData: () => events++,
      onEnd: () => events++,
    });
    first.cancel();
    const r = await call(conn, get('/3')).reply;
    expect(r.err).toBeUndefined();
    expect(r.headers).toEqual([
      [
        [':status', '200'],
        ['x-a', 'b'],
      ],
    ]);
    expect(r.data.toString()).toBe('ok');
    expect(events).toBe(0);
    expect(conn.usable).toBe(true);
  });
});
