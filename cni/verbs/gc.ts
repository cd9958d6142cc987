// GC (CNI 1.1): releases every store entry whose attachment (container id +
// ifname) is not in the runtime's valid list, after deleting the host veths
// such attachments left behind (in one batch), so that no address is handed
// out again while a veth still carries it. Only entries written more than
// GC_GRACE_MS before GC started are considered, and each is released only if,
// right before its file is deleted, it still names the same owner and is
// still that old: an ADD in flight (address reserved, not yet in the
// runtime's list) keeps its veth and its address. The scan and each
// re-check-then-unlink run under the store's lock (not the veth deletion in
// between: ADDs would wait on `ip`). GC goes on past failures and reports
// them all at the end, as the spec asks.
import { CNI_CODES, fail } from '../errors.ts';
import type { StoreEntry } from '../ipam/store.ts';
import { deleteLinks } from '../kernel.ts';
import { hostVethName } from '../names.ts';
import { storeFor, type PluginDeps, type Request } from './common.ts';

/**
 * Entries written this shortly before GC started are kept: longer than an ADD may take (its
 * processes time out after 10 s each).
 */
export const GC_GRACE_MS = 60_000;

const key = (containerId: string, ifname: string): string => `${containerId}/${ifname}`;

function vethOf(e: StoreEntry): string | undefined {
  return e.containerId === '' ? undefined : hostVethName(e.containerId, e.ifname);
}

export async function cmdGc(deps: PluginDeps, req: Request): Promise<void> {
  const { conf } = req;
  const notAfterMs = Date.now() - GC_GRACE_MS;
  const valid = conf.validAttachments;
  if (valid === undefined)
    fail(
      CNI_CODES.invalidConfig,
      'network config: GC needs "cni.dev/valid-attachments" (or "cni.dev/attachments")',
    );
  const keep = new Set(valid.map((a) => key(a.containerId, a.ifname)));
  const store = storeFor(conf, deps.log);
  // an entry written since (GC start - grace) may be an ADD in flight: neither its veth nor its
  // address is touched
  const stale = (await store.snapshot()).filter(
    (e) => !keep.has(key(e.containerId, e.ifname)) && e.writtenMs < notAfterMs,
  );
  const errors: string[] = [];
  const devs = [...new Set(stale.map(vethOf).filter((d) => d !== undefined))];
  const undeleted = await deleteLinks(deps, devs).catch(
    (err: unknown) => new Map(devs.map((d) => [d, String(err)])),
  );
  for (const [dev, why] of undeleted) errors.push(`cannot delete veth ${dev}: ${why}`);
  const outcomes: Record<string, string> = {};
  for (const e of stale) {
    const dev = vethOf(e);
    if (dev !== undefined && undeleted.has(dev)) {
      outcomes[e.ip] = 'kept: its veth is still there';
      continue;
    }
    try {
      outcomes[e.ip] = await store.releaseIfStale(e, notAfterMs);
    } catch (err) {
      errors.push(`cannot release ${e.ip} (${key(e.containerId, e.ifname)}): ${String(err)}`);
    }
  }
  deps.log.info('gc', {
    kept: valid.length,
    stale: stale.map((e) => ({
      ip: e.ip,
      containerId: e.containerId,
      ifname: e.ifname,
      outcome: outcomes[e.ip],
    })),
  });
  if (errors.length > 0)
    fail(CNI_CODES.internal, `GC finished with ${errors.length} error(s): ${errors.join('; ')}`);
}
