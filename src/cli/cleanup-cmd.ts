// `twill run --cleanup`: removes twill's kernel state from this node (src/dataplane/cleanup.ts)
// and exits, 0 when everything of twill's is gone (nothing there is success too), 1 when something
// could not be read or removed (the rest is removed all the same). It reads no store and starts
// no daemon: it is the uninstall step, run on each node once the DaemonSet is deleted
// (docs/operations.md, "Uninstalling").
import { cleanup } from '../dataplane/cleanup.ts';
import { describeError } from '../errors.ts';
import { run } from '../exec/runner.ts';
import { createLogger } from '../log.ts';
import type { RunFlags } from './flags.ts';

/** How long the reads and deletes may take in all. */
const CLEANUP_TIMEOUT_MS = 120_000;

export async function cleanupCommand(flags: RunFlags, o: { nodeName: string }): Promise<number> {
  const logger = createLogger({ level: flags.logLevel, node: o.nodeName });
  logger.info(
    "removing twill's kernel state from this node (chains, nftables tables, devices, routes)",
  );
  try {
    const r = await cleanup(run, logger, AbortSignal.timeout(CLEANUP_TIMEOUT_MS));
    if (r.failures.length > 0 || r.unread.length > 0) {
      const what = [
        ...(r.failures.length > 0 ? [`${r.failures.length} object(s) could not be removed`] : []),
        ...(r.unread.length > 0 ? [`${r.unread.length} read(s) failed`] : []),
      ];
      logger.error(
        { removed: r.removed.length, failed: r.failures.length, unread: r.unread.length },
        `cleanup incomplete: ${what.join(', ')}; removed ${r.removed.length} object(s)`,
      );
      return 1;
    }
    logger.info(
      { removed: r.removed.length },
      r.removed.length === 0
        ? 'cleanup done: nothing of twill was left on this node'
        : `cleanup done: removed ${r.removed.length} object(s)`,
    );
    return 0;
  } catch (err) {
    logger.error(`cleanup failed: ${describeError(err)}`);
    return 1;
  }
}
