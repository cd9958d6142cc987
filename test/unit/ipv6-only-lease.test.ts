// The lease layer with an IPv6-only config ("EnableIPv4": false): decoding a
// lease without its IPv4 half, our own Node's IPv6 podCIDR and the flannel
// annotations we publish (no public-ip, no backend-data), peers read and
// admitted on their IPv6 half alone (IPv4 fields ignored, an IPv4-only peer
// refused saying why), the peer tracker keyed on the IPv6 subnet, the
// Kubernetes store over a fake API, and the etcd store refusing the config.
// Also what the other families make of an IPv6-only peer: an IPv4-only node
// refuses it, a dual-stack node routes it for IPv6.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { admitPeers, checkPeer, forOurFamilies, type PeerContext } from '../../src/lease/admit.ts';
import { decodeLeaseObject, describeLease, leaseSubnetText } from '../../src/lease/codec.ts';
import type { KubeApi, NodeWatchEnd } from '../../src/lease/kube-api.ts';
import {
  annotationNames,
  annotationValues,
  nodeRecord,
  nodeView,
  ownSubnet,
  ownSubnet6,
  publishedVtepMac,
  type NodeView,
} from '../../src/lease/kube-node.ts';
import { KubeLeaseStore } from '../../src/lease/kube-store.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { listLeases } from '../../src/lease/snapshot.ts';
import { PeerTracker } from '../../src/lease/tracker.ts';
import type { Lease, LeaseAttrs, LeaseRecord } from '../../src/lease/types.ts';
import { parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { formatCidr6, parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
import { captureLog } from '../helpers/log.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';

const signal = new AbortController().signal;
const P = 'flannel.alpha.coreos.com';
const names = annotationNames(P);
const V6ONLY_TEXT =
  '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan","VNI":1}}';
const V6ONLY = parseNetConfig(V6ONLY_TEXT);
const V6ONLY_HOST_GW = parseNetConfig(
  '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"}}',
);
const DUAL = parseNetConfig(
  '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan","VNI":1}}',
);
const V4 = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":1}}');

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text} is not a network CIDR`);
  return c;
}

function cidr6(text: string): Cidr6 {
  const c = parseCidr6(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text} is not an IPv6 network CIDR`);
  return c;
}

/** An IPv6-only peer's attributes, as flannel with EnableIPv4 false publishes them. */
function attrs6(n: number): LeaseAttrs {
  const hex = n.toString(16).padStart(2, '0');
  return {
    publicIp: null,
    publicIpv6: `fd00:56::${n.toString(16)}`,
    backendType: 'vxlan',
    backendData: null,
    backendData6: { vni: 1, vtepMac: `9a:00:00:00:06:${hex}` },
  };
}

/** An IPv6-only lease n: fd00:10:244:<n>::/64. */
function lease6(n: number, attrs: Partial<LeaseAttrs> = {}, key = `node-${n}`): Lease {
  return {
    key,
    subnet: null,
    subnet6: cidr6(`fd00:10:244:${n.toString(16)}::/64`),
    attrs: { ...attrs6(n), ...attrs },
    expiresAt: 0,
    version: '1',
  };
}

/** A dual-stack lease n: 10.244.<n>.0/24 and fd00:10:244:<n>::/64. */
function dual(n: number, attrs: Partial<LeaseAttrs> = {}): Lease {
  const hex = n.toString(16).padStart(2, '0');
  return {
    ...lease6(n),
    key: `dual-${n}`,
    subnet: cidr(`10.244.${n}.0/24`),
    attrs: {
      ...attrs6(n),
      publicIp: `192.168.56.${n}`,
      backendData: { vni: 1, vtepMac: `7e:00:00:00:04:${hex}` },
      ...attrs,
    },
  };
}

/** An IPv4-only lease n: 10.244.<n>.0/24. */
function lease4(n: number): Lease {
  const { subnet6: _, ...v4 } = dual(n, { publicIpv6: null, backendData6: null });
  return { ...v4, key: `v4-${n}` };
}

const SELF6 = cidr6('fd00:10:244:3::/64');
const CTX6: PeerContext = {
  config: V6ONLY,
  self: null,
  selfPublicIp: null,
  self6: SELF6,
  selfPublicIpv6: 'fd00:56::3',
  selfVtepMac6: '9a:00:00:00:06:03',
  anySubnetSize: true,
};

/** flannel's annotations of an IPv6-only node n (EnableIPv4 false: no public-ip, backend-data). */
function annotations6(n: number): Record<string, string> {
  return annotationValues(attrs6(n), names);
}

function node(
  name: string,
  podCIDRs: string[],
  annotations: Record<string, string>,
  rv = '1',
): NodeView {
  const view = nodeView({
    metadata: { name, resourceVersion: rv, annotations },
    spec: podCIDRs.length > 0 ? { podCIDR: podCIDRs[0], podCIDRs } : {},
  });
  if (!view) throw new Error('test setup: no view');
  return view;
}

describe('codec: a lease without its IPv4 half', () => {
  it('decodeLeaseObject with ipv4 false reads neither PublicIP nor BackendData, even bad ones', () => {
    const raw = {
      PublicIP: 'not-an-ip',
      BackendType: 'vxlan',
      BackendData: { VNI: 1, VtepMAC: 'ff:ff:ff:ff:ff:ff' },
      PublicIPv6: 'FD00:56::5',
      BackendV6Data: { VNI: 1, VtepMAC: '9A:00:00:00:06:05' },
    };
    expect(() => decodeLeaseObject(raw)).toThrow(/PublicIP "not-an-ip"/);
    expect(decodeLeaseObject(raw, { ipv4: false })).toStrictEqual({
      publicIp: null,
      publicIpv6: 'fd00:56::5',
      backendType: 'vxlan',
      backendData: null,
      backendData6: { vni: 1, vtepMac: '9a:00:00:00:06:05' },
    });
  });

  it('describeLease and leaseSubnetText show the IPv6 subnet of an IPv6-only lease', () => {
    const l = lease6(5);
    expect(describeLease(l.subnet, l.attrs, l.subnet6)).toBe(
      'fd00:10:244:5::/64 via fd00:56::5 vtep 9a:00:00:00:06:05 (vxlan)',
    );
    expect(leaseSubnetText(l)).toBe('fd00:10:244:5::/64');
    expect(leaseSubnetText(dual(5))).toBe('10.244.5.0/24');
  });
});

describe('kube-node: an IPv6-only Node', () => {
  it('publishes backend-type, backend-v6-data, public-ipv6 and kube-subnet-manager, never public-ip or backend-data', () => {
    expect(annotationValues(attrs6(5), names)).toStrictEqual({
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/backend-v6-data`]: '{"VNI":1,"VtepMAC":"9a:00:00:00:06:05"}',
      [`${P}/public-ipv6`]: 'fd00:56::5',
      [`${P}/kube-subnet-manager`]: 'true',
    });
    const hostGw = annotationValues(
      { ...attrs6(5), backendType: 'host-gw', backendData6: null },
      names,
    );
    expect(hostGw).toStrictEqual({
      [`${P}/backend-type`]: 'host-gw',
      [`${P}/backend-v6-data`]: 'null',
      [`${P}/public-ipv6`]: 'fd00:56::5',
      [`${P}/kube-subnet-manager`]: 'true',
    });
  });

  it('is read as an IPv6-only lease (subnet null, publicIp null), by IPv6-only and dual-stack readers alike', () => {
    const n = node('v6-5', ['fd00:10:244:5::/64'], annotations6(5));
    for (const o of [{}, { ipv4: false }]) {
      const r = nodeRecord(n, names, o);
      expect(r.ok).toBe(true);
      if (!r.ok) return;
      expect(r.lease.subnet).toBeNull();
      expect(r.lease.subnet6 && formatCidr6(r.lease.subnet6)).toBe('fd00:10:244:5::/64');
      expect(r.lease.attrs).toStrictEqual(attrs6(5));
    }
  });

  it('an IPv6-only reader ignores the IPv4 half of a dual-stack Node, even a malformed one', () => {
    const n = node('dual-5', ['10.244.5.0/24', 'fd00:10:244:5::/64'], {
      ...annotations6(5),
      [`${P}/public-ip`]: 'example.com',
      [`${P}/backend-data`]: '{VNI:1',
    });
    expect(nodeRecord(n, names).ok).toBe(false);
    const r = nodeRecord(n, names, { ipv4: false });
    expect(r.ok && r.lease.subnet).toBeNull();
    expect(r.ok && r.lease.attrs).toStrictEqual(attrs6(5));
  });

  it('an IPv6-only reader refuses a Node without an IPv6 podCIDR, saying why', () => {
    const n = node('v4-9', ['10.244.9.0/24'], {
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/backend-data`]: '{"VNI":1,"VtepMAC":"7e:00:00:00:04:09"}',
      [`${P}/public-ip`]: '192.168.56.9',
      [`${P}/kube-subnet-manager`]: 'true',
    });
    expect(nodeRecord(n, names).ok).toBe(true);
    const r = nodeRecord(n, names, { ipv4: false });
    expect(r.ok).toBe(false);
    expect(!r.ok && r.reason).toBe(
      'node v4-9 has no IPv6 spec.podCIDRs (10.244.9.0/24), and this node runs IPv6 only ("EnableIPv4": false)',
    );
  });

  it('our own subnets: no IPv4 one, the IPv6 podCIDR; none yet is a wait, IPv4-only podCIDRs an error naming the fix', () => {
    const both = node('me', ['10.244.9.0/24', 'fd00:10:244:9::/64'], {});
    expect(ownSubnet(both, V6ONLY)).toBeNull();
    expect(formatCidr6(ownSubnet6(both, V6ONLY) as Cidr6)).toBe('fd00:10:244:9::/64');
    expect(() => ownSubnet6(node('me', [], {}), V6ONLY)).toThrow(
      expect.objectContaining({
        code: 'STORE_UNAVAILABLE',
        message: expect.stringContaining(
          '--allocate-node-cidrs=true --cluster-cidr=fd00:10:244::/56',
        ),
      }),
    );
    expect(() => ownSubnet6(node('me', ['10.244.9.0/24'], {}), V6ONLY)).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringMatching(
          /node me has no IPv6 spec\.podCIDRs \(10\.244\.9\.0\/24\), but net-conf\.json is IPv6 only .*--cluster-cidr=fd00:10:244::\/56/,
        ),
      }),
    );
    expect(() => ownSubnet6(node('me', ['fd00:99::/64'], {}), V6ONLY)).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining('fd00:99::/64 is outside IPv6Network fd00:10:244::/56'),
      }),
    );
  });

  it('finds the IPv6 VtepMAC an IPv6-only Node already publishes (kept across a restart)', () => {
    const n = node('me', ['fd00:10:244:5::/64'], annotations6(5));
    expect(publishedVtepMac(n, names, 1, 6)).toBe('9a:00:00:00:06:05');
    expect(publishedVtepMac(n, names, 1, 4)).toBeUndefined();
  });
});

describe('admission on an IPv6-only node', () => {
  it('admits an IPv6-only peer on its IPv6 half', () => {
    expect(checkPeer(lease6(5), CTX6)).toBeUndefined();
    const a = admitPeers([lease6(5)], CTX6);
    expect(a.admitted.map((l) => l.key)).toEqual(['node-5']);
  });

  it('ignores every IPv4 field of a dual-stack peer, however bad', () => {
    const hostile = dual(5, {
      publicIp: '127.0.0.1',
      backendData: { vni: 99, vtepMac: '9a:00:00:00:06:03' },
    });
    const wide = { ...hostile, subnet: cidr('0.0.0.0/0') };
    const ours = forOurFamilies(wide, V6ONLY);
    expect(ours.subnet).toBeNull();
    expect(ours.attrs.publicIp).toBeNull();
    expect(ours.attrs.backendData).toBeNull();
    expect(ours.subnet6).toStrictEqual(wide.subnet6);
    // checkPeer alone ignores them too, without forOurFamilies
    expect(checkPeer(wide, CTX6)).toBeUndefined();
    expect(admitPeers([wide], CTX6).admitted).toEqual([ours]);
    // an IPv6-only lease passes through unchanged
    const six = lease6(6);
    expect(forOurFamilies(six, V6ONLY)).toBe(six);
  });

  it('refuses an IPv4-only peer, saying it has no IPv6 subnet', () => {
    expect(checkPeer(forOurFamilies(lease4(4), V6ONLY), CTX6)).toEqual({
      reason: 'malformed',
      detail:
        'no subnet in a family this node runs: it leases IPv4 only (subnet 10.244.4.0/24); this node runs IPv6 only ("EnableIPv4": false) and routes peers over IPv6 alone',
    });
    expect(admitPeers([lease4(4)], CTX6).refused.map((r) => r.refusal.reason)).toEqual([
      'malformed',
    ]);
  });

  it.each([
    ['no PublicIPv6', lease6(5, { publicIpv6: null }), 'public-ip', 'without a PublicIPv6'],
    ['our own PublicIPv6', lease6(5, { publicIpv6: 'fd00:56::3' }), 'public-ip', "node's own"],
    ['no BackendV6Data (vxlan)', lease6(5, { backendData6: null }), 'vtep-mac', 'BackendV6Data'],
    [
      'another VNI',
      lease6(5, { backendData6: { vni: 2, vtepMac: '9a:00:00:00:06:05' } }),
      'vni',
      'BackendV6Data.VNI 2',
    ],
    ['our own IPv6 subnet', lease6(3), 'overlaps-own', 'fd00:10:244:3::/64'],
    [
      'an IPv6 subnet outside IPv6Network',
      { ...lease6(5), subnet6: cidr6('fd00:99::/64') },
      'outside-network',
      'fd00:99::/64',
    ],
    [
      'unreadable IPv6 annotations',
      lease6(5, { publicIpv6: null, backendData6: null, v6Problem: 'PublicIPv6 "zz" is bad' }),
      'malformed',
      'PublicIPv6 "zz"',
    ],
    ['another backend', lease6(5, { backendType: 'host-gw' }), 'backend-type', 'host-gw'],
  ] as const)('refuses a peer with %s', (_name, peer, reason, part) => {
    const r = checkPeer(peer, CTX6);
    expect(r?.reason).toBe(reason);
    expect(r?.detail).toContain(part);
  });

  it('host-gw: a peer needs a PublicIPv6 on-link, no PublicIP', () => {
    const ctx: PeerContext = {
      ...CTX6,
      config: V6ONLY_HOST_GW,
      underlay: { name: 'eth0', networks: [], networks6: ['fd00:56::3/64'] },
    };
    const hg = { backendType: 'host-gw', backendData6: null } as const;
    expect(checkPeer(lease6(5, hg), ctx)).toBeUndefined();
    expect(checkPeer(lease6(5, { ...hg, publicIpv6: 'fd00:57::5' }), ctx)?.reason).toBe(
      'not-on-link',
    );
  });

  it('finds conflicts in IPv6 alone: a shared IPv4 subnet or VtepMAC is no conflict, a shared IPv6 subnet is', () => {
    const a = { ...dual(4), claimedAt: 1 };
    // the same IPv4 subnet and IPv4 VtepMAC as a, its own IPv6 half
    const b = {
      ...dual(5, { backendData: a.attrs.backendData }),
      subnet: a.subnet,
      key: 'b',
      claimedAt: 2,
    };
    expect(admitPeers([a, b], CTX6).refused).toEqual([]);
    const thief = { ...lease6(6), key: 'thief', subnet6: a.subnet6, claimedAt: 3 };
    const r = admitPeers([a, b, thief], CTX6);
    expect(r.admitted.map((l) => l.key).sort()).toEqual(['b', 'dual-4']);
    expect(r.refused.map((x) => [x.lease.key, x.refusal.detail])).toEqual([
      ['thief', 'IPv6 subnet fd00:10:244:4::/64 was claimed first by peer dual-4'],
    ]);
  });
});

describe('an IPv6-only peer seen by other nodes', () => {
  it('an IPv4-only node refuses it, saying it leases IPv6 only', () => {
    const ctx: PeerContext = { config: V4, self: cidr('10.244.3.0/24') };
    const a = admitPeers([lease6(5), lease4(4)], ctx);
    expect(a.admitted.map((l) => l.key)).toEqual(['v4-4']);
    expect(a.refused.map((r) => [r.lease.key, r.refusal.reason, r.refusal.detail])).toEqual([
      [
        'node-5',
        'malformed',
        'no subnet in a family this node runs: it leases IPv6 only (IPv6 subnet fd00:10:244:5::/64); this node runs IPv4 only (no "EnableIPv6")',
      ],
    ]);
  });

  it('a dual-stack node routes its IPv6 half, and checks it against the other peers in IPv6', () => {
    const ctx: PeerContext = {
      config: DUAL,
      self: cidr('10.244.3.0/24'),
      self6: SELF6,
      anySubnetSize: true,
    };
    const a = admitPeers([lease6(5), dual(4)], ctx);
    expect(a.refused).toEqual([]);
    const admitted = a.admitted.find((l) => l.key === 'node-5');
    expect(admitted?.subnet).toBeNull();
    expect(admitted?.subnet6 && formatCidr6(admitted.subnet6)).toBe('fd00:10:244:5::/64');
    // without a PublicIPv6 it has nothing to be routed by: refused for that, not dropped silently
    expect(checkPeer(forOurFamilies(lease6(5, { publicIpv6: null }), DUAL), ctx)?.reason).toBe(
      'public-ip',
    );
    const copy = { ...lease6(7), subnet6: cidr6('fd00:10:244:4::/64') };
    expect(admitPeers([dual(4), copy], ctx).refused.map((r) => r.refusal.reason)).toEqual([
      'subnet-conflict',
      'subnet-conflict',
    ]);
  });

  it('a peer with an IPv4 subnet but no PublicIP is refused on an IPv4 node', () => {
    const peer = { ...lease4(4), attrs: { ...lease4(4).attrs, publicIp: null } };
    expect(checkPeer(peer, { config: V4, self: undefined })).toEqual({
      reason: 'public-ip',
      detail: 'subnet 10.244.4.0/24 without a PublicIP to reach it through',
    });
  });
});

describe('PeerTracker on an IPv6-only node', () => {
  const record = (l: Lease): LeaseRecord => ({ key: l.key, ok: true, lease: l });
  const self = lease6(3, {}, 'me');

  function tracker(): { t: PeerTracker; lost: string[]; log: ReturnType<typeof captureLog> } {
    const lost: string[] = [];
    const log = captureLog();
    const t = new PeerTracker({
      context: CTX6,
      selfKey: 'me',
      selfAttrs: () => self.attrs,
      logger: log.logger,
      onSelfLost: (why) => lost.push(why),
      lingerMs: 0,
      deleteLingerMs: 0,
    });
    return { t, lost, log };
  }

  it('admits IPv6-only peers, refuses an IPv4-only one, and logs joins and leaves by the IPv6 subnet', () => {
    const { t, lost, log } = tracker();
    let changes = 0;
    t.subscribe((peersChanged) => void (peersChanged && changes++));
    t.handle({
      type: 'snapshot',
      records: [record(self), record(lease6(5)), record(lease4(4))],
      reason: 'initial list',
    });
    expect(lost).toEqual([]);
    expect(t.list().map((l) => l.key)).toEqual(['node-5']);
    expect(t.skipped().get('v4-4')?.reason).toBe('malformed');
    expect(log.lines.find((l) => l.msg === 'peer joined')?.lease).toBe(
      'fd00:10:244:5::/64 via fd00:56::5 vtep 9a:00:00:00:06:05 (vxlan)',
    );
    // the same record again is no change; another IPv6 subnet is
    const before = changes;
    t.handle({ type: 'put', record: record(lease6(5)) });
    expect(changes).toBe(before);
    t.handle({
      type: 'put',
      record: record({ ...lease6(5), subnet6: cidr6('fd00:10:244:9::/64') }),
    });
    expect(changes).toBe(before + 1);
    t.handle({ type: 'delete', key: 'node-5', gone: true });
    expect(t.list()).toEqual([]);
    expect(log.lines.find((l) => l.msg === 'peer left')?.subnet).toBe('fd00:10:244:9::/64');
  });

  it('our own IPv6-only record as published is ours; a changed PublicIPv6 is noticed', () => {
    const { t, lost } = tracker();
    t.handle({ type: 'snapshot', records: [record(self)], reason: 'initial list' });
    expect(lost).toEqual([]);
    t.handle({
      type: 'put',
      record: record({ ...self, attrs: { ...self.attrs, publicIpv6: 'fd00:56::99' } }),
    });
    expect(lost).toHaveLength(1);
    expect(lost[0]).toContain('fd00:56::99');
  });
});

/** A Kubernetes API over Node objects in memory: patches merge annotations, watches only wait. */
class FakeKubeApi implements KubeApi {
  readonly server = 'https://fake';
  readonly nodes = new Map<string, NodeView>();
  private rv = 1;

  put(name: string, podCIDRs: string[], annotations: Record<string, string> = {}): void {
    this.nodes.set(name, node(name, podCIDRs, annotations, String(++this.rv)));
  }

  async readNode(name: string): Promise<NodeView | undefined> {
    return this.nodes.get(name);
  }

  async listNodes(): Promise<{ nodes: NodeView[]; resourceVersion: string }> {
    return { nodes: [...this.nodes.values()], resourceVersion: String(this.rv) };
  }

  async patchNodeStatus(name: string, patch: unknown): Promise<NodeView> {
    const current = this.nodes.get(name);
    if (!current) throw new Error(`no node ${name}`);
    const set = (patch as { metadata?: { annotations?: Record<string, string> } }).metadata
      ?.annotations;
    const next = { ...current, annotations: { ...current.annotations, ...set } };
    this.nodes.set(name, { ...next, resourceVersion: String(++this.rv) });
    return this.nodes.get(name) as NodeView;
  }

  async watchNodes(o: { signal: AbortSignal }): Promise<NodeWatchEnd> {
    if (!o.signal.aborted)
      await new Promise((resolve) => o.signal.addEventListener('abort', resolve, { once: true }));
    return { reason: 'aborted' };
  }
}

describe('KubeLeaseStore with an IPv6-only config', () => {
  // net-conf.json in a directory of this file's own, removed after it
  let dir: string;
  beforeAll(async () => (dir = await mkdtemp(join(tmpdir(), 'twill-v6only-'))));
  afterAll(() => rm(dir, { recursive: true, force: true }));
  async function kubeStore(api: FakeKubeApi, nodeName = 'me'): Promise<KubeLeaseStore> {
    const file = join(dir, 'net-conf.json');
    await writeFile(file, V6ONLY_TEXT);
    return new KubeLeaseStore({ api, nodeName, netConfigPath: file });
  }
  const mine: LeaseAttrs = {
    ...attrs6(3),
    // what a daemon might still pass: an IPv6-only lease publishes neither
    publicIp: '192.168.56.3',
    backendData: { vni: 1, vtepMac: '7e:00:00:00:04:03' },
  };

  it('leases the IPv6 podCIDR alone and publishes only the IPv6 annotations, ignoring public-ip-overwrite', async () => {
    const api = new FakeKubeApi();
    api.put('me', ['10.244.3.0/24', 'fd00:10:244:3::/64'], {
      [`${P}/public-ip-overwrite`]: 'not checked with IPv4 off',
    });
    const store = await kubeStore(api);
    const lease = await store.acquireLease(
      { config: V6ONLY, attrs: mine, previous: undefined },
      signal,
    );
    expect(lease.subnet).toBeNull();
    expect(lease.subnet6 && formatCidr6(lease.subnet6)).toBe('fd00:10:244:3::/64');
    expect(lease.attrs).toStrictEqual(attrs6(3));
    expect(api.nodes.get('me')?.annotations).toStrictEqual({
      [`${P}/public-ip-overwrite`]: 'not checked with IPv4 off',
      ...annotations6(3),
    });
    // renewing re-publishes nothing; a Node registered again without podCIDRs is a wait
    const version = api.nodes.get('me')?.resourceVersion;
    expect((await store.renewLease(lease, signal)).version).toBe(version);
    api.put('me', []);
    await expect(store.renewLease(lease, signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('waiting for fd00:10:244:3::/64'),
    });
    api.put('me', ['fd00:10:244:7::/64']);
    await expect(store.reclaimLease(lease, signal)).rejects.toMatchObject({
      code: 'LEASE_TAKEN',
    });
  });

  it('reads peers as the config says once it has read it: IPv4 halves ignored', async () => {
    const api = new FakeKubeApi();
    api.put('me', ['fd00:10:244:3::/64'], annotations6(3));
    api.put('dual-5', ['10.244.5.0/24', 'fd00:10:244:5::/64'], {
      ...annotations6(5),
      [`${P}/public-ip`]: 'garbage',
    });
    const store = await kubeStore(api);
    // before the config is known, both halves are read (a bad public-ip makes a bad record)
    const early = await listLeases(store, signal);
    expect(early.find((r) => r.key === 'dual-5')?.ok).toBe(false);
    expect((await store.getNetworkConfig()).ipv4).toBeNull();
    const records = await listLeases(store, signal);
    const peer = records.find((r) => r.key === 'dual-5');
    expect(peer?.ok && peer.lease.subnet).toBeNull();
    expect(peer?.ok && peer.lease.attrs).toStrictEqual(attrs6(5));
    const self = records.find((r) => r.key === 'me');
    expect(self?.ok && self.lease.attrs).toStrictEqual(attrs6(3));
  });

  it('waits for a Node without podCIDRs, and refuses one with only an IPv4 podCIDR', async () => {
    const api = new FakeKubeApi();
    api.put('me', []);
    const store = await kubeStore(api);
    const req = { config: V6ONLY, attrs: attrs6(3), previous: undefined };
    await expect(store.acquireLease(req, signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    api.put('me', ['10.244.3.0/24']);
    await expect(store.acquireLease(req, signal)).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('IPv6 only'),
    });
    expect(api.nodes.get('me')?.annotations).toStrictEqual({});
  });
});

describe('KvLeaseStore (etcd) with an IPv6-only config', () => {
  it('refuses it as soon as it reads it, and at acquire, naming --kube-subnet-mgr; writes nothing', async () => {
    const kv = new MemoryKv();
    kv.putRaw('/v6/config', V6ONLY_TEXT);
    const store = new KvLeaseStore({ kv, prefix: '/v6' });
    await expect(store.getNetworkConfig(signal)).rejects.toMatchObject({
      code: 'CONFIG_UNSUPPORTED',
      message: expect.stringMatching(
        /^\/v6\/config: IPv6-only \("EnableIPv4": false\) needs the Kubernetes store: run twill with --kube-subnet-mgr/,
      ),
    });
    await expect(
      store.acquireLease({ config: V6ONLY, attrs: attrs6(3), previous: undefined }, signal),
    ).rejects.toMatchObject({ code: 'CONFIG_UNSUPPORTED' });
    // an IPv6-only lease (only the Kubernetes store makes those) is refused, not half-renewed
    await expect(store.renewLease(lease6(3), signal)).rejects.toMatchObject({
      code: 'CONFIG_UNSUPPORTED',
    });
    await expect(store.reclaimLease(lease6(3), signal)).rejects.toMatchObject({
      code: 'CONFIG_UNSUPPORTED',
    });
    expect(await listLeases(store, signal)).toEqual([]);
    await kv.close();
  });
});
