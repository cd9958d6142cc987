// Names the plugin checks or makes: Linux interface names (CNI_IFNAME, the
// bridge), the netns path, container ids and network names (they become file
// names in the IP store), and the host-side veth name, derived from container
// id + ifname so that DEL and GC find it without any saved state. Every name
// that passes here is also a single plain word for `ip -batch`, whose parser
// splits on white space, treats `#` as a comment and quotes and backslashes
// specially.
import { createHash } from 'node:crypto';

/** Linux's IFNAMSIZ less the terminating NUL. */
const IFNAME_MAX_BYTES = 15;

/** Why `name` is not a usable interface name, or undefined when it is. */
export function ifnameProblem(name: string): string | undefined {
  if (name === '') return 'is empty';
  const bytes = Buffer.byteLength(name, 'utf8');
  if (bytes > IFNAME_MAX_BYTES)
    return `is ${bytes} bytes long; at most ${IFNAME_MAX_BYTES} are allowed`;
  if (name === '.' || name === '..') return 'is not an interface name';
  if (!/^[A-Za-z0-9_.@+-]+$/.test(name))
    return 'may hold only letters, digits and "_", ".", "@", "+", "-"';
  return undefined;
}

/** Why `path` is not a usable CNI_NETNS, or undefined when it is. */
export function netnsProblem(path: string): string | undefined {
  if (!path.startsWith('/')) return 'must be an absolute path';
  // control characters, white space (any), `#`, quotes and backslash: ip -batch would split or cut
  // the line
  if (/[\p{Cc}\s#"'\\]/u.test(path))
    return 'must not contain control characters, white space, "#", quotes or backslashes';
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
