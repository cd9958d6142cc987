// deploy/ against a real kube-apiserver: `kubectl apply --dry-run=server -k`
// accepts every object and creates none (once the namespace exists: a dry
// run does not create it, so its namespaced objects are refused before); `kubectl apply -k`
// installs them;
// the stored objects say what docs/operations.md (Deploying) promises (capabilities instead of
// privileged, probes, tolerations, volumes); and the ConfigMap's files pass
// twill's own parsers (net-conf.json, and the conflist's twill plugin).
import { DAEMONSET_HEALTH_FLAGS } from '../../bench/node.ts';
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import {
  AppsV1Api,
  CoreV1Api,
  KubeConfig,
  RbacAuthorizationV1Api,
  type V1DaemonSet,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseNetConf } from '../../cni/config.ts';
import type { CommandError } from '../../src/exec/runner.ts';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { startKubeApiServer, type KubeApiServer } from '../helpers/kube.ts';
import { kubectl as kubectlIn } from '../helpers/kube-nodes.ts';

const DEPLOY = resolve(import.meta.dirname, '../../deploy');
const NS = 'twill-system';
let kube: KubeApiServer;
let adminConfig: string;
let kc: KubeConfig;

async function kubectl(args: string[]): Promise<string> {
  return kubectlIn(adminConfig, args);
}

beforeAll(async () => {
  kube = await startKubeApiServer();
  adminConfig = await kube.kubeconfig(kube.adminToken);
  kc = new KubeConfig();
  kc.loadFromFile(adminConfig);
});
afterAll(async () => {
  await kube?.stop();
});

describe('deploy/', () => {
  it('on a cluster without the namespace, the dry run refuses only the namespaced objects (Kubernetes: the namespace is not created in a dry run)', async () => {
    const r = await kubectl(['apply', '--dry-run=server', '-k', DEPLOY]).then(
      () => undefined,
      (err: CommandError) => err,
    );
    expect(r?.exitCode).toBe(1);
    const errors = (r?.stderr ?? '').trim().split('\n');
    expect(errors).toHaveLength(3); // ServiceAccount, ConfigMap, DaemonSet
    for (const line of errors) expect(line).toContain(`namespaces "${NS}" not found`);
  });

  it('kubectl apply --dry-run=server -k deploy/ accepts every object once the namespace exists, and creates none', async () => {
    await kubectl(['apply', '-f', resolve(DEPLOY, 'base', 'namespace.yaml')]);
    const out = await kubectl(['apply', '--dry-run=server', '-k', DEPLOY]);
    expect(out).toMatch(
      new RegExp(`^namespace/${NS} (unchanged|configured) \\(server dry run\\)$`, 'm'),
    );
    for (const obj of [
      'serviceaccount/twill',
      'clusterrole.rbac.authorization.k8s.io/twill',
      'clusterrolebinding.rbac.authorization.k8s.io/twill',
      'configmap/twill-cfg-',
      'daemonset.apps/twill',
    ]) {
      expect(out).toMatch(
        new RegExp(`^${obj.replaceAll('.', '\\.')}\\S* created \\(server dry run\\)$`, 'm'),
      );
    }
    const core = kc.makeApiClient(CoreV1Api);
    expect(
      (await core.listNamespacedServiceAccount({ namespace: NS })).items.map(
        (a) => a.metadata?.name,
      ),
    ).not.toContain('twill');
    expect(
      (await kc.makeApiClient(AppsV1Api).listNamespacedDaemonSet({ namespace: NS })).items,
    ).toEqual([]);
    expect(
      (await kc.makeApiClient(RbacAuthorizationV1Api).listClusterRole()).items.map(
        (r) => r.metadata?.name,
      ),
    ).not.toContain('twill');
  });

  it('kubectl apply -k deploy/ installs it, and the DaemonSet is what docs/operations.md says', async () => {
    await kubectl(['apply', '-k', DEPLOY]);
    const ds = await kc
      .makeApiClient(AppsV1Api)
      .readNamespacedDaemonSet({ name: 'twill', namespace: NS });
    const pod = ds.spec?.template.spec;
    expect(pod?.hostNetwork).toBe(true);
    expect(pod?.priorityClassName).toBe('system-node-critical');
    expect(pod?.serviceAccountName).toBe('twill');
    expect(pod?.tolerations).toContainEqual({ operator: 'Exists', effect: 'NoSchedule' });
    const main = pod?.containers.find((c) => c.name === 'twill');
    expect(main?.securityContext?.privileged).toBe(false);
    expect(main?.securityContext?.capabilities?.add?.sort()).toEqual(['NET_ADMIN', 'NET_RAW']);
    expect(main?.args).toEqual(
      expect.arrayContaining(['run', '--kube-subnet-mgr', '--ip-masq', '--healthz-port=9810']),
    );
    expect(main?.env?.find((e) => e.name === 'NODE_NAME')?.valueFrom?.fieldRef?.fieldPath).toBe(
      'spec.nodeName',
    );
    // sysctls through the host's /proc/sys/net (the container's own /proc/sys is read-only),
    // writable: twill keeps ip_forward at 1
    expect(main?.args).toContain('--proc-sys-net=/host/proc/sys/net');
    const procSysNet = main?.volumeMounts?.find((m) => m.mountPath === '/host/proc/sys/net');
    expect(pod?.volumes?.find((v) => v.name === procSysNet?.name)?.hostPath?.path).toBe(
      '/proc/sys/net',
    );
    expect(procSysNet?.readOnly).not.toBe(true);
    expect(pod?.initContainers?.map((c) => c.name)).toEqual(['install-cni-plugin', 'install-cni']);
    expect(main?.livenessProbe?.httpGet).toMatchObject({ path: '/healthz', port: 9810 });
    // the bench runs the daemon with these health flags too, so its rows count what they cost
    const benchHealth = [0, 2].map(
      (i) => `${DAEMONSET_HEALTH_FLAGS[i] ?? ''}=${DAEMONSET_HEALTH_FLAGS[i + 1] ?? ''}`,
    );
    expect(main?.args).toEqual(expect.arrayContaining(benchHealth));
    expect(main?.readinessProbe?.httpGet).toMatchObject({ path: '/readyz', port: 9810 });
    expect(main?.resources?.requests).toMatchObject({ cpu: '50m', memory: '128Mi' });
    // no container of the pod is privileged; every one is locked down
    const all = [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])];
    expect(all.filter((c) => c.securityContext?.privileged)).toEqual([]);
    for (const c of all) {
      expect(c.securityContext, c.name).toMatchObject({
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        seccompProfile: { type: 'RuntimeDefault' },
        capabilities: { drop: ['ALL'] },
      });
    }
    expect(pod?.initContainers?.map((c) => c.securityContext?.capabilities?.add ?? [])).toEqual([
      [],
      [],
    ]);
    expect(main?.volumeMounts?.find((m) => m.mountPath === '/tmp')).toBeDefined();
    expect(hostPaths(ds)).toEqual({
      '/etc/cni/net.d': 'DirectoryOrCreate',
      '/opt/cni/bin': 'DirectoryOrCreate',
      '/proc/sys/net': 'Directory',
      '/run/twill': 'DirectoryOrCreate',
      '/run/xtables.lock': 'FileOrCreate',
    });
  });

  it('the ClusterRole grants nodes get/list/watch and nodes/status patch, nothing more', async () => {
    const role = await kc.makeApiClient(RbacAuthorizationV1Api).readClusterRole({ name: 'twill' });
    const rules = (role.rules ?? []).map((r) => ({
      groups: r.apiGroups,
      resources: r.resources,
      verbs: r.verbs,
    }));
    expect(rules).toEqual([
      { groups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
      { groups: [''], resources: ['nodes/status'], verbs: ['patch'] },
    ]);
    const binding = await kc
      .makeApiClient(RbacAuthorizationV1Api)
      .readClusterRoleBinding({ name: 'twill' });
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: 'twill', namespace: NS }]);
  });

  it("the ConfigMap's net-conf.json and conflist pass twill's own parsers", async () => {
    const maps = await kc.makeApiClient(CoreV1Api).listNamespacedConfigMap({ namespace: NS });
    const cfg = maps.items.find((m) => m.metadata?.name?.startsWith('twill-cfg-'));
    expect(cfg?.data?.['net-conf.json']).toBe(
      await readFile(resolve(DEPLOY, 'base', 'net-conf.json'), 'utf8'),
    );
    const net = parseNetConfig(cfg?.data?.['net-conf.json'] ?? '');
    expect(net.backend.type).toBe('vxlan');
    const list = JSON.parse(cfg?.data?.['cni-conf.json'] ?? '') as {
      cniVersion: string;
      name: string;
      plugins: { type: string }[];
    };
    expect(list.plugins.map((p) => p.type)).toEqual(['twill', 'portmap']);
    // the runtime hands each plugin its entry with the list's cniVersion and name
    const twill = parseNetConf(
      JSON.stringify({ cniVersion: list.cniVersion, name: list.name, ...list.plugins[0] }),
    );
    expect(twill.subnetFile).toBe('/run/twill/subnet.env');
  });
});

describe('deploy/overlays/dual-stack', () => {
  it('renders the same objects with a dual-stack net-conf.json that twill parses', async () => {
    const dir = resolve(DEPLOY, 'overlays', 'dual-stack');
    const out = await kubectl(['apply', '--dry-run=server', '-k', dir, '-o', 'json']);
    const list = JSON.parse(out) as { items: { kind: string; data?: Record<string, string> }[] };
    expect(list.items.map((o) => o.kind).sort()).toEqual([
      'ClusterRole',
      'ClusterRoleBinding',
      'ConfigMap',
      'DaemonSet',
      'Namespace',
      'ServiceAccount',
    ]);
    const data = list.items.find((o) => o.kind === 'ConfigMap')?.data ?? {};
    expect(data['net-conf.json']).toBe(await readFile(resolve(dir, 'net-conf.json'), 'utf8'));
    // the CNI conflist is the base's, untouched
    expect(data['cni-conf.json']).toBe(
      await readFile(resolve(DEPLOY, 'base', 'cni-conf.json'), 'utf8'),
    );
    const net = parseNetConfig(data['net-conf.json'] ?? '');
    expect(net.ipv6?.subnetLen).toBe(64);
    expect(net.ipv4?.network.prefix).toBe(16);
  });
});

describe('deploy/overlays/ipv6-only', () => {
  it('renders the same objects with an IPv6-only net-conf.json that twill parses, for the Kubernetes store', async () => {
    const dir = resolve(DEPLOY, 'overlays', 'ipv6-only');
    const out = await kubectl(['apply', '--dry-run=server', '-k', dir, '-o', 'json']);
    const list = JSON.parse(out) as {
      items: { kind: string; data?: Record<string, string>; spec?: V1DaemonSet['spec'] }[];
    };
    expect(list.items.map((o) => o.kind).sort()).toEqual([
      'ClusterRole',
      'ClusterRoleBinding',
      'ConfigMap',
      'DaemonSet',
      'Namespace',
      'ServiceAccount',
    ]);
    const data = list.items.find((o) => o.kind === 'ConfigMap')?.data ?? {};
    expect(data['net-conf.json']).toBe(await readFile(resolve(dir, 'net-conf.json'), 'utf8'));
    // the CNI conflist is the base's, untouched
    expect(data['cni-conf.json']).toBe(
      await readFile(resolve(DEPLOY, 'base', 'cni-conf.json'), 'utf8'),
    );
    const net = parseNetConfig(data['net-conf.json'] ?? '');
    expect(net.ipv4).toBeNull();
    expect(net.ipv6?.subnetLen).toBe(64);
    expect(net.backend.type).toBe('vxlan');
    // IPv6 only needs the Kubernetes store, and no --public-ip (an error with IPv4 off)
    const args =
      list.items
        .find((o) => o.kind === 'DaemonSet')
        ?.spec?.template.spec?.containers.find((c) => c.name === 'twill')?.args ?? [];
    expect(args).toContain('--kube-subnet-mgr');
    expect(args.filter((a) => a.startsWith('--public-ip'))).toEqual([]);
  });
});

function hostPaths(ds: V1DaemonSet): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const v of ds.spec?.template.spec?.volumes ?? [])
    if (v.hostPath) out[v.hostPath.path] = v.hostPath.type;
  return out;
}
