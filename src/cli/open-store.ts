// The lease store from `twill run`'s flags: one place for `run`, `status`
// and `doctor`, so the three look at the same store the same way. etcd by
// default; with --kube-subnet-mgr the Kubernetes API. Each client is
// loaded only in its mode (its modules initialized only then): the etcd one
// brings node:net and twill's HTTP/2 client (about 4 MiB of RSS; node:tls
// too, about 6 more, only for https:// endpoints), the Kubernetes one
// node:https and js-yaml (about 11), and a node never needs both.
import { hostname } from 'node:os';
import type { LeaseStore } from '../lease/types.ts';
import type { RunFlags } from './flags.ts';

/**
 * This node's name: --node-name, else $NODE_NAME (the DaemonSet sets it from spec.nodeName), else
 * the host name.
 */
export function nodeNameOf(flags: RunFlags, env: NodeJS.ProcessEnv): string {
  return flags.nodeName ?? env.NODE_NAME ?? hostname();
}

export async function openStore(
  flags: RunFlags,
  o: { nodeName: string; callTimeoutMs?: number },
): Promise<LeaseStore> {
  const timeout = o.callTimeoutMs === undefined ? {} : { callTimeoutMs: o.callTimeoutMs };
  if (flags.kubeSubnetMgr) {
    const { ClientKubeApi } = await import('../lease/kube-api.ts');
    const { KubeLeaseStore } = await import('../lease/kube-store.ts');
    const api = new ClientKubeApi({
      kubeconfigFile: flags.kubeconfigFile,
      apiUrl: flags.kubeApiUrl,
      ...timeout,
    });
    return new KubeLeaseStore({
      api,
      nodeName: o.nodeName,
      netConfigPath: flags.netConfigPath,
      annotationPrefix: flags.kubeAnnotationPrefix,
    });
  }
  const { EtcdKv } = await import('../lease/etcd-kv.ts');
  const { KvLeaseStore } = await import('../lease/kv-store.ts');
  const kv = await EtcdKv.connect({
    endpoints: flags.etcdEndpoints,
    caFile: flags.etcdCafile,
    certFile: flags.etcdCertfile,
    keyFile: flags.etcdKeyfile,
    username: flags.etcdUsername,
    password: flags.etcdPassword,
    ...timeout,
  });
  return new KvLeaseStore({ kv, prefix: flags.etcdPrefix });
}
