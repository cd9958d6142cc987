// The sysctls through a directory (--proc-sys-net), here a temporary one
// standing in for /proc/sys/net: ip_forward 0 is written to 1 and 1 is left
// alone; a file that cannot be read or written is SYSCTL_FAILED naming it;
// br_netfilter and bridge-nf-call-iptables are read from the same place.
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { bridgeNetfilterProblem, ensureIpForward } from '../../src/dataplane/sysctl.ts';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'twill-sysctl-'));
  await mkdir(join(dir, 'ipv4'));
});
afterEach(() => rm(dir, { recursive: true, force: true }));

const ipForward = (): string => join(dir, 'ipv4/ip_forward');

describe('ensureIpForward', () => {
  it('writes 1 where ip_forward reads 0, and says it had to', async () => {
    await writeFile(ipForward(), '0\n');
    expect(await ensureIpForward(dir)).toBe(true);
    expect(await readFile(ipForward(), 'utf8')).toBe('1\n');
    expect(await ensureIpForward(dir)).toBe(false);
  });

  it('leaves 1 alone (no write at all: a read-only mount that already says 1 is fine)', async () => {
    await writeFile(ipForward(), '1\n');
    const before = (await stat(ipForward())).mtimeMs;
    await new Promise((r) => setTimeout(r, 20));
    expect(await ensureIpForward(dir)).toBe(false);
    expect((await stat(ipForward())).mtimeMs).toBe(before);
  });

  it('is SYSCTL_FAILED naming the file when it cannot be read or written', async () => {
    await expect(ensureIpForward(dir)).rejects.toMatchObject({
      code: 'SYSCTL_FAILED',
      message: expect.stringMatching(
        /^cannot read net\.ipv4\.ip_forward: ENOENT: .*ipv4\/ip_forward/,
      ),
    });
    // a directory in its place: reads fail the same way as any other read error
    await mkdir(ipForward());
    await expect(ensureIpForward(dir)).rejects.toMatchObject({
      code: 'SYSCTL_FAILED',
      message: expect.stringContaining('EISDIR'),
    });
  });
});

describe('bridgeNetfilterProblem', () => {
  it('reads bridge-nf-call-iptables under the directory', async () => {
    expect(await bridgeNetfilterProblem(dir)).toBe(
      `br_netfilter is not loaded (no ${join(dir, 'bridge')}): pod-to-service traffic on the bridge bypasses iptables; run \`modprobe br_netfilter\``,
    );
    await mkdir(join(dir, 'bridge'));
    await writeFile(join(dir, 'bridge/bridge-nf-call-iptables'), '0\n');
    expect(await bridgeNetfilterProblem(dir)).toBe(
      'net.bridge.bridge-nf-call-iptables is 0: set it to 1 (sysctl -w net.bridge.bridge-nf-call-iptables=1)',
    );
    await writeFile(join(dir, 'bridge/bridge-nf-call-iptables'), '1\n');
    expect(await bridgeNetfilterProblem(dir)).toBeUndefined();
  });
});
