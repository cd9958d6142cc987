// DEL: idempotent and best effort. The host veth is found by name (derived
// from container id + ifname), so neither the netns nor subnet.env is
// needed; deleting it removes the pod's end too. The attachment's addresses
// are released at the same time (the bridge plugin, too, releases before it
// deletes the link): the kernel takes ~15 ms to unregister a veth, and the
// store work overlaps it. Everything already gone counts as done.
import { deleteLink } from '../kernel.ts';
import { hostVethName } from '../names.ts';
import { storeFor, type PluginDeps, type Request } from './common.ts';

export async function cmdDel(deps: PluginDeps, req: Request): Promise<void> {
  const { env, conf } = req;
  const dev = hostVethName(env.containerId, env.ifname);
  const [deleted, released] = await Promise.all([deleteLink(deps, dev), storeFor(conf, deps.log).releaseAttachment(env.containerId, env.ifname)]);
  deps.log.info('deleted', { dev, linkWasThere: deleted, released });
}
