// The built command's bundle and code cache (src/cli/code-cache.ts): the bundle runs with the
// require, module and directory it is given; V8 takes a cache made from the same source under the
// same flags (each in a process of its own), and rejects one of another source, under another
// flag or of random bytes; the loader's first line gives the flags the build takes it under.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { compileBundle, runBundle, shebangCommand } from '../../src/cli/code-cache.ts';
import { run } from '../../src/exec/runner.ts';

const CODE_CACHE = resolve(import.meta.dirname, '../../src/cli/code-cache.ts');

const require = createRequire(import.meta.url);
const file = '/nonexistent/twill.cjs';
const source = [
  'let started;',
  'module.exports = { start: (s) => (started = s), warmUp: async () => undefined, started: () => started, dir: __dirname };',
].join('\n');

/**
 * A Node process that compiles `source` with code-cache.ts: `make`, runs it and writes its cache
 * to `cache` ("made"); else compiles it with that cache and prints whether V8 rejected it.
 */
async function inChild(o: {
  source: string;
  cache: string;
  make?: boolean;
  flags?: string[];
}): Promise<string> {
  const script = [
    "import { readFileSync, writeFileSync } from 'node:fs';",
    "import { createRequire } from 'node:module';",
    `import { compileBundle, runBundle } from ${JSON.stringify(CODE_CACHE)};`,
    'const [source, cache, make] = process.argv.slice(1);',
    `const file = ${JSON.stringify(file)};`,
    'if (make === "make") {',
    '  const s = compileBundle({ source, file });',
    "  runBundle(s, { require: createRequire(import.meta.url), dir: '/' }).start('none');",
    '  writeFileSync(cache, s.createCachedData());',
    "  process.stdout.write('made');",
    '} else {',
    '  const s = compileBundle({ source, file, cachedData: readFileSync(cache) });',
    '  process.stdout.write(String(s.cachedDataRejected));',
    '}',
  ].join('\n');
  const flags = ['--max-opt=1', ...(o.flags ?? [])];
  const args = [...flags, '--input-type=module', '-e', script, o.source, o.cache];
  const { stdout } = await run(process.execPath, o.make ? [...args, 'make'] : args);
  return stdout;
}

describe('the bundle and its code cache', () => {
  it('runs the bundle with its require, module and directory', () => {
    const bundle = runBundle(compileBundle({ source, file }), { require, dir: '/opt/twill' });
    bundle.start('accepted');
    const exports = bundle as unknown as { started(): string; dir: string };
    expect(exports.started()).toBe('accepted');
    expect(exports.dir).toBe('/opt/twill');
  });

  it('accepts the cache of the same source under the same flags, rejects any other', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'twill-code-cache-'));
    try {
      const cache = join(dir, 'cache');
      // each in a process of its own: an isolate that compiled the source once takes it from its
      // own compilation cache and never reads the cache it is given
      expect(await inChild({ source, cache, make: true })).toBe('made');
      expect(await inChild({ source, cache })).toBe('false');
      expect(await inChild({ source: `${source}\n// another build`, cache })).toBe('true');
      expect(await inChild({ source, cache, flags: ['--max-opt=2'] })).toBe('true');
      await writeFile(cache, randomBytes((await readFile(cache)).length));
      expect(await inChild({ source, cache })).toBe('true');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("the loader's first line", () => {
  it('gives the environment before node and the flags after it', () => {
    const first =
      readFileSync(resolve(import.meta.dirname, '../../src/cli/loader.ts'), 'utf8').split(
        '\n',
      )[0] ?? '';
    expect(first.length).toBeLessThanOrEqual(127);
    const { env, flags } = shebangCommand(first);
    expect(env).toEqual(['MALLOC_ARENA_MAX=2']);
    expect(flags).toContain('--max-opt=1');
    expect(() => shebangCommand('#!/bin/sh')).toThrow(/does not run node/);
  });
});
