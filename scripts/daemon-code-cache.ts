// Build only: the daemon's V8 code cache (src/cli/code-cache.ts), run by scripts/build-daemon.ts
// under the command's own Node flags, which V8 requires of a cache it accepts.
//   node FLAGS scripts/daemon-code-cache.ts make DIR   compiles DIR's twill.cjs, runs its warm-up
//                                                      (src/cli/warm-up.ts), writes twill.cache
//   node FLAGS scripts/daemon-code-cache.ts check DIR  prints what a start makes of that cache:
//                                                      accepted, rejected or none
// `check` must run in a process of its own: one that compiled the bundle takes it from V8's
// compilation cache and never reads the cache it is given.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import {
  BUNDLE_FILE,
  CACHE_FILE,
  cacheFile,
  compileBundle,
  loadBundle,
  runBundle,
} from '../src/cli/code-cache.ts';

const [mode, dir] = process.argv.slice(2);
const require = createRequire(import.meta.url);
if (dir === undefined || (mode !== 'make' && mode !== 'check'))
  throw new Error('usage: daemon-code-cache.ts make|check DIR');
if (mode === 'make') {
  const file = join(dir, BUNDLE_FILE);
  const source = readFileSync(file, 'utf8');
  const script = compileBundle({ source, file });
  await runBundle(script, { require, dir }).warmUp();
  writeFileSync(join(dir, CACHE_FILE), cacheFile(source, script.createCachedData()));
  // the warm-up's store may hold timers (its leases' TTLs): done is done
  process.exit(0);
} else {
  process.stdout.write(loadBundle(dir, require).state);
}
