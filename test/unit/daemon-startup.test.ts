// The daemon's start-up as its health endpoint shows it, with a store that
// keeps it waiting (no kernel is touched before the lease, so no namespace
// is needed): waiting ten minutes for the lease (our Node has no podCIDR yet)
// is alive and not ready, with the reason, because every retry is a sign of
// life; a store call that never returns stops those signs and is not alive.
// Only Date is faked, to move the clock by minutes; the retries' timers are
// real.
import { request } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { runDaemon } from '../../src/daemon.ts';
import { TwillError } from '../../src/errors.ts';
import type { Runner } from '../../src/exec/runner.ts';
import { STARTUP_STALL_MS } from '../../src/health/health.ts';
import type { Lease, LeaseStore } from '../../src/lease/types.ts';
import { captureLog } from '../helpers/log.ts';
import { freePort } from '../../lab/kit/ports.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const NO_POD_CIDR =
  'node n1 has no IPv4 spec.podCIDR yet: the controller-manager must allocate node CIDRs (kube-controller-manager --allocate-node-cidrs=true --cluster-cidr=10.244.0.0/16), or set spec.podCIDR when creating the Node; twill waits for it';
const IP_ADDR = JSON.stringify([
  {
    ifindex: 2,
    ifname: 'eth0',
    mtu: 1500,
    address: '02:fc:00:00:00:01',
    addr_info: [{ family: 'inet', local: '192.0.2.2', prefixlen: 24 }],
  },
]);

/**
 * `ip -json -4 addr show` is all start-up runs before the lease; anything else would be a bug here.
 */
const runner: Runner = async (file, args) => {
  if (file === 'ip' && args.join(' ') === '-json -4 addr show')
    return { stdout: IP_ADDR, stderr: '' };
  throw new Error(`unexpected command before the lease: ${file} ${args.join(' ')}`);
};

/** A store with a config, whose acquireLease is `acquire` (counting the attempts). */
function storeWith(
  acquire: (signal: AbortSignal) => Promise<Lease>,
): LeaseStore & { attempts: () => number } {
  let attempts = 0;
  const never = (): Promise<never> => Promise.reject(new Error('not reached before the lease'));
  return {
    description: 'test store',
    anySubnetSize: true,
    attempts: () => attempts,
    getNetworkConfig: async () =>
      parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}'),
    acquireLease: (_req, signal) => {
      attempts++;
      return acquire(signal);
    },
    renewLease: never,
    reclaimLease: never,
    watchLeases: never,
    close: async () => undefined,
  };
}

let dir: string;
beforeAll(async () => (dir = await mkdtemp(join(tmpdir(), 'twill-startup-'))));
afterAll(() => rm(dir, { recursive: true, force: true }));
afterEach(() => vi.useRealTimers());

/** Starts the daemon with its health endpoint; the clock is frozen at `t0` (Date only). */
async function start(
  store: LeaseStore,
  t0: number,
): Promise<{ get: (path: string) => Promise<{ status: number; body: string }> }> {
  vi.useFakeTimers({ toFake: ['Date'] });
  vi.setSystemTime(t0);
  const port = await freePort();
  const ctl = new AbortController();
  const done = runDaemon(
    {
      store,
      runner,
      watch: () => Promise.reject(new Error('no monitors before the lease')),
      logger: captureLog().logger,
      ensureForwarding: async () => false,
      bridgeNetfilterProblem: async () => undefined,
    },
    {
      nodeName: 'n1',
      iface: { iface: ['eth0'], ifaceRegex: [], publicIp: undefined },
      subnetFile: join(dir, 'subnet.env'),
      renewMarginMs: 3_600_000,
      ipMasq: false,
      resyncMs: 5_000,
      healthz: { ip: '127.0.0.1', port },
    },
    ctl.signal,
  );
  onTestFinished(async () => {
    ctl.abort();
    await done.catch(() => undefined);
  });
  const get = (path: string): Promise<{ status: number; body: string }> =>
    new Promise((resolve, reject) => {
      request({ host: '127.0.0.1', port, path, agent: false }, (res) => {
        let body = '';
        res
          .setEncoding('utf8')
          .on('data', (c: string) => (body += c))
          .on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
        .on('error', reject)
        .end();
    });
  await waitFor(
    () =>
      get('/healthz').then(
        () => true,
        () => false,
      ),
    { timeoutMs: 5_000, what: 'health endpoint' },
  );
  return { get };
}

describe('start-up health', () => {
  it('waiting ten minutes for our podCIDR, retrying all along, is alive and not ready with the reason', async () => {
    const t0 = Date.now();
    const store = storeWith(() => Promise.reject(new TwillError('STORE_UNAVAILABLE', NO_POD_CIDR)));
    const { get } = await start(store, t0);
    await waitFor(() => store.attempts() >= 2, { timeoutMs: 10_000, what: 'a retry' });
    expect(await get('/readyz')).toEqual({
      status: 503,
      body: expect.stringMatching(
        /^starting: acquiring lease; \d+ attempt\(s\) failed in 0 s, the last: node n1 has no IPv4 spec\.podCIDR yet/,
      ),
    });

    // ten minutes on: the wait is as it was (a restart would not allocate a podCIDR), and the
    // retries go on
    vi.setSystemTime(t0 + 600_000);
    const before = store.attempts();
    await waitFor(() => store.attempts() > before + 1, {
      timeoutMs: 15_000,
      what: 'retries after ten minutes',
    });
    expect(await get('/healthz')).toEqual({
      status: 200,
      body: expect.stringMatching(
        /^starting: acquiring lease for 600 s, \d+ attempt\(s\) failed, the last 0 s ago\n$/,
      ),
    });
    const ready = await get('/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body).toMatch(
      /^starting: acquiring lease; \d+ attempt\(s\) failed in 600 s, the last: node n1 has no IPv4 spec\.podCIDR yet/,
    );
  });

  it('a store call that never returns stops the heartbeat: not alive once start-up shows no progress for too long', async () => {
    const t0 = Date.now();
    const store = storeWith(
      (signal) =>
        new Promise((_, reject) =>
          signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true }),
        ),
    );
    const { get } = await start(store, t0);
    await waitFor(() => store.attempts() === 1, { timeoutMs: 5_000, what: 'the hung call' });
    expect(await get('/healthz')).toEqual({ status: 200, body: 'starting: acquiring lease\n' });
    vi.setSystemTime(t0 + STARTUP_STALL_MS + 1_000);
    expect(await get('/healthz')).toEqual({
      status: 500,
      body: 'start-up is hung: acquiring lease for 121 s, no progress for 121 s\n',
    });
    expect(await get('/readyz')).toEqual({ status: 503, body: 'starting: acquiring lease\n' });
  });
});
