// `npm run lab -- up`'s command lines the labs refuse, before anything is built: the IPv6-only
// lab runs on the Kubernetes store by hand alone, as the dual-stack lab refuses the kubelet lab.
import { describe, expect, it } from 'vitest';
import { upConflict, type UpOptions } from '../../lab/up-options.ts';

const BASE: UpOptions = { nodes: 3, pods: 2, backend: 'vxlan', store: 'etcd' };

describe('up --ipv6-only', () => {
  it('is taken with the Kubernetes store, over either backend', () => {
    expect(upConflict({ ...BASE, store: 'kube', ipv6Only: true })).toBeUndefined();
    expect(
      upConflict({ ...BASE, store: 'kube', backend: 'host-gw', ipv6Only: true }),
    ).toBeUndefined();
    expect(upConflict({ ...BASE, store: 'kube', ipv6Only: true, slow: 3 })).toBeUndefined();
  });

  it('is refused with the etcd store (the default), naming --store kube', () => {
    expect(upConflict({ ...BASE, ipv6Only: true })).toMatch(
      /^--ipv6-only needs the Kubernetes store \(add --store kube\): .*etcd store.* always leases an IPv4 subnet/,
    );
  });

  it('is refused with --dual-stack, whatever the store', () => {
    for (const store of ['etcd', 'kube'] as const)
      expect(upConflict({ ...BASE, store, ipv6Only: true, dualStack: true })).toMatch(
        /^--ipv6-only and --dual-stack exclude each other/,
      );
  });

  it('is refused with the kubelet lab and the Vagrant lab', () => {
    expect(upConflict({ ...BASE, kubelet: true, ipv6Only: true })).toMatch(
      /^--ipv6-only is for the netns lab with the Kubernetes store \(--store kube\), not --kubelet/,
    );
    expect(upConflict({ ...BASE, vagrant: true, ipv6Only: true })).toMatch(
      /^--vagrant runs the etcd lab on Vagrant machines: .*--ipv6-only/,
    );
  });
});

describe('the other up command lines, as before', () => {
  it('takes the plain, dual-stack, kubelet and Vagrant labs', () => {
    expect(upConflict(BASE)).toBeUndefined();
    expect(upConflict({ ...BASE, dualStack: true })).toBeUndefined();
    expect(upConflict({ ...BASE, store: 'kube', dualStack: true })).toBeUndefined();
    expect(upConflict({ ...BASE, kubelet: true })).toBeUndefined();
    expect(upConflict({ ...BASE, vagrant: true, spares: 20 })).toBeUndefined();
  });

  it('refuses what it refused', () => {
    expect(upConflict({ ...BASE, kubelet: true, dualStack: true })).toMatch(
      /^--dual-stack is for the netns lab/,
    );
    expect(upConflict({ ...BASE, kubelet: true, backend: 'host-gw' })).toMatch(
      /^--kubelet runs deploy\/ as shipped/,
    );
    expect(upConflict({ ...BASE, vagrant: true, dualStack: true })).toMatch(/^--vagrant runs/);
    expect(upConflict({ ...BASE, spares: 2 })).toBe('--spares is for the Vagrant lab (--vagrant)');
  });
});
