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
  publicIpOverwrite,
  publishedVtepMac,
  type NodeView,
} from '../../src/lease/kube-node.ts';
import { formatCidr } from '../../src/net/ipv4.ts';

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
    expect(formatCidr(r.lease.subnet)).toBe('10.244.1.0/24');
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
    expect(r.ok && formatCidr(r.lease.subnet)).toBe('10.244.9.0/24');
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
      'only IPv6 podCIDRs',
      { podCIDRs: ['fd00::/64'] },
      good,
      /has no IPv4 spec\.podCIDRs \(fd00::\/64\)/,
    ],
    ['a podCIDR with host bits', { podCIDR: '10.244.1.1/24' }, good, /has no IPv4/],
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
    expect(formatCidr(ownSubnet(node({ podCIDR: '10.244.4.0/25' }), config))).toBe('10.244.4.0/25');
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
