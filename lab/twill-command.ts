// Where the built twill lives and how to start it as it runs when
// installed. Shared by the lab and the benchmarks.
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..');
export const TWILL_MAIN = join(ROOT, 'dist/src/cli/main.js');
export const TWILL_CNI = join(ROOT, 'dist/twill-cni');

/**
 * How to start the built `twill` command: this Node, the node flags on its
 * shebang line (`extraNodeFlags` after them), the built main.
 */
export async function twillCommand(extraNodeFlags: readonly string[] = []): Promise<string[]> {
  const first = (await readFile(TWILL_MAIN, 'utf8')).split('\n')[0] ?? '';
  const flags = first
    .replace(/^#!\/usr\/bin\/env (-S )?node ?/, '')
    .split(' ')
    .filter(Boolean);
  return [process.execPath, ...flags, ...extraNodeFlags, TWILL_MAIN];
}
