// GC (CNI 1.1): releases every store entry whose attachment (container id +
// ifname) is not in the runtime's `cni.dev/valid-attachments`, and deletes
// the host veths such attachments may have left behind, in one batch.
import { CNI_CODES, fail } from '../errors.ts';
import { deleteLinks } from '../kernel.ts';
import { hostVethName } from '../names.ts';
import { storeFor, type PluginDeps, type Request } from './common.ts';

export async function cmdGc(deps: PluginDeps, req: Request): Promise<void> {
  const { conf } = req;
  const valid = conf.validAttachments;
  if (valid === undefined) fail(CNI_CODES.invalidConfig, 'network config: GC needs "cni.dev/valid-attachments"');
  const keep = new Set(valid.map((a) => `${a.containerId}/${a.ifname}`));
  const store = storeFor(conf);
  const stale = (await store.entries()).filter((e) => !keep.has(`${e.containerId}/${e.ifname}`));
  for (const e of stale) await store.release(e.ip);
  const devs = [...new Set(stale.filter((e) => e.containerId !== '').map((e) => hostVethName(e.containerId, e.ifname)))];
  await deleteLinks(deps, devs);
  deps.log.info('gc', { kept: valid.length, released: stale.map((e) => ({ ip: e.ip, containerId: e.containerId, ifname: e.ifname })) });
}
