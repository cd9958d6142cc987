// Where twill lives and how to start it: built, as it runs when installed
// (the lab and the bench), or from source (the tests, which need no build);
// and the `twill run` command line of a host on the underlay.
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ALLOCATOR_ENV } from '../../src/cli/allocator.ts';
import { shebangCommand } from '../../src/cli/code-cache.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const TWILL_MAIN = join(ROOT, 'dist/src/cli/main.js');
export const TWILL_CNI = join(ROOT, 'dist/twill-cni');
const SOURCE_MAIN = join(ROOT, 'src/cli/main.ts');

/**
 * How to start the built `twill` command as its shebang line does, with this Node, in the
 * environment a deployed one has: the allocator's preload (ALLOCATOR_ENV, as the image's ENV),
 * the environment the shebang sets (through env(1), which execs Node in the same process), the
 * node flags (`extraNodeFlags` after them), the built main.
 */
export async function twillCommand(extraNodeFlags: readonly string[] = []): Promise<string[]> {
  const first = (await readFile(TWILL_MAIN, 'utf8')).split('\n')[0] ?? '';
  const { env, flags } = shebangCommand(first);
  const launch = [process.execPath, ...flags, ...extraNodeFlags, TWILL_MAIN];
  // and the allocator the image and the units preload (src/cli/allocator.ts)
  const allocator = Object.entries(ALLOCATOR_ENV).map(([k, v]) => `${k}=${v}`);
  return ['/usr/bin/env', ...allocator, ...env, ...launch];
}

/** How to start `twill` from its source, with this Node. */
export function twillSourceCommand(): string[] {
  return [process.execPath, SOURCE_MAIN];
}

/** The store flags of a node named `nodeName` that takes its leases from etcd at `endpoints`. */
export function etcdStoreFlags(endpoints: string, nodeName: string): string[] {
  return ['--etcd-endpoints', endpoints, '--node-name', nodeName];
}

/**
 * `twill run` (started by `command`) on a host of the underlay: its store flags, eth0 as its
 * interface (`iface: null`: no --iface, twill picks the interface of the default route as a
 * deployed one does), its subnet file, then `flags`.
 */
export function twillRunArgv(
  command: readonly string[],
  o: {
    store: readonly string[];
    subnetFile: string;
    flags?: readonly string[];
    iface?: string | null;
  },
): string[] {
  const iface = o.iface === undefined ? 'eth0' : o.iface;
  return [
    ...command,
    'run',
    ...o.store,
    ...(iface === null ? [] : ['--iface', iface]),
    '--subnet-file',
    o.subnetFile,
    ...(o.flags ?? []),
  ];
}
