// The built command's bundle and its V8 code cache (loader.ts; scripts/build-daemon.ts makes both):
// how the bundle is compiled, the same way at build time, when the cache is taken, and at every
// start, when it is used. V8 accepts a cache only for the very source it was taken from, under the
// V8 version and flags it was taken with; any other cache is rejected and the bundle is compiled
// from its source as it runs, only more slowly.
import { Script } from 'node:vm';

/** Whether a start's bundle came with its code cache: none found, accepted, or rejected by V8. */
export type CodeCacheState = 'none' | 'accepted' | 'rejected';

/** The bundle's files, beside the loader: dist/src/cli/twill.cjs and its cache. */
export const BUNDLE_FILE = 'twill.cjs';
export const CACHE_FILE = 'twill.cache';

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
