// Free TCP ports on loopback for test servers (etcd, proxies), and waiting
// with a bound.
import { createServer } from 'node:net';
import { SLOW_MACHINE_FACTOR } from '../../lab/drill-kit.ts';

/**
 * A test's bound for something promised within `ms`: loose enough for a
 * machine ten times slower than a fast day, since tests check that it
 * happens and the bench and the drill table check how fast.
 */
export function slowBound(ms: number): number {
  return ms * SLOW_MACHINE_FACTOR;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** Polls `check` every 50 ms until it returns true or `timeoutMs` passes. */
export async function waitFor(
  check: () => Promise<boolean> | boolean,
  opts: { timeoutMs: number; what: string },
): Promise<number> {
  const start = Date.now();
  for (;;) {
    if (await check()) return Date.now() - start;
    if (Date.now() - start > opts.timeoutMs)
      throw new Error(`timed out after ${opts.timeoutMs} ms waiting for ${opts.what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
