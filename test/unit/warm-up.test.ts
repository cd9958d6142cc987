// The build's warm-up (src/cli/warm-up.ts), run from source as the build runs it from the bundle:
// the etcd client against its canned replies, then a host-gw and a dual-stack vxlan daemon in
// nftables mode to a first pass with no failure (warmUp throws otherwise: a warm-up that no
// longer reaches a start's paths fails here, not silently in the cache). Nothing of the host is
// touched: its tools are a shell printing canned output, its servers listen on loopback.
import { describe, expect, it } from 'vitest';
import { warmUp } from '../../src/cli/warm-up.ts';

describe('the warm-up before the code cache is taken', () => {
  it('runs every daemon to a first pass without failures', async () => {
    await expect(warmUp()).resolves.toBeUndefined();
  }, 30_000);
});
