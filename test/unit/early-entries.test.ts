// The early writer (src/dataplane/early.ts) against a fake kernel reader and batch feeder: on a
// cold node it starts its batch at once, feeds each chunk's routes as they come and logs them once;
// on a warm one it feeds, renders and keeps nothing; and when the acquisition fails after the
// routes went in, it deletes exactly those routes again.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { bareVxlanDevice } from '../../src/dataplane/desired.ts';
import { EarlyEntries, isCold } from '../../src/dataplane/early.ts';
import type { Feeder, Runner } from '../../src/exec/runner.ts';
import { encodeLeaseValue } from '../../src/lease/codec.ts';
import { EarlyPeers } from '../../src/lease/early-peers.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import type { LeaseRecord } from '../../src/lease/types.ts';
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
const VXLAN = parseNetConfig('{"Network":"10.50.0.0/16","Backend":{"Type":"vxlan"}}');
const OUR_MAC = '0e:00:00:00:00:01';
const store = new KvLeaseStore({ kv: new MemoryKv(), prefix: '/n' });
const peerMac = (n: number): string => `0e:00:00:00:01:${n.toString(16).padStart(2, '0')}`;

/** `count` peers from 10.50.<from>.0/24 on; vxlan ones with a VtepMAC each (`mac`, by number). */
function records(
  from: number,
  count: number,
  o: { vxlan?: boolean; mac?: (n: number) => string } = {},
): LeaseRecord[] {
  const mac = o.mac ?? peerMac;
  return Array.from({ length: count }, (_, i) =>
    store.decode({
      key: `/n/subnets/10.50.${from + i}.0-24`,
      value: encodeLeaseValue({
        publicIp: `192.168.50.${from + i}`,
        publicIpv6: null,
        ...(o.vxlan === true
          ? { backendType: 'vxlan', backendData: { vni: 1, vtepMac: mac(from + i) } }
          : { backendType: 'host-gw', backendData: null }),
      }),
      modRevision: String(from + i),
      createRevision: String(from + i),
    }),
  );
}

/**
 * A writer whose kernel holds `existing` routes of twill's (and `links`, `ip -o link show`'s
 * lines); with `vxlan`, twill.1's. What it ran and fed (`files`: which program each batch fed) is
 * recorded; `failDevice`: making the device fails.
 */
function writer(
  existing: string,
  o: { vxlan?: boolean; links?: string; failDevice?: boolean } = {},
) {
  const ran: { cmd: string; input?: string }[] = [];
  const fed: string[] = [];
  const files: string[] = [];
  const log = captureLog();
  const runner: Runner = async (file, args, opts) => {
    ran.push({ cmd: [file, ...args].join(' '), ...(opts?.input ? { input: opts.input } : {}) });
    if (o.failDevice && opts?.input?.startsWith('link add'))
      throw new Error('RTNETLINK answers: File exists');
    const shown = args.includes('link') ? (o.links ?? '') : existing;
    return { stdout: args.includes('show') ? shown : '', stderr: '' };
  };
  const feed: Feeder = (file) => {
    let text = '';
    fed.push('');
    files.push(file);
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
  const config = o.vxlan === true ? VXLAN : CONFIG;
  const backend = config.backend;
  const vxlan =
    backend.type === 'vxlan'
      ? bareVxlanDevice(backend, { choice: CHOICE, local: CHOICE.ifaceIp, mac: OUR_MAC, family: 4 })
      : null;
  const early = new EarlyEntries({
    runner,
    feed,
    cold: isCold({
      runner,
      logger: log.logger,
      signal,
      v4: true,
      v6: false,
      devices: vxlan ? [vxlan.name] : [],
    }),
    peers: new EarlyPeers({
      config,
      self: null,
      selfPublicIp: '192.168.50.1',
      ...(vxlan ? { selfVtepMac: OUR_MAC } : {}),
      underlay: CHOICE.iface,
    }),
    setup: { choice: CHOICE, backend, v4: true, v6: false, vxlan, vxlan6: null },
    logger: log.logger,
    signal,
  });
  return { early, ran, fed, files, log };
}

const keysOf = (r: readonly LeaseRecord[]): string[] => r.map((x) => x.key);

describe('EarlyEntries', () => {
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
        (n) => `route add 10.50.${n}.0/24 via 192.168.50.${n} dev eth0 proto 151`,
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
    expect(w.fed).toEqual(['route add 10.50.10.0/24 via 192.168.50.10 dev eth0 proto 151\n']);
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
      [10, 11, 12].map((n) => `route add 10.50.${n}.0/24 via 192.168.50.${n} dev eth0 proto 151`),
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
        'route del 10.50.10.0/24 via 192.168.50.10 dev eth0 proto 151',
        'route del 10.50.11.0/24 via 192.168.50.11 dev eth0 proto 151',
      ],
    ]);
    expect(w.log.lines.map((l) => l.msg)).toContain(
      'acquiring the lease failed: the entries written early are deleted again',
    );
    expect(w.log.lines.filter((l) => l.msg === 'dataplane written early')).toEqual([]);
  });

  it("with vxlan, makes the device first, then writes each clear peer's entries once the listing ends", async () => {
    const w = writer('', { vxlan: true });
    // 10.50.12 and 10.50.13 claim one VtepMAC, 10.50.12 first: 10.50.13 is left to the pass
    const r = records(10, 4, { vxlan: true, mac: (n) => peerMac(n === 13 ? 12 : n) });
    expect(w.early.begin(undefined)).toBe(true);
    w.early.take(r.slice(0, 2));
    w.early.take(r.slice(2), { last: true });
    w.early.end();
    await w.early.done();
    expect(w.ran.map((c) => c.cmd)).toEqual([
      'ip -o link show',
      'ip -4 route show proto 151',
      'ip -batch -',
    ]);
    expect(w.ran[2]?.input?.trim().split('\n')).toEqual([
      'link add twill.1 mtu 1450 address 0e:00:00:00:00:01 type vxlan id 1 local 192.168.50.1 dev eth0 dstport 8472 nolearning',
      'link set twill.1 up',
    ]);
    expect(w.files).toEqual(['ip', 'bridge']);
    const peers = [10, 11, 12];
    expect(w.fed[0]?.trim().split('\n')).toEqual(
      peers.flatMap((n) => [
        `neigh replace 10.50.${n}.0 lladdr ${peerMac(n)} dev twill.1 nud permanent`,
        `route add 10.50.${n}.0/24 via 10.50.${n}.0 dev twill.1 onlink proto 151`,
      ]),
    );
    expect(w.fed[1]?.trim().split('\n')).toEqual(
      peers.map((n) => `fdb append ${peerMac(n)} dev twill.1 dst 192.168.50.${n} self permanent`),
    );
    expect(w.log.lines.find((l) => l.msg === 'dataplane written early')?.ops).toEqual({
      'link add': 1,
      'link change': 1,
      'route add': 3,
      'neigh add': 3,
      'fdb add': 3,
    });
  });

  it('with vxlan, writes nothing on a node that has the device, or when it cannot be made', async () => {
    const warm = writer('', {
      vxlan: true,
      links: '1: lo: <LOOPBACK,UP> mtu 65536\n7: twill.1: <BROADCAST,MULTICAST> mtu 1450\n',
    });
    const cantMake = writer('', { vxlan: true, failDevice: true });
    for (const w of [warm, cantMake]) {
      w.early.begin(undefined);
      await new Promise((resolve) => setImmediate(resolve));
      w.early.take(records(10, 2, { vxlan: true }), { last: true });
      w.early.end();
      await w.early.done();
      expect(w.fed.every((text) => text === '')).toBe(true);
      expect(w.log.lines.filter((l) => l.msg === 'dataplane written early')).toEqual([]);
    }
    expect(warm.ran.map((c) => c.cmd)).not.toContain('ip -batch -');
    // another device's name that starts like ours is not ours
    const other = writer('', { vxlan: true, links: '7: twill.10: <BROADCAST> mtu 1450\n' });
    other.early.begin(undefined);
    other.early.take(records(10, 1, { vxlan: true }), { last: true });
    await other.early.done();
    expect(other.fed[0]).toContain('route add 10.50.10.0/24');
  });

  it('with vxlan, deletes the device it made (and its entries with it) when the acquisition fails', async () => {
    const w = writer('', { vxlan: true });
    w.early.begin(undefined);
    w.early.take(records(10, 2, { vxlan: true }), { last: true });
    w.early.end({ failed: true });
    await w.early.done();
    const deletes = w.ran.filter((c) => c.cmd === 'ip -force -batch -');
    expect(deletes.map((c) => c.input?.trim().split('\n'))).toEqual([['link del twill.1']]);
  });
});
