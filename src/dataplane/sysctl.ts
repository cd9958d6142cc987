// Kernel settings the overlay depends on: net.ipv4.ip_forward must be 1
// (twill sets it), and bridged pod traffic must pass iptables
// (br_netfilter + bridge-nf-call-iptables), which twill only checks and
// reports: loading modules is the node's business. Read and written through
// /proc/sys of the daemon's own network namespace.
import { readFile, writeFile } from 'node:fs/promises';

const IP_FORWARD = '/proc/sys/net/ipv4/ip_forward';
const BRIDGE_NF = '/proc/sys/net/bridge/bridge-nf-call-iptables';

/** Sets ip_forward to 1 when it is not; true when it had to. */
export async function ensureIpForward(): Promise<boolean> {
  const value = (await readFile(IP_FORWARD, 'utf8')).trim();
  if (value === '1') return false;
  await writeFile(IP_FORWARD, '1\n');
  return true;
}

/** Why bridged pod traffic would bypass iptables, or undefined when it does not. */
export async function bridgeNetfilterProblem(): Promise<string | undefined> {
  let value: string;
  try {
    value = (await readFile(BRIDGE_NF, 'utf8')).trim();
  } catch {
    return 'br_netfilter is not loaded (no /proc/sys/net/bridge): pod-to-service traffic on the bridge bypasses iptables; run `modprobe br_netfilter`';
  }
  return value === '1' ? undefined : `net.bridge.bridge-nf-call-iptables is ${value}: set it to 1 (sysctl -w net.bridge.bridge-nf-call-iptables=1)`;
}
