// flannel's Kubernetes format without an apiserver: which Nodes are peers,
// the record each stands for (hostile annotations become invalid records
// naming the annotation), our own subnet's rules, the values published, and
// the kubeconfig errors an operator sees.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { loadKubeConfig } from '../../src/lease/kube-api.ts';
import {
  annotationNames,
  annotationValues,
  isManaged,
  nodeRecord,
  nodeView,
  ownSubnet,
  ownSubnet6,
  publicIpOverwrite,
  publicIpv6Overwrite,
  publishedVtepMac,
  type NodeView,
} from '../../src/lease/kube-node.ts';
import type { LeaseAttrs } from '../../src/lease/types.ts';
import { formatCidr, type Cidr } from '../../src/net/ipv4.ts';
import { formatCidr6, type Cidr6 } from '../../src/net/ipv6.ts';

/** An IPv4 subnet as text; null for none (an IPv6-only lease). */
const cidrText = (c: Cidr | null): string | null => (c ? formatCidr(c) : null);

const names = annotationNames('flannel.alpha.coreos.com');
const config = parseNetConfig('{"Network":"10.244.0.0/16"}');
const good = {
  'flannel.alpha.coreos.com/backend-type': 'vxlan',
  'flannel.alpha.coreos.com/backend-data': '{"VNI":1,"VtepMAC":"0A:58:0A:F4:01:01"}',
  'flannel.alpha.coreos.com/public-ip': '10.0.0.5',
  'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
};

function node(
  o: { podCIDR?: string; podCIDRs?: string[]; annotations?: Record<string, unknown> } = {},
): NodeView {
  const view = nodeView({
    metadata: { name: 'n1', resourceVersion: '7', annotations: o.annotations ?? good },
    spec: { podCIDR: o.podCIDR, podCIDRs: o.podCIDRs },
  });
  if (!view) throw new Error('no view');
  return view;
}

describe('nodeView and nodeRecord', () => {
  it('reads a managed Node as a lease keyed by its name, MAC normalised', () => {
    const r = nodeRecord(node({ podCIDR: '10.244.1.0/24' }), names);
    expect(r).toMatchObject({ key: 'n1', ok: true });
    if (!r.ok) return;
    expect(cidrText(r.lease.subnet)).toBe('10.244.1.0/24');
    expect(r.lease.attrs).toEqual({
      publicIp: '10.0.0.5',
      publicIpv6: null,
      backendType: 'vxlan',
      backendData: { vni: 1, vtepMac: '0a:58:0a:f4:01:01' },
    });
    expect(r.lease.version).toBe('7');
  });

  it('prefers the first IPv4 entry of podCIDRs (dual stack), else podCIDR', () => {
    const r = nodeRecord(
      node({ podCIDR: 'fd00::/64', podCIDRs: ['fd00::/64', '10.244.9.0/24'] }),
      names,
    );
    expect(r.ok && cidrText(r.lease.subnet)).toBe('10.244.9.0/24');
  });

  it('reads a host-gw Node with backend-data "null"', () => {
    const r = nodeRecord(
      node({
        podCIDR: '10.244.2.0/24',
        annotations: { ...good, [names.backendType]: 'host-gw', [names.backendData]: 'null' },
      }),
      names,
    );
    expect(r.ok && r.lease.attrs.backendData).toBeNull();
  });

  it.each([
    ['no podCIDR', {}, good, /has no spec\.podCIDR/],
    [
      'podCIDRs that are no network of either family',
      { podCIDRs: ['fd00::1/64', '10.244.1.1/24'] },
      good,
      /spec\.podCIDRs "10\.244\.1\.1\/24" is not an IPv4 network CIDR/,
    ],
    [
      'a podCIDR with host bits',
      { podCIDR: '10.244.1.1/24' },
      good,
      /"10\.244\.1\.1\/24" is not an IPv4 network CIDR/,
    ],
    [
      'an IPv4 podCIDR with host bits beside a good IPv6 one (not taken for an IPv6-only Node)',
      { podCIDRs: ['10.244.1.1/24', 'fd00:10:244:1::/64'] },
      good,
      /"10\.244\.1\.1\/24" is not an IPv4 network CIDR/,
    ],
    [
      'public-ip not an address',
      { podCIDR: '10.244.1.0/24' },
      { ...good, [names.publicIp]: 'example.com' },
      /public-ip "example\.com" is not an IPv4 address/,
    ],
    [
      'public-ip missing',
      { podCIDR: '10.244.1.0/24' },
      { ...good, [names.publicIp]: undefined },
      /public-ip null/,
    ],
    [
      'backend-data not JSON',
      { podCIDR: '10.244.1.0/24' },
      { ...good, [names.backendData]: '{VNI:1' },
      /backend-data is not JSON: "\{VNI:1"/,
    ],
    [
      'a multicast VtepMAC',
      { podCIDR: '10.244.1.0/24' },
      { ...good, [names.backendData]: '{"VNI":1,"VtepMAC":"01:00:5e:00:00:01"}' },
      /backend-data.*multicast/,
    ],
    [
      'an unknown backend-type',
      { podCIDR: '10.244.1.0/24' },
      { ...good, [names.backendType]: 'udp' },
      /BackendType "udp"/,
    ],
    [
      'vxlan without backend-data',
      { podCIDR: '10.244.1.0/24' },
      { ...good, [names.backendData]: 'null' },
      /BackendData is missing/,
    ],
  ])('skips a Node with %s, naming why', (_name, spec, annotations, reason) => {
    const r = nodeRecord(node({ ...spec, annotations: annotations }), names);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.reason).toMatch(reason);
  });

  it('counts only Nodes with kube-subnet-manager "true" as managed, and ignores non-string annotations', () => {
    expect(isManaged(node(), names)).toBe(true);
    expect(isManaged(node({ annotations: { ...good, [names.subnetManager]: 'yes' } }), names)).toBe(
      false,
    );
    expect(isManaged(node({ annotations: { ...good, [names.subnetManager]: true } }), names)).toBe(
      false,
    );
    expect(nodeView({ metadata: {} })).toBeUndefined();
  });
});

describe('our own Node', () => {
  it('takes a podCIDR inside Network of any size, waits for a missing one, refuses one outside', () => {
    expect(cidrText(ownSubnet(node({ podCIDR: '10.244.4.0/25' }), config))).toBe('10.244.4.0/25');
    expect(() => ownSubnet(node(), config)).toThrow(
      expect.objectContaining({
        code: 'STORE_UNAVAILABLE',
        message: expect.stringContaining('--allocate-node-cidrs=true --cluster-cidr=10.244.0.0/16'),
      }),
    );
    expect(() => ownSubnet(node({ podCIDR: '10.1.0.0/24' }), config)).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining('10.1.0.0/24 is outside Network 10.244.0.0/16'),
      }),
    );
    expect(() => ownSubnet(node({ podCIDR: '10.244.4.0/31' }), config)).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID' }),
    );
  });

  it('reads public-ip-overwrite and the VtepMAC already published for our VNI', () => {
    expect(
      publicIpOverwrite(
        node({ annotations: { ...good, [names.publicIpOverwrite]: '198.51.100.1' } }),
        names,
      ),
    ).toBe('198.51.100.1');
    expect(publicIpOverwrite(node(), names)).toBeUndefined();
    expect(() =>
      publicIpOverwrite(node({ annotations: { [names.publicIpOverwrite]: '1.2.3' } }), names),
    ).toThrow(/public-ip-overwrite "1\.2\.3"/);
    expect(publishedVtepMac(node(), names, 1)).toBe('0a:58:0a:f4:01:01');
    expect(publishedVtepMac(node(), names, 2)).toBeUndefined();
    expect(publishedVtepMac(node({ annotations: {} }), names, 1)).toBeUndefined();
  });

  it("publishes exactly flannel's values, under any prefix", () => {
    const attrs = {
      publicIp: '10.0.0.5',
      publicIpv6: null,
      backendType: 'vxlan' as const,
      backendData: { vni: 1, vtepMac: '0a:58:0a:f4:01:01' },
    };
    expect(annotationValues(attrs, annotationNames('example.com/'))).toEqual({
      'example.com/backend-type': 'vxlan',
      'example.com/backend-data': '{"VNI":1,"VtepMAC":"0a:58:0a:f4:01:01"}',
      'example.com/public-ip': '10.0.0.5',
      'example.com/kube-subnet-manager': 'true',
    });
    expect(
      annotationValues({ ...attrs, backendType: 'host-gw', backendData: null }, names)[
        names.backendData
      ],
    ).toBe('null');
  });
});

describe('loadKubeConfig', () => {
  it('names a kubeconfig that cannot be read, and in-cluster config outside a pod', () => {
    expect(() => loadKubeConfig({ kubeconfigFile: '/nonexistent/kubeconfig' })).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining('--kubeconfig-file "/nonexistent/kubeconfig"'),
      }),
    );
    const saved = {
      host: process.env.KUBERNETES_SERVICE_HOST,
      port: process.env.KUBERNETES_SERVICE_PORT,
    };
    delete process.env.KUBERNETES_SERVICE_HOST;
    delete process.env.KUBERNETES_SERVICE_PORT;
    try {
      expect(() => loadKubeConfig({})).toThrow(
        expect.objectContaining({
          code: 'CONFIG_INVALID',
          message: expect.stringContaining('KUBERNETES_SERVICE_HOST'),
        }),
      );
    } finally {
      if (saved.host !== undefined) process.env.KUBERNETES_SERVICE_HOST = saved.host;
      if (saved.port !== undefined) process.env.KUBERNETES_SERVICE_PORT = saved.port;
    }
  });
});

describe('dual-stack Nodes', () => {
  const dual = parseNetConfig(
    '{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56"}',
  );
  const good6 = {
    ...good,
    'flannel.alpha.coreos.com/public-ipv6': 'FD00:56:0:0::5',
    'flannel.alpha.coreos.com/backend-v6-data': '{"VNI":1,"VtepMAC":"9A:41:E0:11:6B:05"}',
  };

  it.each([
    ['IPv4 first', ['10.244.9.0/24', 'fd00:10:244:9::/64']],
    ['IPv6 first', ['fd00:10:244:9::/64', '10.244.9.0/24']],
  ])("reads both podCIDRs (%s) and flannel's v6 annotations", (_name, podCIDRs) => {
    const r = nodeRecord(node({ podCIDR: podCIDRs[0], podCIDRs, annotations: good6 }), names);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(cidrText(r.lease.subnet)).toBe('10.244.9.0/24');
    expect(r.lease.subnet6 && formatCidr6(r.lease.subnet6)).toBe('fd00:10:244:9::/64');
    expect(r.lease.attrs).toEqual({
      publicIp: '10.0.0.5',
      publicIpv6: 'fd00:56::5',
      backendType: 'vxlan',
      backendData: { vni: 1, vtepMac: '0a:58:0a:f4:01:01' },
      backendData6: { vni: 1, vtepMac: '9a:41:e0:11:6b:05' },
    });
  });

  it('a peer without an IPv6 podCIDR is an IPv4-only lease', () => {
    const r = nodeRecord(node({ podCIDRs: ['10.244.9.0/24'], annotations: good6 }), names);
    expect(r.ok && r.lease.subnet6).toBeUndefined();
  });

  it('reads an empty public-ipv6 and backend-v6-data "null" as none (a host-gw dual Node)', () => {
    const r = nodeRecord(
      node({
        podCIDRs: ['10.244.9.0/24', 'fd00:10:244:9::/64'],
        annotations: {
          ...good,
          'flannel.alpha.coreos.com/backend-type': 'host-gw',
          'flannel.alpha.coreos.com/backend-data': 'null',
          'flannel.alpha.coreos.com/public-ipv6': '',
          'flannel.alpha.coreos.com/backend-v6-data': 'null',
        },
      }),
      names,
    );
    expect(r.ok && r.lease.attrs).toEqual({
      publicIp: '10.0.0.5',
      publicIpv6: null,
      backendType: 'host-gw',
      backendData: null,
    });
  });

  it.each([
    [
      'public-ipv6 not an address',
      { 'flannel.alpha.coreos.com/public-ipv6': '10.0.0.5' },
      ['flannel.alpha.coreos.com/public-ipv6', 'PublicIPv6 "10.0.0.5"'],
    ],
    [
      'backend-v6-data not JSON',
      { 'flannel.alpha.coreos.com/backend-v6-data': '{"VNI":' },
      ['annotation flannel.alpha.coreos.com/backend-v6-data is not JSON', '{\\"VNI\\":'],
    ],
    [
      'backend-v6-data with a multicast MAC',
      { 'flannel.alpha.coreos.com/backend-v6-data': '{"VNI":1,"VtepMAC":"33:33:00:00:00:01"}' },
      ['flannel.alpha.coreos.com/backend-v6-data', 'BackendV6Data.VtepMAC', 'multicast'],
    ],
  ])(
    'a hostile %s leaves the IPv4 record readable, its problem (naming the annotation) kept apart',
    (_name, bad, parts) => {
      // a node running IPv4 only ignores flannel's IPv6 annotations; admission decides (admit.ts)
      const r = nodeRecord(
        node({
          podCIDRs: ['10.244.9.0/24', 'fd00:10:244:9::/64'],
          annotations: { ...good6, ...bad },
        }),
        names,
      );
      expect(r.ok).toBe(true);
      if (!r.ok) return;
      expect(cidrText(r.lease.subnet)).toBe('10.244.9.0/24');
      const { v6Problem, ...attrs } = r.lease.attrs;
      expect(attrs).toStrictEqual({
        publicIp: '10.0.0.5',
        publicIpv6: null,
        backendType: 'vxlan',
        backendData: { vni: 1, vtepMac: '0a:58:0a:f4:01:01' },
      });
      for (const part of parts) expect(v6Problem).toContain(part);
    },
  );

  it('a bad IPv4 annotation still makes an invalid record, naming only the IPv4 annotations', () => {
    const r = nodeRecord(
      node({
        podCIDRs: ['10.244.9.0/24', 'fd00:10:244:9::/64'],
        annotations: { ...good6, 'flannel.alpha.coreos.com/backend-type': 'udp' },
      }),
      names,
    );
    expect(!r.ok && r.reason).toContain(
      'node annotations (flannel.alpha.coreos.com/backend-type, flannel.alpha.coreos.com/backend-data): BackendType "udp"',
    );
  });

  it('our own subnet6: the IPv6 podCIDR inside IPv6Network; none is CONFIG_INVALID; null without IPv6', () => {
    const both = node({ podCIDRs: ['10.244.9.0/24', 'fd00:10:244:9::/64'] });
    expect(formatCidr6(ownSubnet6(both, dual) as Cidr6)).toBe('fd00:10:244:9::/64');
    expect(ownSubnet6(both, config)).toBeNull();
    expect(() => ownSubnet6(node({ podCIDRs: ['10.244.9.0/24'] }), dual)).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining('node n1 has no IPv6 spec.podCIDRs (10.244.9.0/24)'),
      }),
    );
    expect(() => ownSubnet6(node({ podCIDRs: ['10.244.9.0/24', 'fd01::/64'] }), dual)).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining('fd01::/64 is outside IPv6Network fd00:10:244::/56'),
      }),
    );
    expect(() =>
      ownSubnet6(node({ podCIDRs: ['10.244.9.0/24', 'fd00:10:244:9::/127'] }), dual),
    ).toThrow(expect.objectContaining({ message: expect.stringContaining('too small') }));
  });

  it('public-ipv6-overwrite (canonical) and the IPv6 VtepMAC already published', () => {
    const n = node({
      annotations: { ...good6, 'flannel.alpha.coreos.com/public-ipv6-overwrite': '2001:DB8::7' },
    });
    expect(publicIpv6Overwrite(n, names)).toBe('2001:db8::7');
    expect(publishedVtepMac(n, names, 1, 6)).toBe('9a:41:e0:11:6b:05');
    expect(publishedVtepMac(n, names, 2, 6)).toBeUndefined();
    const bad = node({
      annotations: { ...good6, 'flannel.alpha.coreos.com/public-ipv6-overwrite': 'nope' },
    });
    expect(() => publicIpv6Overwrite(bad, names)).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID' }),
    );
  });

  it("publishes flannel's v6 annotations only when the node has a PublicIPv6", () => {
    const attrs: LeaseAttrs = {
      publicIp: '10.0.0.5',
      publicIpv6: 'fd00:56::5',
      backendType: 'vxlan',
      backendData: { vni: 1, vtepMac: '0a:58:0a:f4:01:01' },
      backendData6: { vni: 1, vtepMac: '9a:41:e0:11:6b:05' },
    };
    expect(annotationValues(attrs, names)).toStrictEqual({
      'flannel.alpha.coreos.com/backend-type': 'vxlan',
      'flannel.alpha.coreos.com/backend-data': '{"VNI":1,"VtepMAC":"0a:58:0a:f4:01:01"}',
      'flannel.alpha.coreos.com/public-ip': '10.0.0.5',
      'flannel.alpha.coreos.com/backend-v6-data': '{"VNI":1,"VtepMAC":"9a:41:e0:11:6b:05"}',
      'flannel.alpha.coreos.com/public-ipv6': 'fd00:56::5',
      'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
    });
    const hostGw = annotationValues(
      { ...attrs, backendType: 'host-gw', backendData: null, backendData6: null },
      names,
    );
    expect(hostGw['flannel.alpha.coreos.com/backend-v6-data']).toBe('null');
    const v4 = annotationValues({ ...attrs, publicIpv6: null }, names);
    expect(Object.keys(v4).filter((k) => /v6/.test(k))).toEqual([]);
  });
});
