// The health endpoint (--healthz-ip:--healthz-port): GET /healthz (200
// while twill is not wedged, however long it waits; else 500 with the
// reason), /readyz (200 when ready, else 503 with the reason, e.g. what
// start-up waits for), /metrics (Prometheus text format). See health.ts.
//
// HTTP/1.1 over node:net, one request a connection (`connection: close`): a
// kubelet's probes and a Prometheus scraper need no more, and node:http would
// cost the daemon about 2 MiB of RSS (its modules and parser) for them
// (docs/benchmarks.md). The daemon already loads node:net for its stores.
import { createServer, type Socket } from 'node:net';
import { describeError, TwillError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { liveness, readiness } from './health.ts';
import type { DaemonProbe } from './probe.ts';

/** What the health server accepts: a kubelet's probes and a Prometheus scraper need far less. */
export const HEALTH_LIMITS = {
  maxConnections: 16,
  maxHeaderBytes: 8 * 1024,
  requestTimeoutMs: 10_000,
} as const;

/** HEALTH_LIMITS' fields (requestTimeoutMs: from a connection's start to its reply) */
export type HealthLimits = { readonly [K in keyof typeof HEALTH_LIMITS]: number };

const TEXT = 'text/plain; charset=utf-8';

const REASONS: Readonly<Record<number, string>> = {
  200: 'OK',
  400: 'Bad Request',
  404: 'Not Found',
  405: 'Method Not Allowed',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
  505: 'HTTP Version Not Supported',
};

export interface HealthReply {
  readonly status: number;
  readonly contentType: string;
  readonly body: string;
  readonly allow?: string;
}

const plain = (status: number, body: string): HealthReply => ({ status, contentType: TEXT, body });

/**
 * The request line of a request head ("GET /healthz HTTP/1.1" and its header lines): method and
 * path (the query cut off), or the reply it gets when it is not one this server reads.
 */
export function readRequestLine(
  head: string,
): { readonly method: string; readonly path: string } | HealthReply {
  const line = head.split('\r\n', 1)[0] ?? '';
  const m = /^([A-Z]{1,16}) (\S{1,2048}) HTTP\/(\d)\.(\d)$/.exec(line);
  if (!m) return plain(400, 'bad request\n');
  if (m[3] !== '1') return plain(505, 'HTTP/1.0 and HTTP/1.1 only\n');
  return { method: m[1] ?? '', path: (m[2] ?? '/').split('?')[0] ?? '/' };
}

async function answer(probe: DaemonProbe, method: string, path: string): Promise<HealthReply> {
  if (method !== 'GET' && method !== 'HEAD')
    return { ...plain(405, 'GET or HEAD only\n'), allow: 'GET, HEAD' };
  if (path === '/metrics') {
    const f = await probe.facts();
    probe.metrics.ready.set(readiness(f).ok ? 1 : 0);
    return {
      status: 200,
      contentType: probe.metrics.registry.contentType,
      body: await probe.metrics.registry.metrics(),
    };
  }
  if (path === '/healthz' || path === '/readyz') {
    const f = await probe.facts();
    const v = path === '/healthz' ? liveness(f) : readiness(f);
    if (path === '/readyz') probe.metrics.ready.set(v.ok ? 1 : 0);
    return plain(v.ok ? 200 : path === '/healthz' ? 500 : 503, `${v.reason}\n`);
  }
  return plain(404, 'not found: try /healthz, /readyz or /metrics\n');
}

/** The bytes of `reply` (HEAD: the head alone, its content-length still the body's). */
export function replyBytes(reply: HealthReply, head: boolean): Buffer {
  const body = Buffer.from(reply.body, 'utf8');
  const lines = [
    `HTTP/1.1 ${reply.status} ${REASONS[reply.status] ?? 'Unknown'}`,
    `content-type: ${reply.contentType}`,
    `content-length: ${body.length}`,
    ...(reply.allow === undefined ? [] : [`allow: ${reply.allow}`]),
    'cache-control: no-store',
    'connection: close',
  ];
  const top = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
  return head ? top : Buffer.concat([top, body]);
}

/** How long a connection stays open after its reply, for the client to read it and close. */
const LINGER_MS = 1_000;

/**
 * One connection: its request head (up to `limits.maxHeaderBytes`, within `limits.requestTimeoutMs`
 * of the connection's start however slowly it trickles in), one reply, then closed. Whatever
 * follows the head (a body, a second request) is not read. A client that half-closes after its
 * request still gets the reply.
 */
function serveConnection(
  socket: Socket,
  probe: DaemonProbe,
  logger: Logger,
  limits: HealthLimits,
): void {
  let received = Buffer.alloc(0);
  let headDone = false;
  // a deadline from the start, not an idle timeout: a byte every few seconds must not hold a slot
  const deadline = setTimeout(() => socket.destroy(), limits.requestTimeoutMs);
  socket.once('close', () => clearTimeout(deadline));
  socket.on('error', () => socket.destroy());
  const reply = (r: HealthReply, method: string): void => {
    if (socket.destroyed) return;
    socket.end(replyBytes(r, method === 'HEAD'), () => {
      setTimeout(() => socket.destroy(), LINGER_MS).unref();
    });
  };
  const onData = (chunk: Buffer): void => {
    received = Buffer.concat([received, chunk]);
    const end = received.indexOf('\r\n\r\n');
    if (end < 0 && received.length <= limits.maxHeaderBytes) return;
    headDone = true;
    socket.off('data', onData);
    if (end < 0 || end > limits.maxHeaderBytes) {
      reply(plain(431, 'request head too large\n'), 'GET');
      return;
    }
    const request = readRequestLine(received.subarray(0, end).toString('latin1'));
    received = Buffer.alloc(0);
    if ('status' in request) {
      reply(request, 'GET');
      return;
    }
    answer(probe, request.method, request.path).then(
      (r) => reply(r, request.method),
      (err: unknown) => {
        logger.warn({ err: describeError(err) }, 'health endpoint failed');
        reply(plain(500, 'internal error\n'), request.method);
      },
    );
  };
  socket.on('data', onData);
  // the client is done sending: without a whole head there is nothing to answer
  socket.on('end', () => {
    if (!headDone) reply(plain(400, 'incomplete request\n'), 'GET');
  });
}

/**
 * Serves until `signal` aborts; a port that cannot be bound is a start-up error naming the flags.
 */
export async function serveHealth(
  o: {
    ip: string;
    port: number;
    probe: DaemonProbe;
    logger: Logger;
    /** HEALTH_LIMITS unless given (tests shorten the timeout) */
    limits?: HealthLimits;
  },
  signal: AbortSignal,
): Promise<void> {
  const limits = o.limits ?? HEALTH_LIMITS;
  // probes and a scraper: small requests, few at a time; anything else is cut off, never queued
  const open = new Set<Socket>();
  // half-open allowed: a client that shuts its side after the request still gets the reply
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
    serveConnection(socket, o.probe, o.logger, limits);
  });
  server.maxConnections = limits.maxConnections;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) =>
      reject(
        new TwillError(
          'FLAG_INVALID',
          `--healthz-ip ${o.ip} --healthz-port ${o.port}: cannot listen: ${err.message}`,
        ),
      ),
    );
    server.listen(o.port, o.ip, () => resolve());
  });
  // listening: a later error (out of file descriptors, say) costs that connection, not the daemon
  server.on('error', (err) => o.logger.warn({ err: describeError(err) }, 'health endpoint failed'));
  o.logger.info(
    { address: `http://${o.ip}:${o.port}` },
    'health endpoint listening (/healthz, /readyz, /metrics)',
  );
  await new Promise<void>((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
  for (const s of open) s.destroy();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
