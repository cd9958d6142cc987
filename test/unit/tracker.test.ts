// PeerTracker's peer set: a peer missing from a re-list lingers (an etcd
// wipe must not drop routes while nodes re-register), comes back with its
// record, leaves after the grace time; an explicit delete removes at once.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { decodeLeaseValue } from '../../src/lease/codec.ts';
import { PeerTracker } from '../../src/lease/tracker.ts';
import { peerRecord, type LeaseRecord } from '../../src/lease/types.ts';
import { formatCidr, parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { formatCidr6, parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
import { peerLease } from '../helpers/dataplane.ts';
import { captureLog } from '../helpers/log.ts';

/** An IPv4 subnet as text; null for none (an IPv6-only lease). */
const cidrText = (c: Cidr | null): string | null => (c ? formatCidr(c) : null);

const record = (n: number): LeaseRecord => {
  const lease = peerLease(n, { vxlan: true });
  return { key: lease.key, ok: true, lease };
};
const SELF = record(3);
const NO_ATTRS = {
  publicIp: '',
  publicIpv6: null,
  backendType: 'host-gw',
  backendData: null,
} as const;

function tracker(
  lingerMs: number,
  deleteLingerMs = 0,
): { t: PeerTracker; changes: () => number; lost: string[] } {
  let changes = 0;
  const lost: string[] = [];
  const t = new PeerTracker({
    context: {
      config: parseNetConfig('{"Network":"10.244.0.0/16"}'),
      self: SELF.ok ? SELF.lease.subnet : undefined,
    },
    selfKey: SELF.key,
    selfAttrs: () =>
      SELF.ok
        ? SELF.lease.attrs
        : { publicIp: '', publicIpv6: null, backendType: 'host-gw', backendData: null },
    logger: captureLog().logger,
    onSelfLost: (why) => lost.push(why),
    lingerMs,
    deleteLingerMs,
  });
  t.subscribe(() => changes++);
  return { t, changes: () => changes, lost };
}
const keys = (t: PeerTracker): string[] =>
  t
    .list()
    .map((l) => l.key)
    .sort();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('PeerTracker', () => {
  it('keeps a peer missing from a re-list until the grace time is up', async () => {
    const { t, changes } = tracker(80);
    t.handle({ type: 'snapshot', records: [SELF, record(1), record(2)], reason: 'initial list' });
    expect(keys(t)).toEqual(['10.244.1.0-24', '10.244.2.0-24']);
    const before = changes();
    t.handle({
      type: 'snapshot',
      records: [SELF, record(1)],
      reason: 'wiped: revision went backwards',
    });
    expect(keys(t)).toEqual(['10.244.1.0-24', '10.244.2.0-24']);
    expect(changes()).toBe(before);
    await sleep(200);
    expect(keys(t)).toEqual(['10.244.1.0-24']);
    expect(changes()).toBe(before + 1);
  });

  it('keeps a lingering peer that registers again', async () => {
    const { t, changes } = tracker(80);
    t.handle({ type: 'snapshot', records: [SELF, record(1)], reason: 'initial list' });
    t.handle({ type: 'snapshot', records: [SELF], reason: 'reconnected' });
    const before = changes();
    t.handle({ type: 'put', record: record(1) });
    await sleep(200);
    expect(keys(t)).toEqual(['10.244.1.0-24']);
    expect(changes()).toBe(before);
  });

  it('keeps a deleted peer briefly: re-created in time it never left, else it leaves when the short grace ends', async () => {
    const { t, changes } = tracker(10_000, 80);
    t.handle({ type: 'snapshot', records: [SELF, record(1), record(2)], reason: 'initial list' });
    const before = changes();
    t.handle({ type: 'delete', key: '10.244.1.0-24' });
    t.handle({ type: 'delete', key: '10.244.2.0-24' });
    t.handle({ type: 'put', record: record(1) }); // its node re-created the key at once
    expect(keys(t)).toEqual(['10.244.1.0-24', '10.244.2.0-24']);
    await sleep(200);
    expect(keys(t)).toEqual(['10.244.1.0-24']);
    expect(changes()).toBe(before + 1);
  });

  it('shortens a re-list linger when the peer is then deleted by an event', async () => {
    const { t } = tracker(10_000, 80);
    t.handle({ type: 'snapshot', records: [SELF, record(1)], reason: 'initial list' });
    t.handle({ type: 'snapshot', records: [SELF], reason: 'reconnected' });
    t.handle({ type: 'delete', key: '10.244.1.0-24' });
    await sleep(200);
    expect(keys(t)).toEqual([]);
  });

  it('drops a peer at once on a delete event, lingering or not, and at once on re-list with lingerMs 0', () => {
    const { t } = tracker(10_000);
    t.handle({ type: 'snapshot', records: [SELF, record(1), record(2)], reason: 'initial list' });
    t.handle({ type: 'delete', key: '10.244.1.0-24' });
    t.handle({ type: 'snapshot', records: [SELF], reason: 'reconnected' });
    t.handle({ type: 'delete', key: '10.244.2.0-24' });
    expect(keys(t)).toEqual([]);
    const quick = tracker(0).t;
    quick.handle({ type: 'snapshot', records: [SELF, record(1)], reason: 'initial list' });
    quick.handle({ type: 'snapshot', records: [SELF], reason: 'compacted' });
    expect(keys(quick)).toEqual([]);
  });

  it('reports our own record as lost when its attributes are rewritten, not when they are ours', () => {
    const { t, lost } = tracker(0);
    t.handle({ type: 'snapshot', records: [SELF, record(1)], reason: 'initial list' });
    t.handle({ type: 'put', record: SELF });
    expect(lost).toEqual([]);
    if (!SELF.ok) throw new Error('SELF is a valid record');
    const rewritten = {
      ...SELF.lease,
      attrs: { ...SELF.lease.attrs, backendData: { vni: 1, vtepMac: '02:99:99:99:99:99' } },
    };
    t.handle({ type: 'put', record: { key: SELF.key, ok: true, lease: rewritten } });
    expect(lost).toEqual([expect.stringContaining('02:99:99:99:99:99')]);
    t.handle({
      type: 'put',
      record: {
        key: SELF.key,
        ok: true,
        lease: { ...SELF.lease, attrs: { ...SELF.lease.attrs, publicIp: '192.0.2.99' } },
      },
    });
    expect(lost[1]).toContain('now names PublicIP 192.0.2.99');
    expect(keys(t)).toEqual(['10.244.1.0-24']);
  });

  it('tells its listeners of a refusal and of its end, also when the admitted set stays the same', () => {
    const { t } = tracker(0);
    const told: boolean[] = [];
    t.subscribe((peersChanged) => told.push(peersChanged));
    t.handle({ type: 'snapshot', records: [SELF, record(1)], reason: 'initial list' });
    expect(told).toEqual([true]);
    // a record that is not JSON: refused, the admitted set unchanged, the refusal still published
    t.handle({ type: 'put', record: { key: '10.244.9.0-24', ok: false, reason: 'not JSON' } });
    expect(told).toEqual([true, false]);
    expect([...t.skipped().keys()]).toEqual(['10.244.9.0-24']);
    // the same refusal again: nothing new to tell
    t.handle({ type: 'put', record: { key: '10.244.9.0-24', ok: false, reason: 'not JSON' } });
    expect(told).toEqual([true, false]);
    t.handle({ type: 'delete', key: '10.244.9.0-24' });
    expect(told).toEqual([true, false, false]);
    expect(t.skipped().size).toBe(0);
    expect(keys(t)).toEqual(['10.244.1.0-24']);
  });

  it('refuses a peer whose subnet covers others (Kubernetes podCIDRs), logs it once, admits the rest', () => {
    const log = captureLog();
    const t = new PeerTracker({
      context: {
        config: parseNetConfig('{"Network":"10.244.0.0/16"}'),
        self: SELF.ok ? SELF.lease.subnet : undefined,
        anySubnetSize: true,
      },
      selfKey: SELF.key,
      selfAttrs: () => (SELF.ok ? SELF.lease.attrs : NO_ATTRS),
      logger: log.logger,
      onSelfLost: () => undefined,
      lingerMs: 0,
      deleteLingerMs: 0,
    });
    const four = record(4);
    // 10.244.4.0/23 covers the /24s of peers 4 and 5
    const wide: LeaseRecord =
      four.ok && four.lease.subnet
        ? {
            key: 'wide',
            ok: true,
            lease: { ...four.lease, key: 'wide', subnet: { ...four.lease.subnet, prefix: 23 } },
          }
        : four;
    t.handle({
      type: 'snapshot',
      records: [SELF, record(1), record(5), wide],
      reason: 'initial list',
    });
    t.handle({ type: 'put', record: record(1) });
    expect(keys(t)).toEqual(['10.244.1.0-24', '10.244.5.0-24']);
    expect(t.skipped().get('wide')?.reason).toBe('subnet-conflict');
    const refusals = log.lines.filter((l) => l.msg === 'skipping invalid peer lease');
    expect(refusals.map((l) => l.key)).toEqual(['wide']);
  });

  it('takes a peer whose subnet or first claim changed with the same attributes (a Node re-created)', () => {
    const { t } = tracker(0);
    const told: boolean[] = [];
    t.subscribe((peersChanged) => told.push(peersChanged));
    const [one, seven] = [record(1), record(7)];
    if (!one.ok || !seven.ok) throw new Error('test setup');
    t.handle({ type: 'snapshot', records: [SELF, one], reason: 'initial list' });
    // the same key and attributes on another subnet
    const moved = { ...one, lease: { ...one.lease, subnet: seven.lease.subnet } };
    t.handle({ type: 'snapshot', records: [SELF, moved], reason: 'reconnected' });
    expect(t.list().map((l) => l.subnet)).toEqual([seven.lease.subnet]);
    // the same lease, claimed anew (a deleted key re-created)
    t.handle({ type: 'put', record: { ...moved, lease: { ...moved.lease, claimedAt: 99 } } });
    expect(told).toEqual([true, true, true]);
    expect(t.list()[0]?.claimedAt).toBe(99);
  });

  it('drops a peer whose delete says it is gone for good at once, despite the delete grace', () => {
    const { t, changes } = tracker(10_000, 10_000);
    t.handle({ type: 'snapshot', records: [SELF, record(1), record(2)], reason: 'initial list' });
    const before = changes();
    t.handle({ type: 'delete', key: '10.244.1.0-24' });
    expect(keys(t)).toEqual(['10.244.1.0-24', '10.244.2.0-24']);
    t.handle({ type: 'delete', key: '10.244.2.0-24', gone: true });
    expect(keys(t)).toEqual(['10.244.1.0-24']);
    expect(changes()).toBe(before + 1);
  });
});

describe('PeerTracker: dual-stack records', () => {
  const DUAL = parseNetConfig(
    '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}',
  );
  const V4 = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}');
  /** a Kubernetes-style record (the key is the node name) with flannel's dual-stack value */
  const node = (
    name: string,
    subnet: string,
    subnet6: string | null,
    value: string,
  ): LeaseRecord => {
    const s = parseCidr(subnet, { strict: true });
    const s6 = subnet6 === null ? null : parseCidr6(subnet6, { strict: true });
    if (!s || s6 === undefined) throw new Error('test setup');
    return peerRecord({
      key: name,
      subnet: s,
      subnet6: s6,
      attrs: decodeLeaseValue(value),
      version: '1',
      claimedAt: undefined,
    });
  };
  const VALUE =
    '{"PublicIP":"192.168.56.13","PublicIPv6":"fd00:56::13","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"7e:1b:4f:9a:2c:03"},"BackendV6Data":{"VNI":1,"VtepMAC":"9a:41:e0:11:6b:03"}}';
  const self = node('self', '10.244.3.0/24', 'fd00:10:244:3::/64', VALUE.replace(/13/g, '11'));

  function dualTracker(config = DUAL): {
    t: PeerTracker;
    changes: () => number;
    log: ReturnType<typeof captureLog>;
  } {
    let changes = 0;
    const log = captureLog();
    const t = new PeerTracker({
      context: {
        config,
        self: self.ok ? self.lease.subnet : undefined,
        self6: self.ok ? self.lease.subnet6 : undefined,
      },
      selfKey: 'self',
      selfAttrs: () => (self.ok ? self.lease.attrs : NO_ATTRS),
      logger: log.logger,
      onSelfLost: () => undefined,
      lingerMs: 0,
      deleteLingerMs: 0,
    });
    t.subscribe((peersChanged) => {
      if (peersChanged) changes++;
    });
    return { t, changes: () => changes, log };
  }

  it('admits a dual-stack peer with its IPv6 subnet, and a change of only that subnet is a change', () => {
    const { t, changes } = dualTracker();
    t.handle({
      type: 'snapshot',
      records: [self, node('b', '10.244.5.0/24', 'fd00:10:244:5::/64', VALUE)],
      reason: 'initial list',
    });
    expect(t.list().map((l) => [l.key, l.subnet6 && formatCidr6(l.subnet6)])).toEqual([
      ['b', 'fd00:10:244:5::/64'],
    ]);
    const before = changes();
    t.handle({ type: 'put', record: node('b', '10.244.5.0/24', 'fd00:10:244:5::/64', VALUE) });
    expect(changes()).toBe(before);
    t.handle({ type: 'put', record: node('b', '10.244.5.0/24', 'fd00:10:244:6::/64', VALUE) });
    expect(changes()).toBe(before + 1);
    expect(t.list()[0]?.subnet6 && formatCidr6(t.list()[0]?.subnet6 as Cidr6)).toBe(
      'fd00:10:244:6::/64',
    );
  });

  it('refuses a peer whose IPv6 subnet is ours; admits one with no PublicIPv6 for IPv4 alone', () => {
    const { t, log } = dualTracker();
    // a rolling upgrade: the cluster gave the Node an IPv6 podCIDR, its twill is not dual yet
    const noIpv6 = VALUE.replace('"fd00:56::13"', 'null').replace(/,"BackendV6Data":\{[^}]*\}/, '');
    t.handle({
      type: 'snapshot',
      records: [
        self,
        node('thief', '10.244.5.0/24', 'fd00:10:244:3::/64', VALUE),
        node('mute', '10.244.6.0/24', 'fd00:10:244:6::/64', noIpv6),
      ],
      reason: 'initial list',
    });
    expect(t.list().map((l) => [l.key, cidrText(l.subnet), l.subnet6])).toEqual([
      ['mute', '10.244.6.0/24', undefined],
    ]);
    expect(Object.fromEntries([...t.skipped()].map(([k, r]) => [k, r.reason]))).toEqual({
      thief: 'overlaps-own',
    });
    // nothing alarming about it: the only warning is the thief's
    expect(log.lines.filter((l) => l.level >= 40).map((l) => l.key)).toEqual(['thief']);
  });

  it('a malformed PublicIPv6 or BackendV6Data: refused (malformed, naming the field) with IPv6 on, admitted for IPv4 with IPv6 off', () => {
    const bad = VALUE.replace('"fd00:56::13"', `"${'z'.repeat(300)}"`);
    const badMac = VALUE.replace('9a:41:e0:11:6b:03', '33:33:00:00:00:01')
      .replace('7e:1b:4f:9a:2c:03', '7e:1b:4f:9a:2c:04')
      .replace('192.168.56.13', '192.168.56.14');
    const records: LeaseRecord[] = [
      self,
      node('b', '10.244.5.0/24', 'fd00:10:244:5::/64', bad),
      node('c', '10.244.6.0/24', 'fd00:10:244:6::/64', badMac),
    ];
    const on = dualTracker();
    on.t.handle({ type: 'snapshot', records, reason: 'initial list' });
    expect(on.t.list()).toEqual([]);
    const b = on.t.skipped().get('b');
    expect(b?.reason).toBe('malformed');
    expect(b?.detail).toContain('PublicIPv6 "zzz');
    expect(b?.detail.length).toBeLessThan(230);
    expect(on.t.skipped().get('c')).toMatchObject({
      reason: 'malformed',
      detail: expect.stringContaining('BackendV6Data.VtepMAC 33:33:00:00:00:01'),
    });
    const warned = on.log.lines.filter((l) => l.msg === 'skipping invalid peer lease');
    expect(warned.map((l) => [l.key, l.reason])).toEqual([
      ['b', 'malformed'],
      ['c', 'malformed'],
    ]);

    const off = dualTracker(V4);
    off.t.handle({ type: 'snapshot', records, reason: 'initial list' });
    expect(off.t.list().map((l) => [l.key, cidrText(l.subnet), l.subnet6])).toEqual([
      ['b', '10.244.5.0/24', undefined],
      ['c', '10.244.6.0/24', undefined],
    ]);
    expect(off.t.skipped().size).toBe(0);
  });

  it('with an IPv4-only config keeps only the IPv4 half of a dual-stack peer', () => {
    const { t } = dualTracker(V4);
    t.handle({
      type: 'snapshot',
      records: [self, node('b', '10.244.5.0/24', 'fd00:10:244:3::/64', VALUE)],
      reason: 'initial list',
    });
    expect(t.list().map((l) => [l.key, cidrText(l.subnet), l.subnet6])).toEqual([
      ['b', '10.244.5.0/24', undefined],
    ]);
    expect(t.skipped().size).toBe(0);
  });
});
