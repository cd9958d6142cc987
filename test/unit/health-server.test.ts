// The health server's limits (issue: a node-local endpoint must not be a
// way to exhaust the daemon): headers past 8 KiB are refused with 431 before
// any handler runs, and connections past 16 are closed at once while the
// first 16 stay open. Then its HTTP/1.1 (its own, over node:net): what a
// client (fetch, as a kubelet's or Prometheus's would) reads from each path
// and method, a head that comes in pieces, a request that is not HTTP/1.x.
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  HEALTH_LIMITS,
  type HealthLimits,
  readRequestLine,
  replyBytes,
  serveHealth,
} from '../../src/health/server.ts';
import { DaemonProbe } from '../../src/health/probe.ts';
import { captureLog } from '../helpers/log.ts';
import { freePort } from '../../lab/kit/ports.ts';

let ctl = new AbortController();
const sockets: Socket[] = [];
afterEach(() => {
  for (const s of sockets) s.destroy();
  ctl.abort();
  ctl = new AbortController();
});

async function serve(
  probe = {} as DaemonProbe,
  logger = captureLog().logger,
  limits: HealthLimits = HEALTH_LIMITS,
): Promise<number> {
  const port = await freePort();
  void serveHealth({ ip: '127.0.0.1', port, probe, logger, limits }, ctl.signal);
  for (let i = 0; i < 100; i++) {
    const up = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1', () => (s.destroy(), resolve(true))).on('error', () =>
        resolve(false),
      );
    });
    if (up) return port;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('health server did not listen');
}

/**
 * Opens a connection; resolves once connected, with a promise that settles when the server closes
 * it.
 */
function open(
  port: number,
): Promise<{ socket: Socket; closed: Promise<void>; data: () => string }> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const socket = connect(port, '127.0.0.1');
    sockets.push(socket);
    const closed = new Promise<void>((r) => socket.on('close', () => r()));
    socket.on('data', (d) => (buf += d.toString()));
    socket.once('connect', () => resolve({ socket, closed, data: () => buf }));
    socket.once('error', reject);
  });
}

describe('health server limits', () => {
  it('refuses headers past the limit with 431', async () => {
    const port = await serve();
    const c = await open(port);
    c.socket.write(
      `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(HEALTH_LIMITS.maxHeaderBytes + 1024)}\r\n\r\n`,
    );
    await c.closed;
    expect(c.data()).toMatch(/^HTTP\/1\.1 431 /);
  });

  it('closes connections past the limit at once and keeps the others', async () => {
    const port = await serve();
    const kept = [];
    for (let i = 0; i < HEALTH_LIMITS.maxConnections; i++) kept.push(await open(port));
    const extra = await open(port);
    const closedFast = await Promise.race([
      extra.closed.then(() => true),
      new Promise<boolean>((r) => setTimeout(() => r(false), 2_000)),
    ]);
    expect(closedFast).toBe(true);
    const anyClosed = await Promise.race([
      ...kept.map((k) => k.closed.then(() => true)),
      new Promise<boolean>((r) => setTimeout(() => r(false), 200)),
    ]);
    expect(anyClosed).toBe(false);
  });
});

/** What a raw request gets back, once the server closes the connection. */
async function raw(port: number, ...pieces: string[]): Promise<string> {
  const c = await open(port);
  for (const p of pieces) {
    c.socket.write(p);
    await new Promise((r) => setTimeout(r, 20));
  }
  await c.closed;
  return c.data();
}

describe('health server HTTP', () => {
  it('reads the request line, cutting the query, and refuses what is not HTTP/1.x', () => {
    expect(readRequestLine('GET /healthz?verbose=1 HTTP/1.1\r\nHost: x')).toEqual({
      method: 'GET',
      path: '/healthz',
    });
    expect(readRequestLine('HEAD /readyz HTTP/1.0')).toEqual({ method: 'HEAD', path: '/readyz' });
    expect(readRequestLine('PRI * HTTP/2.0')).toMatchObject({ status: 505 });
    for (const bad of ['', 'GET', 'GET /healthz', 'get /healthz HTTP/1.1', 'GET  / HTTP/1.1'])
      expect(readRequestLine(bad), bad).toMatchObject({ status: 400 });
  });

  it('writes a reply with its length, and a HEAD reply without the body', () => {
    const r = { status: 404, contentType: 'text/plain', body: 'nö\n' };
    const whole = replyBytes(r, false).toString('utf8');
    expect(whole).toBe(
      'HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: 4\r\ncache-control: no-store\r\nconnection: close\r\n\r\nnö\n',
    );
    expect(replyBytes(r, true).toString('utf8')).toBe(whole.slice(0, -'nö\n'.length));
  });

  it('answers fetch on every path: alive while starting, not ready yet, the metrics', async () => {
    const port = await serve(new DaemonProbe({ version: '0.0.0-test', resyncMs: 5_000 }));
    const base = `http://127.0.0.1:${port}`;
    const healthz = await fetch(`${base}/healthz`);
    const alive = await healthz.text();
    expect([healthz.status, alive]).toEqual([200, 'starting: starting\n']);
    const readyz = await fetch(`${base}/readyz`);
    expect(readyz.status).toBe(503);
    expect(await readyz.text()).toMatch(/starting/);
    const metrics = await fetch(`${base}/metrics`);
    expect(metrics.status).toBe(200);
    expect(metrics.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(await metrics.text()).toMatch(/^twill_ready 0$/m);
    const missing = await fetch(`${base}/nope`);
    expect([missing.status, await missing.text()]).toEqual([
      404,
      'not found: try /healthz, /readyz or /metrics\n',
    ]);
    const post = await fetch(`${base}/healthz`, { method: 'POST', body: 'x' });
    expect([post.status, post.headers.get('allow')]).toEqual([405, 'GET, HEAD']);
    const head = await fetch(`${base}/healthz`, { method: 'HEAD' });
    expect([head.status, head.headers.get('content-length'), await head.text()]).toEqual([
      200,
      String(Buffer.byteLength(alive)),
      '',
    ]);
  });

  it('reads a head that comes in pieces, and answers a bad request line with 400', async () => {
    const port = await serve(new DaemonProbe({ version: '0.0.0-test', resyncMs: 5_000 }));
    expect(await raw(port, 'GET /hea', 'lthz HTTP/1.1\r\nHo', 'st: x\r\n', '\r\n')).toMatch(
      /^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\nstarting: starting\n$/,
    );
    expect(await raw(port, '\u0000\u0001junk\r\n\r\n')).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(await raw(port, 'GET / HTTP/2.0\r\n\r\n')).toMatch(/^HTTP\/1\.1 505 /);
  });

  it('answers 500 and logs once when the probe fails', async () => {
    const log = captureLog();
    const failing = {
      facts: () => Promise.reject(new Error('probe broke')),
    } as unknown as DaemonProbe;
    const port = await serve(failing, log.logger);
    const r = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect([r.status, await r.text()]).toEqual([500, 'internal error\n']);
    expect(log.lines.filter((l) => l.msg === 'health endpoint failed')).toHaveLength(1);
  });
});

describe('health server connections', () => {
  it('closes a connection whose head trickles in past the deadline, however steadily', async () => {
    const port = await serve(
      new DaemonProbe({ version: '0.0.0-test', resyncMs: 5_000 }),
      undefined,
      {
        ...HEALTH_LIMITS,
        requestTimeoutMs: 400,
      },
    );
    const c = await open(port);
    const t0 = performance.now();
    // a byte every 50 ms: an idle timeout of 400 ms would never fire
    const drip = setInterval(() => c.socket.write('X'), 50);
    try {
      const closedIn = await Promise.race([
        c.closed.then(() => performance.now() - t0),
        new Promise<number>((r) => setTimeout(() => r(Infinity), 3_000)),
      ]);
      expect(closedIn).toBeGreaterThanOrEqual(350);
      expect(closedIn).toBeLessThan(3_000);
    } finally {
      clearInterval(drip);
    }
  });

  it('answers a client that shuts its side right after the request', async () => {
    // a probe that takes a while, as one that reads the kernel does: the reply comes after the
    // client's end has arrived
    const real = new DaemonProbe({ version: '0.0.0-test', resyncMs: 5_000 });
    const slow = {
      metrics: real.metrics,
      facts: async () => {
        await new Promise((r) => setTimeout(r, 100));
        return real.facts();
      },
    } as unknown as DaemonProbe;
    const port = await serve(slow);
    const c = await open(port);
    c.socket.end('GET /healthz HTTP/1.0\r\n\r\n');
    await c.closed;
    expect(c.data()).toMatch(/^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\nstarting: starting\n$/);
  });

  it('answers 400 to a client that shuts its side before the head is whole', async () => {
    const port = await serve(new DaemonProbe({ version: '0.0.0-test', resyncMs: 5_000 }));
    const c = await open(port);
    c.socket.end('GET /healthz HTTP/1.1\r\nHost: x\r\n');
    await c.closed;
    expect(c.data()).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
  });
});
