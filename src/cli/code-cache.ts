// The built command's bundle and its V8 code cache (loader.ts runs them; scripts/build-daemon.ts
// makes them, scripts/daemon-code-cache.ts takes the cache): how the bundle is compiled, the same
// way when the cache is taken and at every start. V8 checks a cache against the source's length
// only, and against its own version and the flags that change how code is compiled; any other
// mismatch goes unseen, and the cache's code would run in place of the source's. So the build
// stamps both files: the bundle's first line and the cache's name the bundle's SHA-256, and a
// cache whose stamp is not the bundle's is not used. A start does not hash the bundle again (in
// JavaScript, 680 KB would cost it more than the cache saves): a bundle edited by hand keeps its
// stamp and is not caught. Without a cache, or with one V8 rejects, the bundle is compiled as it
// runs, only more slowly.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Script } from 'node:vm';

/** Whether a start's bundle came with its code cache: none found, accepted, or not usable. */
export type CodeCacheState = 'none' | 'accepted' | 'rejected';

/** The bundle's files, beside the loader: dist/src/cli/twill.cjs and its cache. */
export const BUNDLE_FILE = 'twill.cjs';
export const CACHE_FILE = 'twill.cache';

/** The bundle's first line, and the cache's: the stamp, then the bundle's SHA-256 in hex. */
export const STAMP = '// twill bundle sha256 ';

/** What the bundle (bundle.ts) exports. */
export interface Bundle {
  start(codeCache: CodeCacheState): void;
  warmUp(): Promise<void>;
}

/**
 * The bundle (CommonJS) compiled as a function of its require, module, exports and __dirname (the
 * loader's directory, where it finds package.json's version by walking up), with `cachedData`.
 */
export function compileBundle(o: { source: string; file: string; cachedData?: Buffer }): Script {
  return new Script(`(function (require, module, exports, __dirname) {${o.source}\n})`, {
    filename: o.file,
    ...(o.cachedData ? { cachedData: o.cachedData } : {}),
  });
}

/** Runs the compiled bundle's top level; its exports. */
export function runBundle(script: Script, o: { require: NodeJS.Require; dir: string }): Bundle {
  const mod = { exports: {} as Bundle };
  const fn = script.runInThisContext() as (
    r: NodeJS.Require,
    m: object,
    e: object,
    dirname: string,
  ) => void;
  fn(o.require, mod, mod.exports, o.dir);
  return mod.exports;
}

/** The bundle's text as the build writes it: its stamp (`sha256`, in hex) as its first line. */
export function stampedBundle(script: string, sha256: string): string {
  return `${STAMP}${sha256}\n${script}`;
}

/** A cache file's bytes for the (stamped) bundle `source`: its stamp line, then V8's data. */
export function cacheFile(source: string, data: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`${firstLine(source)}\n`, 'latin1'), data]);
}

/** The first line of `text` (all of it when it has none). */
function firstLine(text: string): string {
  const end = text.indexOf('\n');
  return end < 0 ? text : text.slice(0, end);
}

/**
 * The bundle in `dir`, compiled with its cache when the cache's stamp is the bundle's, and run: its
 * exports, and what became of the cache.
 */
export function loadBundle(
  dir: string,
  require: NodeJS.Require,
): { bundle: Bundle; state: CodeCacheState } {
  const file = join(dir, BUNDLE_FILE);
  const source = readFileSync(file, 'utf8');
  let stored: Buffer | undefined;
  try {
    stored = readFileSync(join(dir, CACHE_FILE));
  } catch {
    // none: a build that took none, or a copy without it
  }
  if (stored === undefined)
    return { bundle: runBundle(compileBundle({ source, file }), { require, dir }), state: 'none' };
  const stamp = firstLine(source);
  const fits =
    stamp.startsWith(STAMP) &&
    stored.subarray(0, stamp.length + 1).equals(Buffer.from(`${stamp}\n`, 'latin1'));
  const script = compileBundle({
    source,
    file,
    ...(fits ? { cachedData: stored.subarray(stamp.length + 1) } : {}),
  });
  const state = fits && script.cachedDataRejected !== true ? 'accepted' : 'rejected';
  return { bundle: runBundle(script, { require, dir }), state };
}

/**
 * What the loader's first line (`#!/usr/bin/env -S VAR=… node FLAGS…`) sets: the environment
 * assignments before `node` and Node's flags after it, as the command runs with them (the build
 * takes the cache under those flags; the labs and the bench start the built command with them).
 */
export function shebangCommand(firstLine: string): { env: string[]; flags: string[] } {
  const words = firstLine
    .replace(/^#!\/usr\/bin\/env (-S )?/, '')
    .split(' ')
    .filter(Boolean);
  const node = words.indexOf('node');
  if (node < 0) throw new Error(`its first line does not run node: ${firstLine}`);
  return { env: words.slice(0, node), flags: words.slice(node + 1) };
}
