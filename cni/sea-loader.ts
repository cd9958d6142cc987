// The twill-cni executable's main script (a Node single-executable application;
// scripts/build-cni.ts bundles this file into dist/cni-sea/sea-loader.cjs), and at
// build time the maker of the code cache it starts with.
//
// In the executable: the plugin's bundle (the executable's asset "plugin") is
// compiled with the V8 code cache in its asset "cache", then cni/main.ts's
// `start` runs. The cache was taken after the warm-up calls had run (VERSION,
// and ADD and DEL against a fake `ip`), so it holds the functions those calls
// reached already compiled, not only the bundle's top level, which is all a
// cache made by Node's "useCodeCache" holds. It replaced a V8 startup snapshot
// ("useSnapshot"), which held the same compiled code but cost more to start
// than it saved: measured on the 2-core development machine on 2026-11-28, an
// ADD took 201-208 ms with the snapshot, 183-189 with Node's code cache and
// 179-186 with this one (medians of 15, six runs interleaved; the snapshot
// alone, with no script in it, made Node's start 60 ms longer than Node's own).
//
// At build time, `node sea-loader.cjs BUNDLE CACHE` (BUNDLE: main.cjs):
// compiles BUNDLE with the very same wrapper, runs its `warmUp`, and writes
// the code cache to CACHE.
//
// A cache V8 rejects (another Node built it) costs only speed: the bundle is
// compiled from its source, and one line on stderr says so (the build checks
// that the executable it made prints none).
import { readFileSync, writeFileSync } from 'node:fs';
import { getAsset, isSea } from 'node:sea';
import { Script } from 'node:vm';

/** What cni/main.ts exports. */
interface Plugin {
  start(): void;
  warmUp(): Promise<void>;
}

/** The bundle (CommonJS) as a function of its require and module. */
function compile(source: string, cachedData?: Uint8Array): Script {
  return new Script(`(function (require, module, exports) {${source}\n})`, {
    filename: 'twill-cni.cjs',
    ...(cachedData ? { cachedData } : {}),
  });
}

function load(script: Script): Plugin {
  const mod = { exports: {} as Plugin };
  const fn = script.runInThisContext() as (r: NodeJS.Require, m: object, e: object) => void;
  fn(require, mod, mod.exports);
  return mod.exports;
}

/** Build time: the bundle's warm-up, then its code cache. */
async function makeCache(bundle: string, cache: string): Promise<void> {
  const script = compile(readFileSync(bundle, 'utf8'));
  await load(script).warmUp();
  writeFileSync(cache, script.createCachedData());
}

if (isSea()) {
  const script = compile(getAsset('plugin', 'utf8'), new Uint8Array(getAsset('cache')));
  if (script.cachedDataRejected === true)
    process.stderr.write('twill-cni: its code cache was rejected; compiling from source\n');
  load(script).start();
} else {
  const [bundle, cache] = process.argv.slice(2);
  if (bundle === undefined || cache === undefined)
    throw new Error('usage: node loader.cjs BUNDLE CACHE');
  makeCache(bundle, cache).then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`twill-cni: warm-up failed: ${String(err)}\n`);
      process.exit(1);
    },
  );
}
