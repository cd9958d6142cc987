// Directories for --proc-sys-net in kernel tests (root): a tmpfs holding
// ipv4/ip_forward that can be made read-only, which writes then fail with
// EROFS exactly as a container's /proc/sys does; and bind mounts of the real
// /proc/sys/net, read-only or not, as a DaemonSet's hostPath gives them (net
// sysctls are those of the opening process's namespace, so a daemon in a
// node namespace sees that namespace's values through them); and forwarding
// kept per family inside a namespace, as the daemon asks for it.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from '../../src/exec/runner.ts';
import { nsRunner } from '../../lab/kit/netns.ts';

export interface MountedDir {
  readonly dir: string;
  /** remounts it read-only (true) or read-write (false) */
  readOnly(ro: boolean): Promise<void>;
  /** unmounts and removes it */
  remove(): Promise<void>;
}

function mounted(dir: string, bind: boolean): MountedDir {
  return {
    dir,
    readOnly: async (ro) => {
      // a bind mount's own flag: remounting without `bind` would change /proc's superblock
      await run('mount', ['-o', `remount,${bind ? 'bind,' : ''}${ro ? 'ro' : 'rw'}`, dir]);
    },
    remove: async () => {
      await run('umount', [dir]).catch(() => run('umount', ['-l', dir]));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A tmpfs standing in for /proc/sys/net, with ipv4/ip_forward = `ipForward`, read-only when `ro`.
 */
export async function fakeProcSysNet(o: { ipForward: string; ro: boolean }): Promise<MountedDir> {
  const dir = await mkdtemp(join(tmpdir(), 'twill-procsysnet-'));
  await run('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', dir]);
  await mkdir(join(dir, 'ipv4'));
  await writeFile(join(dir, 'ipv4/ip_forward'), `${o.ipForward}\n`);
  const m = mounted(dir, false);
  if (o.ro) await m.readOnly(true);
  return m;
}

/**
 * The real /proc/sys/net bind-mounted on a temporary directory, read-only when `ro` (a hostPath as
 * the kubelet mounts it).
 */
export async function boundProcSysNet(o: { ro: boolean }): Promise<MountedDir> {
  const dir = await mkdtemp(join(tmpdir(), 'twill-procsysnet-'));
  await run('mount', ['--bind', '/proc/sys/net', dir]);
  const m = mounted(dir, true);
  if (o.ro) await m.readOnly(true);
  return m;
}

/**
 * What the daemon's `ensureForwarding` does, in network namespace `ns` through `sysctl`: the
 * families asked for set to 1 (IPv4's unless `ipv4` is false, IPv6's when `ipv6`), true when one
 * had to be; an IPv6-only node's leaves net.ipv4.ip_forward alone.
 */
export function nsFamilyForwarding(
  ns: string,
): (o?: { ipv4?: boolean; ipv6?: boolean }) => Promise<boolean> {
  const runner = nsRunner(ns);
  const one = async (name: string): Promise<boolean> => {
    if ((await runner('sysctl', ['-n', name])).stdout.trim() === '1') return false;
    await runner('sysctl', ['-qw', `${name}=1`]);
    return true;
  };
  return async (o = {}) => {
    const v4 = o.ipv4 === false ? false : await one('net.ipv4.ip_forward');
    const v6 = o.ipv6 === true ? await one('net.ipv6.conf.all.forwarding') : false;
    return v4 || v6;
  };
}
