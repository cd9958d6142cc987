// `npm run build:daemon`: bundles the `twill` command, src/cli/main.ts and everything it imports
// (npm dependencies included), into dist/src/cli/main.js, the path the package's `bin`, the
// Dockerfile and the lab run. Dynamic imports become chunks under dist/src/cli/chunks/, loaded
// only when reached: the etcd client (node:net, twill's HTTP/2 client) in etcd mode, the Kubernetes
// client (node:https, js-yaml) in Kubernetes mode (src/cli/open-store.ts). The bundle needs no
// node_modules at run time. Settled RSS against the files tsc emitted, measured side by side
// (with the etcd3 and client-node libraries of the time): etcd mode 90 -> 87 MiB at 5,000 peers,
// Kubernetes mode 115 -> 92 MiB, start-up (spawn to the first log line) 110 ms shorter. What
// does it:
// - Node builtins are taken with require(), not `import`: an ES import of a builtin builds its
//   namespace from every export, which runs lazy getters. `import … from 'node:http'` so loads
//   Node's bundled undici for http.WebSocket (7 MiB of RSS in a bare process), 'node:process',
//   'node:fs' and 'node:util' a few hundred KiB to 1.6 MiB each.
// - The output is ASCII: one non-ASCII character (a `→` in a comment) makes V8 hold a file's
//   whole source as UTF-16, twice its size, for as long as the process lives.
// - One file per chunk instead of a module per source file: no module resolution at start-up.
// Not minified, and without source maps: stack traces name the functions (keepNames keeps the
// names esbuild would otherwise suffix to avoid clashes) and their lines are readable in the
// shipped file, where `// src/…` comments mark each module's start.
import { build, type Plugin } from 'esbuild';
import { builtinModules } from 'node:module';
import { chmod, mkdir, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..');
const OUT = join(ROOT, 'dist', 'src', 'cli');

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

async function main(): Promise<void> {
  // tsc's per-file output of earlier builds, and chunks of earlier bundles, must not linger
  await rm(join(ROOT, 'dist', 'src'), { recursive: true, force: true });
  const result = await build({
    entryPoints: [join(ROOT, 'src', 'cli', 'main.ts')],
    // the `// src/…` comments name paths from here, whatever directory the build runs in
    absWorkingDir: ROOT,
    outdir: OUT,
    entryNames: '[name]',
    chunkNames: 'chunks/[name]-[hash]',
    bundle: true,
    splitting: true,
    platform: 'node',
    target: 'node24',
    format: 'esm',
    // the CommonJS dependencies (and the builtins above) call require(), which an ES module lacks
    banner: {
      js: [
        "import { createRequire as __twillCreateRequire } from 'node:module';",
        'const require = __twillCreateRequire(import.meta.url);',
      ].join('\n'),
    },
    keepNames: true,
    // the dependencies' licence comments, kept apart: <chunk>.LEGAL.txt beside each chunk
    legalComments: 'external',
    logLevel: 'warning',
    write: false,
    plugins: [builtinsByRequire],
  });
  for (const file of result.outputFiles) {
    await mkdir(resolve(file.path, '..'), { recursive: true });
    await writeFile(file.path, file.path.endsWith('.js') ? ascii(file.text) : file.contents);
  }
  // esbuild keeps main.ts's shebang line (its node flags): the file runs as the `twill` command
  await chmod(join(OUT, 'main.js'), 0o755);
}

await main();
