// `npm run build:daemon`: builds the `twill` command into dist/src/cli/, the directory the
// package's `bin`, the Dockerfile and the labs run it from:
// - twill.cjs: src/cli/bundle.ts and everything it imports (npm dependencies included) as one
//   CommonJS script. Its dynamic imports stay lazy (the etcd client, node:net and twill's HTTP/2
//   client, in etcd mode; the Kubernetes client, node:https and js-yaml, in Kubernetes mode:
//   src/cli/open-store.ts): their modules' top level runs, and their builtins load, only when
//   reached. The bundle needs no node_modules at run time.
// - twill.cache: V8's code cache of twill.cjs, taken by scripts/daemon-code-cache.ts under the
//   command's own Node flags after a warm-up (src/cli/warm-up.ts), so that it holds the functions
//   a start reaches compiled. V8 takes it only from the same V8 under the same flags: it is taken
//   by the Node that builds, or the one TWILL_BUILD_NODE names; both files carry the bundle's
//   SHA-256 (code-cache.ts), and the build fails unless a start would take the cache.
// - main.js: the loader (src/cli/loader.ts), the command itself: its first line holds Node's flags.
// Measured (docs/benchmarks.md): one script instead of an ES module and 17 chunks, and its code
// cache, made a host-gw cold start at 5,000 peers reach its first `ip` batch about 30 ms sooner,
// at the same settled RSS. What else it does:
// - The loader takes Node builtins with require(), not `import`: an ES import of a builtin builds
//   its namespace from every export, which runs lazy getters (`import … from 'node:http'` so
//   loads Node's bundled undici for http.WebSocket, 7 MiB of RSS in a bare process; 'node:fs' a
//   few hundred KiB). The CommonJS bundle requires them as it is.
// - The output is ASCII: one non-ASCII character (a `→` in a comment) makes V8 hold a file's
//   whole source as UTF-16, twice its size, for as long as the process lives.
// Not minified, and without source maps: stack traces name the functions (keepNames keeps the
// names esbuild would otherwise suffix to avoid clashes) and their lines are readable in the
// shipped file, where `// src/…` comments mark each module's start.
import { build, type OutputFile, type Plugin } from 'esbuild';
import { createHash } from 'node:crypto';
import { builtinModules } from 'node:module';
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { run } from '../src/exec/runner.ts';
import { BUNDLE_FILE, shebangCommand, stampedBundle } from '../src/cli/code-cache.ts';

const ROOT = resolve(import.meta.dirname, '..');
const OUT = join(ROOT, 'dist', 'src', 'cli');
/** takes the daemon's code cache, and checks it (run under the command's flags) */
const CACHE_TOOL = join(ROOT, 'scripts', 'daemon-code-cache.ts');

/** Node's builtins by name (`fs`, `node:fs`, `node:test`): an ES import of one becomes require. */
const BUILTIN = new RegExp(
  `^(node:.+|${builtinModules.map((m) => m.replace(/[/]/g, '\\/')).join('|')})$`,
);

const builtinsByRequire: Plugin = {
  name: 'builtins-by-require',
  setup(b) {
    b.onResolve({ filter: BUILTIN }, (args) =>
      args.kind === 'import-statement' ? { path: args.path, namespace: 'builtin' } : undefined,
    );
    // a CommonJS stand-in: esbuild reads its named imports as properties, once used, and its
    // require() is the banner's
    b.onLoad({ filter: /.*/, namespace: 'builtin' }, (args) => ({
      contents: `module.exports = require(${JSON.stringify(args.path)});`,
      loader: 'js',
    }));
  },
};

/** Non-ASCII left by esbuild (only in the comments it keeps) as \u escapes: see the header. */
function ascii(text: string): string {
  return text.replace(
    /[\u0080-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** An output file as written: a script's text (ASCII), or other bytes. */
type Written = { readonly path: string; readonly data: string | Uint8Array };

/**
 * esbuild's output files as written: the scripts as ASCII, the bundle's with its stamp
 * (code-cache.ts) as its first line, its SHA-256.
 */
function written(files: readonly OutputFile[]): Written[] {
  return files.map((f): Written => {
    if (f.path.endsWith('.js')) return { path: f.path, data: ascii(f.text) };
    if (!f.path.endsWith('.cjs')) return { path: f.path, data: f.contents };
    const script = ascii(f.text);
    const sha256 = createHash('sha256').update(script).digest('hex');
    return { path: f.path, data: stampedBundle(script, sha256) };
  });
}

async function main(): Promise<void> {
  // earlier builds' files (tsc's per-file output, the ES-module bundle's chunks) must not linger
  await rm(join(ROOT, 'dist', 'src'), { recursive: true, force: true });
  const common = {
    // the `// src/…` comments name paths from here, whatever directory the build runs in
    absWorkingDir: ROOT,
    bundle: true,
    platform: 'node',
    target: 'node24',
    keepNames: true,
    // the dependencies' licence comments, kept apart: <file>.LEGAL.txt beside each
    legalComments: 'external',
    logLevel: 'warning',
    write: false,
  } as const;
  const bundle = await build({
    ...common,
    entryPoints: [join(ROOT, 'src', 'cli', 'bundle.ts')],
    outfile: join(OUT, BUNDLE_FILE),
    format: 'cjs',
    // a script compiled by vm (loader.ts) has no dynamic import(): builtins come by require
    supported: { 'dynamic-import': false },
    // the loader's directory (code-cache.ts): package.json's version is found from there
    define: { 'import.meta.dirname': '__dirname' },
  });
  const loader = await build({
    ...common,
    entryPoints: [join(ROOT, 'src', 'cli', 'loader.ts')],
    outfile: join(OUT, 'main.js'),
    format: 'esm',
    // builtins by require (see the header), which an ES module lacks
    banner: {
      js: [
        "import { createRequire as __twillCreateRequire } from 'node:module';",
        'const require = __twillCreateRequire(import.meta.url);',
      ].join('\n'),
    },
    plugins: [builtinsByRequire],
  });
  for (const file of written([...bundle.outputFiles, ...loader.outputFiles])) {
    await mkdir(resolve(file.path, '..'), { recursive: true });
    await writeFile(file.path, file.data);
  }
  // esbuild keeps loader.ts's shebang line (its node flags): the file runs as the `twill` command
  await chmod(join(OUT, 'main.js'), 0o755);
  // the cache, taken and checked under the command's flags, without the shell's NODE_OPTIONS (V8
  // accepts a cache only under the V8 and the flags it was made with), by the Node the command
  // will run with: this one, or TWILL_BUILD_NODE's (the image's, where the build's npm puts the
  // node package's first on its PATH: Dockerfile)
  const node = process.env.TWILL_BUILD_NODE ?? process.execPath;
  const loaderFirstLine = (await readFile(join(OUT, 'main.js'), 'utf8')).split('\n')[0] ?? '';
  const { flags } = shebangCommand(loaderFirstLine);
  const cacheTool = (mode: 'make' | 'check'): Promise<{ stdout: string }> =>
    run('env', ['-u', 'NODE_OPTIONS', node, ...flags, CACHE_TOOL, mode, OUT], {
      timeoutMs: 120_000,
    });
  await cacheTool('make');
  const { stdout } = await cacheTool('check');
  if (stdout !== 'accepted') throw new Error(`a start would find the code cache ${stdout}`);
}

await main();
