// A big plan applied with `ip monitor` stopped, on a real kernel: a reconciler with its monitors
// (wired as the daemon wires them) starts over 336 vxlan peers, 1,008 entries, at least
// QUIET_MIN_ENTRIES. While the batch that writes them runs, no `ip monitor` runs in the node's
// namespace; a route deleted by someone else right after that batch (while the monitor is still
// stopped) is put back by the full pass the monitor's restart asks for; and once converged the
// monitor is back: a route deleted by hand is repaired by a repair pass, which only a monitor
// event starts.
import { readdir, readFile, readlink } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QUIET_MIN_ENTRIES } from '../../src/dataplane/reconciler.ts';
import type { Runner } from '../../src/exec/runner.ts';
import { backendInput, kernelView, peerLease } from '../helpers/dataplane.ts';
import { startGuardedNode, type GuardedNode } from '../helpers/guarded.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const PEERS = Array.from({ length: 337 }, (_, i) => i + 1).filter((n) => n !== 3);
/** deleted right after the big batch, as another program might while the monitor is stopped */
const LOST = '10.244.7.0/24';
/** deleted by hand once converged */
const LATER = '10.244.9.0/24';

let node: GuardedNode;
/** the node's namespace, as /proc/PID/ns/net reads */
let netns = '';
/** the `ip monitor` processes in the node's namespace when each big batch began */
const monitorsAtBigBatch: number[] = [];

/** `ip monitor` processes in the network namespace `netns` (as /proc/PID/ns/net reads). */
async function ipMonitorsIn(netns: string): Promise<number> {
  let count = 0;
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0');
      if (argv[0]?.endsWith('ip') !== true || argv[1] !== 'monitor') continue;
      if ((await readlink(`/proc/${pid}/ns/net`)) === netns) count++;
    } catch {
      // the process ended meanwhile
    }
  }
  return count;
}

/** The namespace a runner runs in, as /proc/PID/ns/net reads ("net:[…]"). */
async function netnsOf(r: Runner): Promise<string> {
  return (await r('readlink', ['/proc/self/ns/net'])).stdout.trim();
}

const routeDsts = async (r: Runner): Promise<string[]> =>
  (await kernelView(r)).routes.map((x) => x.split(' ')[0] ?? '');

beforeAll(async () => {
  expect(PEERS.length * 3).toBeGreaterThanOrEqual(QUIET_MIN_ENTRIES);
  let lost = false;
  /** the reconciler's runner before the wrapping */
  let plain: Runner | undefined;
  const nodeNetns = async (): Promise<string> => {
    if (!plain) throw new Error('no runner yet');
    netns ||= await netnsOf(plain);
    return netns;
  };
  const isBig = (args: readonly string[], input: string): boolean =>
    args.includes('-batch') && input.split('\n').length >= QUIET_MIN_ENTRIES / 3;
  /** deletes LOST once, after the batch that added it */
  const loseOnce = async (input: string): Promise<void> => {
    if (lost || !plain || !input.includes(`route add ${LOST}`)) return;
    lost = true;
    await plain('ip', ['route', 'del', LOST]);
  };
  node = await startGuardedNode({
    short: 'quiet',
    input: backendInput({
      backend: 'vxlan',
      peers: PEERS.map((n) => peerLease(n, { vxlan: true })),
    }),
    watch: 'nft',
    settleMs: 5,
    convergeMs: 60_000,
    wrapRunner: (inner) => {
      plain = inner;
      return async (file, args, opts) => {
        const input = opts?.input ?? '';
        const big = isBig(args, input);
        if (big) monitorsAtBigBatch.push(await ipMonitorsIn(await nodeNetns()));
        const result = await inner(file, args, opts);
        if (big && file === 'ip') await loseOnce(input);
        return result;
      };
    },
    // a batch of more than PIECE_OPS ops is fed to its process piece by piece (apply.ts): looked
    // at once its first piece is written, and done only after the route is deleted
    wrapFeed: (inner) => (file, args, opts) => {
      const fed = inner(file, args, opts);
      let text = '';
      let monitors: Promise<number> | undefined;
      return {
        done: fed.done,
        write: (piece) => {
          monitors ??= nodeNetns().then(ipMonitorsIn);
          text += piece;
          fed.write(piece);
        },
        end: async (last) => {
          text += last ?? '';
          const seen = await monitors;
          const result = await fed.end(last);
          if (seen !== undefined && isBig(args, text)) {
            monitorsAtBigBatch.push(seen);
            if (file === 'ip') await loseOnce(text);
          }
          return result;
        },
      };
    },
  });
}, 90_000);
afterAll(() => node.stop());

describe('a big plan with ip monitor stopped', () => {
  it('ran its batches with no ip monitor in the namespace', () => {
    // bridge (FDB entries), ip (neighbours and routes)
    expect(monitorsAtBigBatch.length).toBeGreaterThanOrEqual(2);
    expect(monitorsAtBigBatch.every((n) => n === 0)).toBe(true);
  });

  it('the route deleted while the monitor was stopped is back, by the pass its restart asked for', async () => {
    await waitFor(async () => (await routeDsts(node.runner)).includes(LOST), {
      timeoutMs: 20_000,
      what: `${LOST} put back`,
    });
    expect(await routeDsts(node.runner)).toHaveLength(PEERS.length);
    const putBack = node.log.lines.filter(
      (l) => (l.ops as Record<string, number> | undefined)?.['route add'] === 1,
    );
    expect(putBack.length).toBeGreaterThanOrEqual(1);
  });

  it('the monitor is back: a route deleted by hand is repaired from its event', async () => {
    await waitFor(async () => (await ipMonitorsIn(netns)) === 1, {
      timeoutMs: 10_000,
      what: 'ip monitor running again',
    });
    const before = node.repairPasses().length;
    await node.runner('ip', ['route', 'del', LATER]);
    await waitFor(async () => (await routeDsts(node.runner)).includes(LATER), {
      timeoutMs: 20_000,
      what: `${LATER} repaired`,
    });
    const passes = node.repairPasses().slice(before);
    expect(passes.map((p) => p.kind)).toContain('repair');
  });
});
