// The sysctls through a directory (--proc-sys-net), here a temporary one
// standing in for /proc/sys/net: ip_forward 0 is written to 1 and 1 is left
// alone; a file that cannot be read or written is SYSCTL_FAILED naming it;
// br_netfilter and bridge-nf-call-iptables are read from the same place;
// with dual-stack net.ipv6.conf.all.forwarding is kept at 1 the same way, and
// with IPv4 off (IPv6 only) it alone: ip_forward is left as it is.
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  bridgeNetfilterProblem,
  ensureForwarding,
  ensureIpForward,
  ensureIpv6Forward,
  forwardingSysctls,
} from '../../src/dataplane/sysctl.ts';

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

describe('IPv6 forwarding', () => {
  const v6 = (): string => join(dir, 'ipv6/conf/all/forwarding');

  it('writes 1 where net.ipv6.conf.all.forwarding reads 0, and names it when it cannot', async () => {
    await expect(ensureIpv6Forward(dir)).rejects.toMatchObject({
      code: 'SYSCTL_FAILED',
      message: expect.stringMatching(/^cannot read net\.ipv6\.conf\.all\.forwarding: ENOENT/),
    });
    await mkdir(join(dir, 'ipv6/conf/all'), { recursive: true });
    await writeFile(v6(), '0\n');
    expect(await ensureIpv6Forward(dir)).toBe(true);
    expect(await readFile(v6(), 'utf8')).toBe('1\n');
    expect(await ensureIpv6Forward(dir)).toBe(false);
  });

  it('keeps both families with IPv6 on, only IPv4 with it off', async () => {
    await mkdir(join(dir, 'ipv6/conf/all'), { recursive: true });
    await writeFile(ipForward(), '1\n');
    await writeFile(v6(), '0\n');
    expect(await ensureForwarding(dir, { ipv6: false })).toBe(false);
    expect(await readFile(v6(), 'utf8')).toBe('0\n');
    expect(await ensureForwarding(dir, { ipv6: true })).toBe(true);
    expect(await readFile(v6(), 'utf8')).toBe('1\n');
    await writeFile(ipForward(), '0\n');
    expect(await ensureForwarding(dir, { ipv6: true })).toBe(true);
    expect(await readFile(ipForward(), 'utf8')).toBe('1\n');
    expect(await ensureForwarding(dir, { ipv6: true })).toBe(false);
  });

  it('with IPv4 off keeps only IPv6 forwarding, leaving ip_forward as it is (even missing)', async () => {
    await mkdir(join(dir, 'ipv6/conf/all'), { recursive: true });
    await writeFile(ipForward(), '0\n');
    await writeFile(v6(), '0\n');
    expect(await ensureForwarding(dir, { ipv4: false, ipv6: true })).toBe(true);
    expect(await readFile(v6(), 'utf8')).toBe('1\n');
    expect(await readFile(ipForward(), 'utf8')).toBe('0\n');
    expect(await ensureForwarding(dir, { ipv4: false, ipv6: true })).toBe(false);
    await rm(join(dir, 'ipv4'), { recursive: true });
    expect(await ensureForwarding(dir, { ipv4: false, ipv6: true })).toBe(false);
  });

  it('names the sysctls each family set keeps', () => {
    expect(forwardingSysctls({ ipv6: false })).toEqual(['net.ipv4.ip_forward']);
    expect(forwardingSysctls({ ipv4: true, ipv6: true })).toEqual([
      'net.ipv4.ip_forward',
      'net.ipv6.conf.all.forwarding',
    ]);
    expect(forwardingSysctls({ ipv4: false, ipv6: true })).toEqual([
      'net.ipv6.conf.all.forwarding',
    ]);
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

  it('reads bridge-nf-call-ip6tables instead on an IPv6-only node', async () => {
    await mkdir(join(dir, 'bridge'), { recursive: true });
    await writeFile(join(dir, 'bridge/bridge-nf-call-iptables'), '1\n');
    await writeFile(join(dir, 'bridge/bridge-nf-call-ip6tables'), '0\n');
    expect(await bridgeNetfilterProblem(dir, { ipv6Only: true })).toBe(
      'net.bridge.bridge-nf-call-ip6tables is 0: set it to 1 (sysctl -w net.bridge.bridge-nf-call-ip6tables=1)',
    );
    expect(await bridgeNetfilterProblem(dir)).toBeUndefined();
    await writeFile(join(dir, 'bridge/bridge-nf-call-ip6tables'), '1\n');
    expect(await bridgeNetfilterProblem(dir, { ipv6Only: true })).toBeUndefined();
  });
});
