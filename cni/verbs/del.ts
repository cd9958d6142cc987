// DEL: idempotent and best effort. The host veth is found by name (derived
// from container id + ifname), so neither the netns nor subnet.env is
// needed; deleting it removes the pod's end too. Only once the veth is gone
// are the attachment's addresses released (under the store's lock): an
// address is never free while an interface still carries it, and when the
// veth cannot be deleted the call fails and the address stays reserved for
// the runtime's retry. Everything already gone counts as done.
import { deleteLink } from '../kernel.ts';
import { hostVethName } from '../names.ts';
import { storeFor, type PluginDeps, type Request } from './common.ts';

export async function cmdDel(deps: PluginDeps, req: Request): Promise<void> {
  const { env, conf } = req;
  const dev = hostVethName(env.containerId, env.ifname);
  const deleted = await deleteLink(deps, dev);
  const released = await storeFor(conf, deps.log).releaseAttachment(env.containerId, env.ifname);
  deps.log.info('deleted', { dev, linkWasThere: deleted, released });
}
