// The health endpoint (--healthz-ip:--healthz-port): GET /healthz (200
// while twill is not wedged, however long it waits; else 500 with the
// reason), /readyz (200 when ready, else 503 with the reason, e.g. what
// start-up waits for), /metrics (Prometheus text format). See health.ts.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { describeError, TwillError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { liveness, readiness } from './health.ts';
import type { DaemonProbe } from './probe.ts';

async function answer(
  probe: DaemonProbe,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const path = (req.url ?? '/').split('?')[0];
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { allow: 'GET, HEAD' }).end();
    return;
  }
  if (path === '/metrics') {
    const f = await probe.facts();
    probe.metrics.ready.set(readiness(f).ok ? 1 : 0);
    res
      .writeHead(200, { 'content-type': probe.metrics.registry.contentType })
      .end(await probe.metrics.registry.metrics());
    return;
  }
  if (path === '/healthz' || path === '/readyz') {
    const f = await probe.facts();
    const v = path === '/healthz' ? liveness(f) : readiness(f);
    if (path === '/readyz') probe.metrics.ready.set(v.ok ? 1 : 0);
    res
      .writeHead(v.ok ? 200 : path === '/healthz' ? 500 : 503, {
        'content-type': 'text/plain; charset=utf-8',
      })
      .end(`${v.reason}\n`);
    return;
  }
  res
    .writeHead(404, { 'content-type': 'text/plain; charset=utf-8' })
    .end('not found: try /healthz, /readyz or /metrics\n');
}

/** What the health server accepts: a kubelet's probes and a Prometheus scraper need far less. */
export const HEALTH_LIMITS = {
  maxConnections: 16,
  maxHeaderBytes: 8 * 1024,
  requestTimeoutMs: 10_000,
} as const;

/**
 * Serves until `signal` aborts; a port that cannot be bound is a start-up error naming the flags.
 */
export async function serveHealth(
  o: { ip: string; port: number; probe: DaemonProbe; logger: Logger },
  signal: AbortSignal,
): Promise<void> {
  // probes and a scraper: small requests, few at a time; anything else is cut off, never queued
  const server = createServer(
    {
      maxHeaderSize: HEALTH_LIMITS.maxHeaderBytes,
      requestTimeout: HEALTH_LIMITS.requestTimeoutMs,
      headersTimeout: HEALTH_LIMITS.requestTimeoutMs,
      keepAliveTimeout: 5_000,
    },
    (req, res) => {
      answer(o.probe, req, res).catch((err: unknown) => {
        o.logger.warn({ err: describeError(err) }, 'health endpoint failed');
        if (!res.headersSent) res.writeHead(500).end('internal error\n');
      });
    },
  );
  server.maxConnections = HEALTH_LIMITS.maxConnections;
  server.maxRequestsPerSocket = 100;
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
  o.logger.info(
    { address: `http://${o.ip}:${o.port}` },
    'health endpoint listening (/healthz, /readyz, /metrics)',
  );
  await new Promise<void>((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
