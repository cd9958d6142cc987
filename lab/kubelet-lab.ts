// The control-plane side of the kubelet lab (`up --kubelet`), next to the
// kube-apiserver of netns-kube.ts in the lab's etcd namespace:
//   - static tokens for every kubelet (user system:node:<name>, group
//     system:nodes: the Node authorizer's view of a node) and for kube-proxy
//     (system:kube-proxy, which the default RBAC binds to system:node-proxier);
//   - kube-controller-manager (`--allocate-node-cidrs`, `--cluster-cidr` = the
//     net-conf Network: podCIDRs come from Kubernetes itself; its token
//     controller gives twill's ServiceAccount its token) and kube-scheduler;
//   - deploy/ applied as shipped through the overlay deploy/overlays/lab,
//     which changes only the image reference;
//   - the lab's test pods: toolbox pods pinned to a node, each serving its own
//     name over HTTP on TEST_POD_PORT (the Service drill reads it back).
import { appendFile, readFile, writeFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join, resolve } from 'node:path';
import { apiServerFiles, kubeconfigText } from './kube-apiserver.ts';
import type { KubeLab } from './netns-kube.ts';

export const CLUSTER_CIDR = '10.244.0.0/16';
export const SERVICE_CIDR = '10.96.0.0/12';
export const LAB_OVERLAY = resolve(import.meta.dirname, '../deploy/overlays/lab');
export const TOOLBOX_IMAGE = 'twill.local/toolbox:lab';
/** the label every test pod carries (and the Service drill selects on, with the node) */
export const TEST_POD_LABEL = 'twill-lab/test-pod';
export const TEST_POD_PORT = 8080;
/**
 * a NoExecute taint twill's DaemonSet does not tolerate: it takes twill off a node, and test pods
 * tolerate it
 */
export const TWILL_DOWN_TAINT = 'twill-lab/twill-down';
/**
 * how many kubelet tokens `up` writes (the apiserver reads its token file once): node names
 * n1..n<this>
 */
export const MAX_KUBELET_NODES = 32;

interface Tokens {
  readonly kubelets: Record<string, string>;
  readonly kubeProxy: string;
}

function tokensFile(k: KubeLab): string {
  return join(k.dir, 'node-tokens.json');
}

/** Adds the kubelets' and kube-proxy's tokens to the apiserver's token file (before it starts). */
export async function writeNodeCredentials(k: KubeLab): Promise<void> {
  const kubelets: Record<string, string> = {};
  const lines: string[] = [];
  for (let i = 1; i <= MAX_KUBELET_NODES; i++) {
    const token = randomBytes(24).toString('hex');
    kubelets[`n${i}`] = token;
    lines.push(`${token},system:node:n${i},system:node:n${i},system:nodes`);
  }
  const kubeProxy = randomBytes(24).toString('hex');
  lines.push(`${kubeProxy},system:kube-proxy,system:kube-proxy`);
  await appendFile(apiServerFiles(k.dir).tokens, `${lines.join('\n')}\n`);
  const tokens: Tokens = { kubelets, kubeProxy };
  await writeFile(tokensFile(k), JSON.stringify(tokens), { mode: 0o600 });
}

/** The kubeconfigs of node `name`'s kubelet and kube-proxy. */
export async function nodeKubeconfigs(
  k: KubeLab,
  name: string,
): Promise<{ kubelet: string; kubeProxy: string }> {
  const tokens = JSON.parse(await readFile(tokensFile(k), 'utf8')) as Tokens;
  const token = tokens.kubelets[name];
  if (token === undefined)
    throw new Error(
      `the kubelet lab has credentials for nodes n1..n${MAX_KUBELET_NODES} only, not ${name}`,
    );
  const { caFile } = apiServerFiles(k.dir);
  return {
    kubelet: kubeconfigText({ url: k.url, caFile, token }),
    kubeProxy: kubeconfigText({ url: k.url, caFile, token: tokens.kubeProxy }),
  };
}

export function controllerManagerArgs(k: KubeLab): string[] {
  const f = apiServerFiles(k.dir);
  return [
    `--kubeconfig=${k.admin.kubeconfig}`,
    `--bind-address=${k.host}`,
    '--port=0',
    '--leader-elect=false',
    '--allocate-node-cidrs=true',
    `--cluster-cidr=${CLUSTER_CIDR}`,
    '--node-cidr-mask-size=24',
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    `--service-account-private-key-file=${f.saKey}`,
    `--root-ca-file=${f.caFile}`,
    '--controllers=*,tokencleaner',
    '--v=1',
  ];
}

export function schedulerArgs(k: KubeLab): string[] {
  return [
    `--kubeconfig=${k.admin.kubeconfig}`,
    `--bind-address=${k.host}`,
    '--port=0',
    '--leader-elect=false',
    '--v=1',
  ];
}

/** A test pod on `node`: the toolbox, serving its name on TEST_POD_PORT. */
export function testPod(name: string, node: string): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: 'default',
      labels: { [TEST_POD_LABEL]: 'true', 'twill-lab/node': node },
    },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': node },
      // the drill that keeps twill off a node taints it: test pods stay
      tolerations: [{ key: TWILL_DOWN_TAINT, operator: 'Exists', effect: 'NoExecute' }],
      terminationGracePeriodSeconds: 1,
      containers: [
        {
          name: 'toolbox',
          image: TOOLBOX_IMAGE,
          imagePullPolicy: 'Never',
          command: [
            'sh',
            '-c',
            `mkdir -p /www && hostname > /www/index.html && exec httpd -f -p ${TEST_POD_PORT} -h /www`,
          ],
          ports: [{ containerPort: TEST_POD_PORT }],
        },
      ],
    },
  });
}
