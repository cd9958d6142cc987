// `npm run build:cni`: builds the CNI plugin as one executable, dist/twill-cni,
// a Node single-executable application that needs no node on the host.
// esbuild bundles cni/main.ts and its imports into one CommonJS script, and
// cni/sea-loader.ts into the executable's main script; the loader, run here
// by this very node, warms the bundle up (VERSION, ADD and DEL against a fake
// `ip`) and writes the V8 code cache that then holds those calls' functions
// compiled (why not a startup snapshot: cni/sea-loader.ts); node turns loader,
// bundle and cache into a SEA blob, and postject injects it into a copy of
// this node binary. The executable it made must start with its cache
// accepted: it is run once (VERSION) and the build fails if V8 rejected it.
import { build } from 'esbuild';
import { chmod, copyFile, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { inject } from 'postject';
import { run } from '../src/exec/runner.ts';

const ROOT = resolve(import.meta.dirname, '..');
const WORK = join(ROOT, 'dist', 'cni-sea');
const OUT = join(ROOT, 'dist', 'twill-cni');
const FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';

/** cni/<name>.ts and its imports as one minified CommonJS script in WORK. */
async function bundle(name: string): Promise<string> {
  const file = join(WORK, `${name}.cjs`);
  await build({
    entryPoints: [join(ROOT, 'cni', `${name}.ts`)],
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

async function blob(files: { loader: string; plugin: string; cache: string }): Promise<Buffer> {
  const config = join(WORK, 'sea-config.json');
  const output = join(WORK, 'twill-cni.blob');
  const sea = {
    main: files.loader,
    output,
    disableExperimentalSEAWarning: true,
    assets: { plugin: files.plugin, cache: files.cache },
  };
  await writeFile(config, JSON.stringify(sea, null, 2));
  await run(process.execPath, ['--experimental-sea-config', config], { timeoutMs: 120_000 });
  return readFile(output);
}

async function main(): Promise<void> {
  await rm(WORK, { recursive: true, force: true });
  await mkdir(WORK, { recursive: true });
  const [plugin, loader] = [await bundle('main'), await bundle('sea-loader')];
  const cache = join(WORK, 'twill-cni.cache');
  // V8 accepts a code cache only under the flags it was made with: made, and checked, without
  // any NODE_OPTIONS of the shell that builds (a container runtime calls the plugin without)
  await run('env', ['-u', 'NODE_OPTIONS', process.execPath, loader, plugin, cache], {
    timeoutMs: 120_000,
  });
  const data = await blob({ loader, plugin, cache });
  await rm(OUT, { force: true });
  await copyFile(process.execPath, OUT);
  await chmod(OUT, 0o755);
  // node from npm carries symbols and debug info: dropping them saves 18 MB (optional)
  await run('strip', ['--strip-all', OUT], { timeoutMs: 120_000 }).catch(() => undefined);
  await inject(OUT, 'NODE_SEA_BLOB', data, { sentinelFuse: FUSE });
  const { stderr } = await run('env', ['-u', 'NODE_OPTIONS', 'CNI_COMMAND=VERSION', OUT], {
    timeoutMs: 30_000,
  });
  if (stderr.includes('code cache was rejected'))
    throw new Error(`build:cni: ${OUT} starts without its code cache: ${stderr.trim()}`);
  const { size } = await stat(OUT);
  process.stderr.write(`build:cni: ${OUT} (${(size / 1024 / 1024).toFixed(1)} MiB)\n`);
}

await main();
