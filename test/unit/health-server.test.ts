// The health server's limits (issue: a node-local endpoint must not be a
// way to exhaust the daemon): headers past 8 KiB are refused with 431 before
// any handler runs, and connections past 16 are closed at once while the
// first 16 stay open. No request reaches the probe here.
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { HEALTH_LIMITS, serveHealth } from '../../src/health/server.ts';
import type { DaemonProbe } from '../../src/health/probe.ts';
import { captureLog } from '../helpers/log.ts';
import { freePort } from '../../lab/kit/ports.ts';

let ctl = new AbortController();
const sockets: Socket[] = [];
afterEach(() => {
  for (const s of sockets) s.destroy();
  ctl.abort();
  ctl = new AbortController();
});

async function serve(): Promise<number> {
  const port = await freePort();
  void serveHealth(
    { ip: '127.0.0.1', port, probe: {} as DaemonProbe, logger: captureLog().logger },
    ctl.signal,
  );
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
