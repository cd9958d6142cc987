// The gRPC layer of the etcd client (src/lease/etcd-grpc.ts): its framing with known bytes, and
// its calls against small HTTP/2 servers on loopback that answer as etcd would, or as a hostile or
// broken one would: status trailers, a reply larger than allowed (refused from its length prefix),
// a silent server (deadline), a dead endpoint or one that does not speak HTTP/2 (the next one is
// tried at once), a refused token (re-authenticated once).
import * as http2 from 'node:http2';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { EtcdGrpc, FrameReader, frame, GrpcError, Status } from '../../src/lease/etcd-grpc.ts';
import { decodeAuthenticateResponse } from '../../src/lease/etcd-proto.ts';

describe('gRPC framing', () => {
  it('prefixes a message with flag 0 and its big-endian length', () => {
    expect(frame(Buffer.from('abc')).toString('hex')).toBe('0000000003616263');
    expect(frame(Buffer.alloc(0)).toString('hex')).toBe('0000000000');
  });

  it('reads messages split anywhere, and several in one chunk', () => {
    const got: string[] = [];
    const r = new FrameReader(100, (m) => got.push(m.toString()));
    const bytes = Buffer.concat([
      frame(Buffer.from('hello')),
      frame(Buffer.alloc(0)),
      frame(Buffer.from('x')),
    ]);
    for (const b of bytes) r.push(Buffer.from([b]));
    r.push(bytes);
    expect(got).toEqual(['hello', '', 'x', 'hello', '', 'x']);
    expect(r.partial).toBe(false);
    r.push(bytes.subarray(0, 3));
    expect(r.partial).toBe(true);
  });

  it('refuses a message over the limit from its prefix alone, and a compressed one', () => {
    const r = new FrameReader(4, () => undefined);
    const err = (() => {
      try {
        r.push(Buffer.from('0000000005', 'hex'));
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(GrpcError);
    expect((err as GrpcError).code).toBe(Status.RESOURCE_EXHAUSTED);
    expect((err as GrpcError).message).toBe(
      '8 RESOURCE_EXHAUSTED: Received message larger than max (5 vs. 4)',
    );
    expect(() =>
      new FrameReader(100, () => undefined).push(Buffer.from('0100000001ff', 'hex')),
    ).toThrow(/compressed/);
  });
});

type Handler = (
  stream: http2.ServerHttp2Stream,
  headers: http2.IncomingHttpHeaders,
  body: Buffer,
) => void;
const servers: http2.Http2Server[] = [];
const clients: EtcdGrpc[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** An h2c server on loopback calling `handle` with each request's whole body. */
async function server(handle: Handler): Promise<string> {
  const s = http2.createServer();
  s.on('stream', (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => handle(stream, headers, Buffer.concat(chunks)));
    stream.on('error', () => undefined);
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

function reply(
  stream: http2.ServerHttp2Stream,
  msg: Buffer | undefined,
  status = 0,
  message = '',
): void {
  stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
  stream.on('wantTrailers', () =>
    stream.sendTrailers({
      'grpc-status': String(status),
      ...(message ? { 'grpc-message': encodeURIComponent(message) } : {}),
    }),
  );
  stream.end(msg === undefined ? undefined : frame(msg));
}

function client(
  endpoints: string[],
  o: { auth?: { username: string; password: string }; timeoutMs?: number; max?: number } = {},
): EtcdGrpc {
  const c = new EtcdGrpc({
    endpoints,
    auth: o.auth,
    callTimeoutMs: o.timeoutMs ?? 2_000,
    maxReceiveBytes: o.max ?? 1024,
  });
  clients.push(c);
  return c;
}

async function failure(p: Promise<unknown>): Promise<GrpcError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof GrpcError) return err;
    throw err;
  }
  throw new Error('expected the call to fail');
}

describe('unary calls', () => {
  it('sends the gRPC headers and the framed request, and returns the reply', async () => {
    let seen: http2.IncomingHttpHeaders = {};
    let body: Buffer = Buffer.alloc(0);
    const ep = await server((s, h, b) => {
      seen = h;
      body = b;
      reply(s, Buffer.from('pong'));
    });
    const got = await client([ep]).unary('/etcdserverpb.KV/Range', Buffer.from('ping'));
    expect(got.toString()).toBe('pong');
    expect(body).toEqual(frame(Buffer.from('ping')));
    expect(seen).toMatchObject({
      ':method': 'POST',
      ':path': '/etcdserverpb.KV/Range',
      'content-type': 'application/grpc',
      te: 'trailers',
      'grpc-timeout': '2000m',
    });
    expect(seen.token).toBeUndefined();
  });

  it("reports etcd's status and message from the trailers, percent-decoded", async () => {
    const ep = await server((s) =>
      reply(s, undefined, 11, 'etcdserver: mvcc: required revision has been compacted'),
    );
    const err = await failure(client([ep]).unary('/x', Buffer.alloc(0)));
    expect(err.code).toBe(11);
    expect(err.message).toBe(
      '11 OUT_OF_RANGE: etcdserver: mvcc: required revision has been compacted',
    );
  });

  it("cuts a long grpc-message short: the server's text ends up in errors and logs", async () => {
    const ep = await server((s) => reply(s, undefined, 13, `etcdserver: ${'x'.repeat(8_000)}`));
    const err = await failure(client([ep]).unary('/x', Buffer.alloc(0)));
    expect(err.code).toBe(13);
    expect(err.message.startsWith('13 INTERNAL: etcdserver: xxx')).toBe(true);
    expect(err.message.length).toBeLessThan(260);
  });

  it('refuses a reply larger than maxReceiveBytes, with RESOURCE_EXHAUSTED', async () => {
    const ep = await server((s) => reply(s, Buffer.alloc(5_000)));
    const err = await failure(client([ep], { max: 4_096 }).unary('/x', Buffer.alloc(0)));
    expect(err.code).toBe(Status.RESOURCE_EXHAUSTED);
    expect(err.message).toContain('larger than max (5000 vs. 4096)');
  });

  it('gives up at the deadline on a server that never answers', async () => {
    const ep = await server(() => undefined);
    const started = Date.now();
    const err = await failure(client([ep], { timeoutMs: 300 }).unary('/x', Buffer.alloc(0)));
    expect(err.code).toBe(Status.DEADLINE_EXCEEDED);
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('tries the next endpoint at once when one is unreachable, and stays on the one that works', async () => {
    let calls = 0;
    const live = await server((s) => {
      calls++;
      reply(s, Buffer.from('ok'));
    });
    const dead = await server(() => undefined);
    const deadEp = dead;
    await new Promise((r) => servers.pop()?.close(r)); // nothing listens there now
    const c = client([deadEp, live]);
    expect((await c.unary('/x', Buffer.alloc(0))).toString()).toBe('ok');
    expect((await c.unary('/x', Buffer.alloc(0))).toString()).toBe('ok');
    expect(calls).toBe(2);
    expect(c.endpoint).toBe(live);
  });

  it('fails at the deadline on an endpoint that accepts but never speaks, and the next call moves on', async () => {
    const sockets: Socket[] = [];
    const mute = createServer((sock) => {
      sockets.push(sock);
      sock.on('error', () => undefined);
    });
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', r));
    try {
      const live = await server((s) => reply(s, Buffer.from('ok')));
      const c = client([`http://127.0.0.1:${(mute.address() as AddressInfo).port}`, live], {
        timeoutMs: 300,
      });
      const started = Date.now();
      const err = await failure(c.unary('/x', Buffer.alloc(0)));
      expect(err.code).toBe(Status.DEADLINE_EXCEEDED);
      expect(Date.now() - started).toBeLessThan(2_000);
      expect(c.endpoint).toBe(live);
      expect((await c.unary('/x', Buffer.alloc(0))).toString()).toBe('ok');
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => mute.close(r));
    }
  });

  it('tries the next endpoint at once when one does not speak HTTP/2', async () => {
    const web = createServer((sock) => {
      sock.on('error', () => undefined);
      sock.resume(); // reads to the client's end, so the socket closes
      sock.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    });
    await new Promise<void>((r) => web.listen(0, '127.0.0.1', r));
    try {
      const live = await server((s) => reply(s, Buffer.from('ok')));
      const webEp = `http://127.0.0.1:${(web.address() as AddressInfo).port}`;
      const c = client([webEp, live]);
      expect((await c.unary('/x', Buffer.alloc(0))).toString()).toBe('ok');
      expect(c.endpoint).toBe(live);
      const err = await failure(client([webEp]).unary('/x', Buffer.alloc(0)));
      expect(err.code).toBe(Status.UNAVAILABLE);
      expect(err.message).toContain('it does not speak HTTP/2');
    } finally {
      await new Promise((r) => web.close(r));
    }
  });

  it('fails UNAVAILABLE, naming the connection error, when every endpoint is unreachable', async () => {
    const ep = await server(() => undefined);
    await new Promise((r) => servers.pop()?.close(r));
    const err = await failure(client([ep, ep]).unary('/x', Buffer.alloc(0)));
    expect(err.code).toBe(Status.UNAVAILABLE);
    expect(err.message).toMatch(/^14 UNAVAILABLE: connect ECONNREFUSED 127\.0\.0\.1:\d+/);
  });

  it('authenticates, sends the token, and re-authenticates once when etcd refuses it', async () => {
    let issued = 0;
    const tokens: (string | undefined)[] = [];
    const ep = await server((s, h) => {
      if (h[':path'] === '/etcdserverpb.Auth/Authenticate') {
        issued++;
        // AuthenticateResponse{token: "t<n>"}
        const token = Buffer.from(`t${issued}`);
        return reply(s, Buffer.concat([Buffer.from([0x12, token.length]), token]));
      }
      tokens.push(h.token as string | undefined);
      if (h.token === 't1') return reply(s, undefined, 16, 'etcdserver: invalid auth token');
      reply(s, Buffer.from('ok'));
    });
    const c = client([ep], { auth: { username: 'root', password: 'pw' } });
    expect((await c.unary('/x', Buffer.alloc(0))).toString()).toBe('ok');
    expect((await c.unary('/x', Buffer.alloc(0))).toString()).toBe('ok');
    expect(tokens).toEqual(['t1', 't2', 't2']);
    expect(issued).toBe(2);
    // the reply decodes as etcd's message does
    expect(decodeAuthenticateResponse(Buffer.from([0x12, 2, 0x74, 0x31])).token).toBe('t1');
  });
});

describe('streams', () => {
  it('delivers each message, then the end with its status', async () => {
    const ep = await server(() => undefined);
    servers[0]?.removeAllListeners('stream');
    servers[0]?.on('stream', (s) => {
      s.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      s.on('wantTrailers', () => s.sendTrailers({ 'grpc-status': '0' }));
      s.on('data', (c: Buffer) => s.write(c)); // echo each framed message back
      s.on('end', () => s.end());
    });
    const got: string[] = [];
    const ended = new Promise<GrpcError | undefined>((resolve) => {
      void client([ep])
        .stream('/etcdserverpb.Watch/Watch', {
          onMessage: (m) => got.push(m.toString()),
          onEnd: resolve,
        })
        .then((call) => {
          call.write(Buffer.from('one'));
          call.write(Buffer.from('two'));
          setTimeout(() => call.end(), 50);
        });
    });
    expect(await ended).toBeUndefined();
    expect(got).toEqual(['one', 'two']);
  });
});

describe('keepalive', () => {
  it('destroys a session whose pings go unanswered, ending its open stream as UNAVAILABLE', async () => {
    // speaks just enough HTTP/2 to connect (an empty SETTINGS frame), then nothing: a partition
    const sockets: Socket[] = [];
    const silent = createServer((sock) => {
      sockets.push(sock);
      sock.on('error', () => undefined);
      sock.write(Buffer.from('000000040000000000', 'hex'));
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    try {
      const c = new EtcdGrpc({
        endpoints: [`http://127.0.0.1:${(silent.address() as AddressInfo).port}`],
        callTimeoutMs: 2_000,
        maxReceiveBytes: 1024,
        keepaliveMs: 100,
        keepaliveTimeoutMs: 100,
      });
      clients.push(c);
      const started = Date.now();
      const end = await new Promise<GrpcError | undefined>((resolve) => {
        void c.stream('/etcdserverpb.Watch/Watch', { onMessage: () => undefined, onEnd: resolve });
      });
      expect(end?.code).toBe(Status.UNAVAILABLE);
      expect(end?.message).toBe('14 UNAVAILABLE: keepalive ping unanswered for 100 ms');
      expect(Date.now() - started).toBeLessThan(1_000);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => silent.close(r));
    }
  });
});
