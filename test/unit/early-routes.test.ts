// The early writer (src/dataplane/early.ts) against a fake kernel reader and batch feeder: on a
// cold node it starts its batch at once, feeds each chunk's routes as they come and logs them once;
// on a warm one it feeds, renders and keeps nothing; and when the acquisition fails after the
// routes went in, it deletes exactly those routes again.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { EarlyRoutes, holdsNoRoutes } from '../../src/dataplane/early.ts';
import type { Feeder, Runner } from '../../src/exec/runner.ts';
import { encodeLeaseValue } from '../../src/lease/codec.ts';
import { EarlyPeers } from '../../src/lease/early-peers.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import type { LeaseRecord } from '../../src/lease/types.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { captureLog } from '../helpers/log.ts';

const CONFIG = parseNetConfig('{"Network":"10.50.0.0/16","Backend":{"Type":"host-gw"}}');
const CHOICE = {
  iface: {
    name: 'eth0',
    mtu: 1500,
    mac: '02:00:00:00:00:01',
    addrs: ['192.168.50.1'],
    networks: ['192.168.50.1/24'],
  },
  ifaceIp: '192.168.50.1',
  publicIp: '192.168.50.1',
};
const store = new KvLeaseStore({ kv: new MemoryKv(), prefix: '/n' });

function records(from: number, count: number): LeaseRecord[] {
  return Array.from({ length: count }, (_, i) =>
    store.decode({
      key: `/n/subnets/10.50.${from + i}.0-24`,
      value: encodeLeaseValue({
        publicIp: `192.168.50.${from + i}`,
        publicIpv6: null,
        backendType: 'host-gw',
        backendData: null,
      }),
      modRevision: String(from + i),
      createRevision: String(from + i),
    }),
  );
}

/** A writer whose kernel holds `existing` routes of twill's; what it ran and fed is recorded. */
function writer(existing: string) {
  const ran: { cmd: string; input?: string }[] = [];
  const fed: string[] = [];
  const log = captureLog();
  const runner: Runner = async (file, args, opts) => {
    ran.push({ cmd: [file, ...args].join(' '), ...(opts?.input ? { input: opts.input } : {}) });
    return { stdout: args.includes('show') ? existing : '', stderr: '' };
  };
  const feed: Feeder = () => {
    let text = '';
    fed.push('');
    const index = fed.length - 1;
    const done = Promise.resolve({ stdout: '', stderr: '' });
    return {
      write: (t) => void (fed[index] = text += t),
      end: async (t) => {
        fed[index] = text += t ?? '';
        return done;
      },
      done,
    };
  };
  const signal = new AbortController().signal;
  const early = new EarlyRoutes({
    runner,
    feed,
    cold: holdsNoRoutes({ runner, logger: log.logger, signal, v4: true, v6: false }),
    peers: new EarlyPeers({
      config: CONFIG,
      self: null,
      selfPublicIp: '192.168.50.1',
      underlay: CHOICE.iface,
    }),
    setup: {
      choice: CHOICE,
      backend: CONFIG.backend,
      v4: true,
      v6: false,
      vxlan: null,
      vxlan6: null,
    },
    logger: log.logger,
    signal,
  });
  return { early, ran, fed, log };
}

const keysOf = (r: readonly LeaseRecord[]): string[] => r.map((x) => x.key);

describe('EarlyRoutes', () => {
  it('feeds a cold node every chunk as it comes, in one batch, and logs the routes once', async () => {
    const w = writer('');
    const [a, b] = [records(10, 3), records(20, 2)];
    expect(w.early.begin(keysOf([...a, ...b]))).toBe(true);
    w.early.take(a);
    await Promise.resolve();
    w.early.take(b);
    w.early.end();
    await w.early.done();
    expect(w.fed).toHaveLength(1);
    expect(w.fed[0]?.trim().split('\n')).toEqual([
      ...[10, 11, 12, 20, 21].map(
        (n) =>
          `route add 10.50.${n}.0/24 via 192.168.50.${n} dev eth0 proto 151 metric ${668160 + n}`,
      ),
    ]);
    const lines = w.log.lines.filter((l) => l.msg === 'dataplane written early');
    expect(lines.map((l) => l.ops)).toEqual([{ 'route add': 5 }]);
    // a later try streams nothing
    expect(w.early.begin(['10.50.30.0-24'])).toBe(false);
  });

  it('starts its batch once the node is found cold, before the first route comes', async () => {
    const w = writer('');
    w.early.begin([]);
    await new Promise((resolve) => setImmediate(resolve));
    expect(w.ran.map((c) => c.cmd)).toEqual(['ip -4 route show proto 151']);
    expect(w.fed).toEqual(['']);
    w.early.take(records(10, 1));
    w.early.end();
    await w.early.done();
    expect(w.fed).toEqual([
      'route add 10.50.10.0/24 via 192.168.50.10 dev eth0 proto 151 metric 668170\n',
    ]);
  });

  it('in key order, writes the held last record when told the listing ended, and a route told again once', async () => {
    const w = writer('');
    expect(w.early.begin(undefined)).toBe(true);
    w.early.take(records(10, 2));
    // the list started over at a fresh revision: the same records again, and one more
    expect(w.early.begin(undefined)).toBe(true);
    w.early.take(records(10, 3));
    w.early.take([], { last: true });
    w.early.end();
    await w.early.done();
    expect(w.fed[0]?.trim().split('\n')).toEqual(
      [10, 11, 12].map(
        (n) =>
          `route add 10.50.${n}.0/24 via 192.168.50.${n} dev eth0 proto 151 metric ${668160 + n}`,
      ),
    );
    expect(w.log.lines.find((l) => l.msg === 'dataplane written early')?.ops).toEqual({
      'route add': 3,
    });
  });

  it('on a warm node feeds, renders and keeps nothing', async () => {
    const w = writer('10.50.10.0/24 via 192.168.50.10 dev eth0 proto 151\n');
    const r = records(10, 3);
    w.early.begin(keysOf(r));
    // the cold check has answered: nothing of the chunk is kept
    await new Promise((resolve) => setImmediate(resolve));
    w.early.take(r);
    expect(w.early.written).toEqual([]);
    w.early.end();
    await w.early.done();
    expect(w.fed).toEqual([]);
    expect(w.log.lines.filter((l) => /early/.test(l.msg))).toEqual([]);
  });

  it('deletes them when a later try fails, after the try that took the listing ended well', async () => {
    const w = writer('');
    const r = records(10, 2);
    w.early.begin(keysOf(r));
    w.early.take(r);
    // the try that took the listing lost a race for its subnet; the next one threw
    w.early.end();
    await waitFor(() => w.log.lines.some((l) => l.msg === 'dataplane written early'), {
      timeoutMs: 5_000,
      what: 'the batch logged',
      everyMs: 1,
    });
    w.early.end({ failed: true });
    await w.early.done();
    expect(w.log.lines.map((l) => l.msg)).toContain('dataplane written early');
    const deletes = () => w.ran.filter((c) => c.cmd === 'ip -force -batch -');
    expect(deletes().map((c) => c.input?.trim().split('\n'))).toEqual([
      [
        'route del 10.50.10.0/24 via 192.168.50.10 dev eth0 proto 151 metric 668170',
        'route del 10.50.11.0/24 via 192.168.50.11 dev eth0 proto 151 metric 668171',
      ],
    ]);
    // once the lease is ours (done), nothing more is taken back
    w.early.end({ failed: true });
    await w.early.done();
    expect(deletes()).toHaveLength(1);
  });

  it('deletes the routes it wrote when the acquisition fails after them', async () => {
    const w = writer('');
    const r = records(10, 2);
    w.early.begin(keysOf(r));
    w.early.take(r);
    w.early.end({ failed: true });
    await w.early.done();
    const deletes = w.ran.filter((c) => c.cmd === 'ip -force -batch -');
    expect(deletes.map((c) => c.input?.trim().split('\n'))).toEqual([
      [
        'route del 10.50.10.0/24 via 192.168.50.10 dev eth0 proto 151 metric 668170',
        'route del 10.50.11.0/24 via 192.168.50.11 dev eth0 proto 151 metric 668171',
      ],
    ]);
    expect(w.log.lines.map((l) => l.msg)).toContain(
      'acquiring the lease failed: the routes written early are deleted again',
    );
    expect(w.log.lines.filter((l) => l.msg === 'dataplane written early')).toEqual([]);
  });
});
