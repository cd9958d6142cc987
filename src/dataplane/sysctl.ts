// Kernel settings the overlay depends on: net.ipv4.ip_forward must be 1
// (twill sets it), with dual-stack net.ipv6.conf.all.forwarding too (with
// IPv4 off, IPv6-only, that one alone), and
// bridged pod traffic must pass iptables (br_netfilter +
// bridge-nf-call-iptables), which twill only checks and reports: loading
// modules is the node's business. Read and written under `dir`, the node
// network namespace's /proc/sys/net (--proc-sys-net): by default
// /proc/sys/net itself, but a container that is not privileged sees its own
// /proc/sys read-only, so there it is a hostPath mount of the host's
// /proc/sys/net (net sysctls are those of the namespace of the process that
// opens them, so the mount shows the host's values to a hostNetwork pod).
//
// Nothing else IPv6 needs is a sysctl: twill-v6.<VNI> is created with
// addrgenmode none and its /128 added nodad (render.ts), so it has no
// link-local address, runs no duplicate address detection and sends no
// router solicitation, whatever accept_dad and accept_ra say; neighbours on
// it are permanent entries, so no neighbour discovery crosses the tunnel.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describeError, TwillError } from '../errors.ts';

/** The default --proc-sys-net. */
export const PROC_SYS_NET = '/proc/sys/net';

const IP_FORWARD = 'ipv4/ip_forward';
const IPV6_FORWARD = 'ipv6/conf/all/forwarding';

/** A path under /proc/sys/net as sysctl names it: ipv4/ip_forward → net.ipv4.ip_forward. */
const sysctlName = (rel: string): string => `net.${rel.replaceAll('/', '.')}`;

/**
 * Sets ip_forward to 1 when it is not; true when it had to. A read or write
 * that fails throws SYSCTL_FAILED naming the file and, for a read-only
 * one, what to mount.
 */
export async function ensureIpForward(
  dir: string,
  o: { readOnlyHint?: string } = {},
): Promise<boolean> {
  return ensureOne(dir, IP_FORWARD, o);
}

/**
 * Sets net.ipv6.conf.all.forwarding to 1 when it is not (dual-stack); true when it had to.
 * Failures as ensureIpForward's. Forwarding on makes the node a router to the kernel: interfaces
 * with accept_ra 1 then ignore router advertisements (2 keeps them), which a node whose IPv6
 * underlay address or default route comes from SLAAC must know; flannel nodes need the same.
 */
export async function ensureIpv6Forward(
  dir: string,
  o: { readOnlyHint?: string } = {},
): Promise<boolean> {
  return ensureOne(dir, IPV6_FORWARD, o);
}

/**
 * Both families' forwarding, as the reconciler's `ensureForwarding` wants it: IPv4's unless
 * `ipv4` is false (IPv6 only: nothing of twill's is routed in IPv4, so it is left as it is),
 * IPv6's when `ipv6`; true when either had to be set. IPv4's is set first, so a failure of
 * IPv6's does not cost it.
 */
export async function ensureForwarding(
  dir: string,
  o: { ipv4?: boolean; ipv6: boolean; readOnlyHint?: string },
): Promise<boolean> {
  const hint = o.readOnlyHint === undefined ? {} : { readOnlyHint: o.readOnlyHint };
  const v4 = o.ipv4 === false ? false : await ensureIpForward(dir, hint);
  const v6 = o.ipv6 ? await ensureIpv6Forward(dir, hint) : false;
  return v4 || v6;
}

/**
 * The sysctls ensureForwarding keeps at 1, by name (the reconciler's log names them):
 * net.ipv4.ip_forward unless `ipv4` is false, and with `ipv6` net.ipv6.conf.all.forwarding.
 */
export function forwardingSysctls(o: { ipv4?: boolean; ipv6: boolean }): string[] {
  return [...(o.ipv4 === false ? [] : [IP_FORWARD]), ...(o.ipv6 ? [IPV6_FORWARD] : [])].map(
    sysctlName,
  );
}

/**
 * `rel` under `dir` ("ipv4/ip_forward") set to 1 when it is not; true when it had to. Read and
 * written synchronously, as every /proc/sys file here: one answers at once, and a round trip
 * through libuv's thread pool costs more (in a CNI ADD, the only use of the pool: its four threads
 * were started for this one read).
 */
async function ensureOne(dir: string, rel: string, o: { readOnlyHint?: string }): Promise<boolean> {
  const name = sysctlName(rel);
  // Node's fs messages already name the errno and the path ("EROFS: read-only file system, open
  // '…'")
  const path = join(dir, rel);
  let value: string;
  try {
    value = readFileSync(path, 'utf8').trim();
  } catch (err) {
    throw new TwillError('SYSCTL_FAILED', `cannot read ${name}: ${describeError(err)}`, {
      cause: err,
    });
  }
  if (value === '1') return false;
  try {
    writeFileSync(path, '1\n');
  } catch (err) {
    const hint =
      errnoOf(err) === 'EROFS'
        ? ` (${o.readOnlyHint ?? "read-only: in a container that is not privileged, mount the host's /proc/sys/net and pass its path as --proc-sys-net"})`
        : '';
    throw new TwillError(
      'SYSCTL_FAILED',
      `${name} is ${value}, cannot set it to 1: ${describeError(err)}${hint}`,
      { cause: err },
    );
  }
  return true;
}

/**
 * Why bridged pod traffic would bypass iptables (an IPv6-only node: ip6tables), or undefined when
 * it does not.
 */
export async function bridgeNetfilterProblem(
  dir: string,
  o: { ipv6Only?: boolean } = {},
): Promise<string | undefined> {
  const [tool, key] = o.ipv6Only
    ? ['ip6tables', 'bridge-nf-call-ip6tables']
    : ['iptables', 'bridge-nf-call-iptables'];
  let value: string;
  try {
    value = readFileSync(join(dir, 'bridge', key), 'utf8').trim();
  } catch {
    return `br_netfilter is not loaded (no ${join(dir, 'bridge')}): pod-to-service traffic on the bridge bypasses ${tool}; run \`modprobe br_netfilter\``;
  }
  return value === '1'
    ? undefined
    : `net.bridge.${key} is ${value}: set it to 1 (sysctl -w net.bridge.${key}=1)`;
}

function errnoOf(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException | undefined)?.code;
}
