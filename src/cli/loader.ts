#!/usr/bin/env -S MALLOC_ARENA_MAX=2 node --max-semi-space-size=1 --optimize-for-size --max-opt=1
// The built `twill` command (dist/src/cli/main.js): compiles the bundle beside it (twill.cjs,
// src/cli/bundle.ts and everything it imports, one CommonJS script) with the V8 code cache the
// build took after a warm-up (twill.cache; code-cache.ts, warm-up.ts), and runs the command.
// With the cache, the functions a start reaches come compiled: a host-gw cold start at 5,000
// peers reaches its first `ip` batch about 30 ms sooner (docs/benchmarks.md).
// The first line is how the command runs (the package's bin, the image's and
// the lab's symlinks all keep it), every choice measured in
// docs/benchmarks.md: V8's young generation held to 1 MiB semi-spaces and V8
// told to give memory back (--optimize-for-size); no optimizing compilers
// (--max-opt=1, no Maglev or TurboFan: JavaScript runs in the interpreter
// and Sparkplug's baseline code, 12 MiB less at 5,000 peers, with event
// latency and cold convergence unchanged, since twill's time goes to the
// kernel's tools); and
// glibc's malloc held to two arenas (it makes one per thread that contends,
// up to 8 per core, and keeps what each one grew to: churn left the settled
// RSS 10 MiB higher with the default). Where twill is deployed (the image,
// the labs' units and commands) it runs with jemalloc instead, preloaded by
// the environment allocator.ts's ALLOCATOR_ENV names (the first line has no
// room for it: kernels before 5.1 cut it at 127 bytes).
import { createRequire } from 'node:module';
import { loadBundle } from './code-cache.ts';

const { bundle, state } = loadBundle(import.meta.dirname, createRequire(import.meta.url));
bundle.start(state);
