// The malloc twill runs with. Where it is deployed (the image, the Vagrant
// lab's unit, the netns lab's and the bench's commands) its environment
// preloads jemalloc (Debian's and Ubuntu's libjemalloc2) with one arena and
// no thread caches: glibc's malloc keeps the holes lease churn leaves in its
// heap, which jemalloc gives back within its default 10 s (a dual-stack
// vxlan node at 5,000 peers settled at 63.9 MiB with glibc's, 60.8 with
// jemalloc; a 3-minute churn soak left 2.6 MiB behind with glibc's, 1.2 with
// jemalloc; either option alone settled at 62-63.5). This module takes that
// preload out of the environment the tools twill runs inherit (each would
// load jemalloc for nothing, or, where it is not installed, print ld.so's
// complaint on stderr, which `ip monitor`'s watcher would take for lost
// events), and tells which allocator the process has.
import { readFileSync } from 'node:fs';

/** The library preloaded (a name ld.so finds in its library path). */
export const OWN_PRELOAD = 'libjemalloc.so.2';

/** jemalloc's options: one arena, no thread caches (freed pages go back after its 10 s decay). */
export const OWN_MALLOC_CONF = 'narenas:1,tcache:false';

/** The environment a deployed `twill` starts with: the image's, the units', the labs'. */
export const ALLOCATOR_ENV: Readonly<Record<'LD_PRELOAD' | 'MALLOC_CONF', string>> = {
  LD_PRELOAD: OWN_PRELOAD,
  MALLOC_CONF: OWN_MALLOC_CONF,
};

export type Allocator = 'jemalloc' | 'glibc';

/**
 * Takes a jemalloc preload (and our MALLOC_CONF) out of `env`, the environment children inherit:
 * true when it was there. Another preload, or one of several libraries, is left as it is.
 */
export function dropOwnPreload(env: NodeJS.ProcessEnv): boolean {
  // by name, or by a path to it (as guides write it)
  if (env.LD_PRELOAD === undefined || !/(^|\/)libjemalloc\.so\.2$/.test(env.LD_PRELOAD))
    return false;
  delete env.LD_PRELOAD;
  if (env.MALLOC_CONF === OWN_MALLOC_CONF) delete env.MALLOC_CONF;
  return true;
}

/** The allocator mapped in a process whose /proc/PID/maps reads `maps`. */
export function allocatorIn(maps: string): Allocator {
  return /\/libjemalloc\.so(\.\d+)*$/m.test(maps) ? 'jemalloc' : 'glibc';
}

/** The allocator of this process, from /proc/self/maps (glibc when it cannot be read). */
export function currentAllocator(): Allocator {
  try {
    return allocatorIn(readFileSync('/proc/self/maps', 'utf8'));
  } catch {
    return 'glibc';
  }
}
