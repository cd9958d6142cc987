// Names the plugin checks or makes: Linux interface names (CNI_IFNAME, the
// bridge), container ids and network names (they become file names in the
// IP store), and the host-side veth name, derived from container id +
// ifname so that DEL and GC find it without any saved state.
import { createHash } from 'node:crypto';

/** Why `name` is not a usable Linux interface name, or undefined when it is. */
export function ifnameProblem(name: string): string | undefined {
  if (name === '') return 'is empty';
  if (name.length > 15) return `is ${name.length} characters long; at most 15 are allowed`;
  if (name === '.' || name === '..') return 'is not an interface name';
  if (/[/:\s]/.test(name)) return 'contains "/", ":" or white space';
  return undefined;
}

/** The spec's rule for container ids, which also keeps them safe as file content and names. */
export function isContainerId(id: string): boolean {
  return /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/.test(id);
}

/** The spec's rule for network names (they become a directory of the IP store). */
export function isNetworkName(name: string): boolean {
  return /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/.test(name);
}

/** `twv` + 12 hex digits of sha256(containerId/ifname): 15 characters, stable. */
export function hostVethName(containerId: string, ifname: string): string {
  return `twv${createHash('sha256').update(`${containerId}/${ifname}`).digest('hex').slice(0, 12)}`;
}
