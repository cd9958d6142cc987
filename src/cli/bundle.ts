// The entry of the built command's bundle (dist/src/cli/twill.cjs, one CommonJS script that
// loader.ts compiles with its code cache): the command, and the build's warm-up (loaded only when
// the build calls it: a start never runs its module).
import { main } from './command.ts';
import type { CodeCacheState } from './code-cache.ts';

/** Runs the command line of this process, then exits with its code. */
export function start(codeCache: CodeCacheState): void {
  // a command whose work never settles, the event loop empty, fails as an unsettled top-level
  // await does (main.ts's, run from source): exit code 13
  process.exitCode = 13;
  void main(process.argv, process.env, { codeCache }).then((code) => process.exit(code));
}

/** The build's warm-up (warm-up.ts). */
export async function warmUp(): Promise<void> {
  const { warmUp: run } = await import('./warm-up.ts');
  await run();
}
