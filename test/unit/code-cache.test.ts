// The built command's bundle and code cache (src/cli/code-cache.ts, scripts/daemon-code-cache.ts):
// the bundle runs with the require, module and directory it is given; a start uses the cache
// taken from the same bundle under the same flags (each step in a process of its own, as the
// build runs them), and none from another build (its stamp: the same length, which is all V8
// checks of the source, is not enough), under another flag, or of random bytes; without one it
// runs all the same. The loader's first line gives the flags the build takes the cache under.
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  BUNDLE_FILE,
  CACHE_FILE,
  loadBundle,
  shebangCommand,
  STAMP,
  stampedBundle,
} from '../../src/cli/code-cache.ts';
import { run } from '../../src/exec/runner.ts';

const require = createRequire(import.meta.url);
const TOOL = resolve(import.meta.dirname, '../../scripts/daemon-code-cache.ts');
const dirs: string[] = [];

afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

/** A bundle whose start records its state, stamped as the build stamps one; `tag` varies it. */
function bundleSource(tag: string): string {
  const body = [
    '"use strict";',
    'let started;',
    `module.exports = { start: (s) => (started = s), warmUp: async () => undefined, started: () => started, dir: __dirname, tag: ${JSON.stringify(tag)} };`,
  ].join('\n');
  return stampedBundle(body, createHash('sha256').update(body).digest('hex'));
}

async function bundleDir(tag: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'twill-code-cache-'));
  dirs.push(dir);
  await writeFile(join(dir, BUNDLE_FILE), bundleSource(tag));
  return dir;
}

/** The build-only tool in a process of its own, under the daemon's --max-opt=1 and `flags`. */
async function tool(mode: 'make' | 'check', dir: string, flags: string[] = []): Promise<string> {
  const { stdout } = await run(process.execPath, ['--max-opt=1', ...flags, TOOL, mode, dir]);
  return stdout;
}

describe('the bundle and its code cache', () => {
  it('runs the bundle with its require, module and directory; none found, it says so', async () => {
    const dir = await bundleDir('a');
    const { bundle, state } = loadBundle(dir, require);
    expect(state).toBe('none');
    bundle.start(state);
    const exports = bundle as unknown as { started(): string; dir: string };
    expect(exports.started()).toBe('none');
    expect(exports.dir).toBe(dir);
  });

  it('uses the cache of the same bundle under the same flags', async () => {
    const dir = await bundleDir('a');
    expect(await tool('make', dir)).toBe('');
    expect((await readFile(join(dir, CACHE_FILE), 'latin1')).startsWith(STAMP)).toBe(true);
    expect(await tool('check', dir)).toBe('accepted');
    expect(await tool('check', dir, ['--max-opt=2'])).toBe('rejected');
    await unlink(join(dir, CACHE_FILE));
    expect(await tool('check', dir)).toBe('none');
  });

  it('uses no cache of another build, even of the same length, nor random bytes', async () => {
    const dir = await bundleDir('a');
    await tool('make', dir);
    // another build of the same length: V8 alone would take this cache
    const other = bundleSource('b');
    expect(other.length).toBe(bundleSource('a').length);
    await writeFile(join(dir, BUNDLE_FILE), other);
    expect(await tool('check', dir)).toBe('rejected');
    // the right stamp, the rest random
    await writeFile(join(dir, BUNDLE_FILE), bundleSource('a'));
    const cache = await readFile(join(dir, CACHE_FILE));
    const stampEnd = cache.indexOf(0x0a) + 1;
    await writeFile(
      join(dir, CACHE_FILE),
      Buffer.concat([cache.subarray(0, stampEnd), randomBytes(cache.length - stampEnd)]),
    );
    expect(await tool('check', dir)).toBe('rejected');
  });

  it('V8 alone checks a cache against the length of the source only', async () => {
    // why the stamp: the cache of one source, given with another of the same length, is taken
    const script = [
      'import { compileBundle, runBundle } from ' +
        JSON.stringify(resolve(import.meta.dirname, '../../src/cli/code-cache.ts')) +
        ';',
      "import { createRequire } from 'node:module';",
      'const [a, b] = [process.argv[1], process.argv[2]];',
      "const made = compileBundle({ source: a, file: '/x.cjs' });",
      "runBundle(made, { require: createRequire(import.meta.url), dir: '/' });",
      "const other = compileBundle({ source: b, file: '/x.cjs', cachedData: made.createCachedData() });",
      'process.stdout.write(String(other.cachedDataRejected));',
    ].join('\n');
    const a = bundleSource('a').split('\n').slice(1).join('\n');
    const b = bundleSource('b').split('\n').slice(1).join('\n');
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script, a, b]);
    expect(stdout).toBe('false');
  });
});

describe("the loader's first line", () => {
  it('gives the environment before node and the flags after it', () => {
    const loader = resolve(import.meta.dirname, '../../src/cli/loader.ts');
    const first = readFileSync(loader, 'utf8').split('\n')[0] ?? '';
    expect(first.length).toBeLessThanOrEqual(127);
    const { env, flags } = shebangCommand(first);
    expect(env).toEqual(['MALLOC_ARENA_MAX=2']);
    expect(flags).toContain('--max-opt=1');
    expect(() => shebangCommand('#!/bin/sh')).toThrow(/does not run node/);
  });
});
