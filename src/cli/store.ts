// The etcd lease store from `twill run`'s flags: one place for `run`,
// `status` and `doctor`, so the three look at the same store the same way.
import { TwillError } from '../errors.ts';
import { EtcdKv } from '../lease/etcd-kv.ts';
import { KvLeaseStore } from '../lease/kv-store.ts';
import type { RunFlags } from './flags.ts';

export async function openStore(flags: RunFlags, o: { callTimeoutMs?: number } = {}): Promise<KvLeaseStore> {
  if (flags.kubeSubnetMgr) throw new TwillError('CONFIG_UNSUPPORTED', '--kube-subnet-mgr: the Kubernetes lease store is not part of this version yet; use --etcd-endpoints');
  const kv = await EtcdKv.connect({
    endpoints: flags.etcdEndpoints,
    caFile: flags.etcdCafile,
    certFile: flags.etcdCertfile,
    keyFile: flags.etcdKeyfile,
    username: flags.etcdUsername,
    password: flags.etcdPassword,
    ...(o.callTimeoutMs === undefined ? {} : { callTimeoutMs: o.callTimeoutMs }),
  });
  return new KvLeaseStore({ kv, prefix: flags.etcdPrefix });
}
