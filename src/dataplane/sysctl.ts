// Kernel settings the overlay depends on: net.ipv4.ip_forward must be 1
// (twill sets it), and bridged pod traffic must pass iptables
// (br_netfilter + bridge-nf-call-iptables), which twill only checks and
// reports: loading modules is the node's business. Read and written under
// `dir`, the node network namespace's /proc/sys/net (--proc-sys-net): by
// default /proc/sys/net itself, but a container that is not privileged sees
// its own /proc/sys read-only, so there it is a hostPath mount of the host's
// /proc/sys/net (net sysctls are those of the namespace of the process that
// opens them, so the mount shows the host's values to a hostNetwork pod).
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describeError, TwillError } from '../errors.ts';

/** The default --proc-sys-net. */
export const PROC_SYS_NET = '/proc/sys/net';

/**
 * Sets ip_forward to 1 when it is not; true when it had to. A read or write
 * that fails throws SYSCTL_FAILED naming the file and, for a read-only
 * one, what to mount.
 */
export async function ensureIpForward(
  dir: string,
  o: { readOnlyHint?: string } = {},
): Promise<boolean> {
  // Node's fs messages already name the errno and the path ("EROFS: read-only file system, open
  // '…'")
  const path = join(dir, 'ipv4/ip_forward');
  let value: string;
  try {
    value = (await readFile(path, 'utf8')).trim();
  } catch (err) {
    throw new TwillError(
      'SYSCTL_FAILED',
      `cannot read net.ipv4.ip_forward: ${describeError(err)}`,
      { cause: err },
    );
  }
  if (value === '1') return false;
  try {
    await writeFile(path, '1\n');
  } catch (err) {
    const hint =
      errnoOf(err) === 'EROFS'
        ? ` (${o.readOnlyHint ?? "read-only: in a container that is not privileged, mount the host's /proc/sys/net and pass its path as --proc-sys-net"})`
        : '';
    throw new TwillError(
      'SYSCTL_FAILED',
      `net.ipv4.ip_forward is ${value}, cannot set it to 1: ${describeError(err)}${hint}`,
      { cause: err },
    );
  }
  return true;
}

/** Why bridged pod traffic would bypass iptables, or undefined when it does not. */
export async function bridgeNetfilterProblem(dir: string): Promise<string | undefined> {
  let value: string;
  try {
    value = (await readFile(join(dir, 'bridge/bridge-nf-call-iptables'), 'utf8')).trim();
  } catch {
    return `br_netfilter is not loaded (no ${join(dir, 'bridge')}): pod-to-service traffic on the bridge bypasses iptables; run \`modprobe br_netfilter\``;
  }
  return value === '1'
    ? undefined
    : `net.bridge.bridge-nf-call-iptables is ${value}: set it to 1 (sysctl -w net.bridge.bridge-nf-call-iptables=1)`;
}

function errnoOf(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}
