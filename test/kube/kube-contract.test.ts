// The LeaseStore contract against the Kubernetes store and a real
// kube-apiserver, as the user `twill` bound only to deploy/'s ClusterRole.
// The harness plays the kubelet and the controller-manager: it creates each
// node's Node object with a podCIDR (Kubernetes allocates, not twill, so the
// allocation part of the contract does not apply), writes peers' Nodes with
// flannel's annotations, and reads a lease back from the annotations alone.
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { ClientKubeApi } from '../../src/lease/kube-api.ts';
import { KubeLeaseStore } from '../../src/lease/kube-store.ts';
import { leaseStoreContract, type TestNetwork } from '../contract/lease-store.ts';
import type { KubeApiServer } from '../helpers/kube.ts';
import { startKubeTestCluster, type KubeAdmin } from '../helpers/kube-nodes.ts';

const P = 'flannel.alpha.coreos.com';
const NAMES = ['backend-type', 'backend-data', 'public-ip', 'kube-subnet-manager'].map(
  (n) => `${P}/${n}`,
);
let kube: KubeApiServer;
let admin: KubeAdmin;
let kubeconfig: string;
let dir: string;
let seq = 0;

beforeAll(
  async () => void ({ kube, admin, kubeconfig, dir } = await startKubeTestCluster()),
  60_000,
);
afterAll(() => kube?.stop());

/** Flannel's lease JSON for a peer, as annotations. */
function peerAnnotations(n: number, value: string): Record<string, string> {
  try {
    const v = JSON.parse(value) as { PublicIP: string; BackendType: string; BackendData?: unknown };
    return {
      [`${P}/public-ip`]: v.PublicIP,
      [`${P}/backend-type`]: v.BackendType,
      [`${P}/backend-data`]: JSON.stringify(v.BackendData ?? null),
      [`${P}/kube-subnet-manager`]: 'true',
    };
  } catch {
    return {
      [`${P}/public-ip`]: `192.0.2.${n}`,
      [`${P}/backend-type`]: 'vxlan',
      [`${P}/backend-data`]: value,
      [`${P}/kube-subnet-manager`]: 'true',
    };
  }
}

/** A lease read back from a Node's annotations alone, as flannel's JSON. */
async function readLease(name: string): Promise<string | undefined> {
  const a = (await admin.node(name))?.metadata?.annotations ?? {};
  if (a[`${P}/kube-subnet-manager`] !== 'true') return undefined;
  const data = JSON.parse(a[`${P}/backend-data`] ?? 'null') as unknown;
  return JSON.stringify({
    PublicIP: a[`${P}/public-ip`],
    PublicIPv6: null,
    BackendType: a[`${P}/backend-type`],
    ...(data === null ? {} : { BackendData: data }),
  });
}

async function freshNetwork(netconf: string): Promise<TestNetwork> {
  // a fresh cluster: no Node left from the previous test
  for (const n of (await admin.api.listNode()).items)
    await admin.deleteNode(n.metadata?.name ?? '');
  const file = join(dir, `net-conf-${++seq}.json`);
  await writeFile(file, netconf);
  const nodeCidr = (n: number): string => `10.10.${200 + n}.0/24`;
  return {
    configLocation: file,
    setConfig: async (text) => (text === undefined ? rm(file) : writeFile(file, text)),
    async open(n) {
      const name = `node-${n}`;
      if (!(await admin.node(name))) await admin.createNode(name, { podCidr: nodeCidr(n) });
      return new KubeLeaseStore({
        api: new ClientKubeApi({ kubeconfigFile: kubeconfig }),
        nodeName: name,
        netConfigPath: file,
      });
    },
    read: readLease,
    drop: (key) =>
      admin.patchNodeStatus(key, {
        metadata: { annotations: Object.fromEntries(NAMES.map((a) => [a, null])) },
      }),
    async giveAway(key, n) {
      // the Node is deleted and registers again; the controller-manager gives it another podCIDR
      await admin.deleteNode(key);
      await admin.createNode(key, { podCidr: nodeCidr(n) });
    },
    async writePeer(n, value) {
      await admin.createNode(`peer-${n}`, {
        podCidr: `10.10.${n}.0/24`,
        annotations: peerAnnotations(n, value),
      });
      return `peer-${n}`;
    },
    deletePeer: (key) => admin.deleteNode(key),
  };
}

leaseStoreContract('kubernetes', () => ({ network: freshNetwork }));
