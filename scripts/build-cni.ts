// `npm run build:cni`: builds the CNI plugin as one executable, dist/twill-cni,
// a Node single-executable application that needs no node on the host.
// esbuild bundles cni/main.ts and its imports into one CommonJS script; node
// turns it into a SEA blob holding a V8 startup snapshot with every module
// already loaded (start-up 22 ms instead of 33 ms with a code cache);
// postject injects the blob into a copy of this very node binary.
import { build } from 'esbuild';
import { chmod, copyFile, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { inject } from 'postject';
import { run } from '../src/exec/runner.ts';

const ROOT = resolve(import.meta.dirname, '..');
const WORK = join(ROOT, 'dist', 'cni-sea');
const OUT = join(ROOT, 'dist', 'twill-cni');
const FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';

async function bundle(): Promise<string> {
  const file = join(WORK, 'twill-cni.cjs');
  await build({
    entryPoints: [join(ROOT, 'cni', 'main.ts')],
    outfile: file,
    bundle: true,
    platform: 'node',
    target: 'node24',
    format: 'cjs',
    minify: true,
    legalComments: 'none',
    logLevel: 'warning',
  });
  return file;
}

async function blob(main: string): Promise<Buffer> {
  const config = join(WORK, 'sea-config.json');
  const output = join(WORK, 'twill-cni.blob');
  await writeFile(
    config,
    JSON.stringify(
      { main, output, disableExperimentalSEAWarning: true, useSnapshot: true },
      null,
      2,
    ),
  );
  await run(process.execPath, ['--experimental-sea-config', config], { timeoutMs: 120_000 });
  return readFile(output);
}

async function main(): Promise<void> {
  await rm(WORK, { recursive: true, force: true });
  await mkdir(WORK, { recursive: true });
  const data = await blob(await bundle());
  await rm(OUT, { force: true });
  await copyFile(process.execPath, OUT);
  await chmod(OUT, 0o755);
  // node from npm carries symbols and debug info: dropping them saves 18 MB (optional)
  await run('strip', ['--strip-all', OUT], { timeoutMs: 120_000 }).catch(() => undefined);
  await inject(OUT, 'NODE_SEA_BLOB', data, { sentinelFuse: FUSE });
  const { size } = await stat(OUT);
  process.stderr.write(`build:cni: ${OUT} (${(size / 1024 / 1024).toFixed(1)} MiB)\n`);
}

await main();
