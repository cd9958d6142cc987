// The kubelet lab's three container images, written as `docker save`
// archives (manifest.json, the config JSON, one uncompressed tar a layer) for
// `ctr -n k8s.io images import`: no registry, no Docker daemon.
//   twill.local/twill:lab    what the Dockerfile builds: Debian bookworm
//                            (debootstrap minbase + iproute2, iptables,
//                            nftables, libjemalloc2) with the repo's Node 24 as
//                            /usr/local/bin/node (one cached layer), then
//                            /usr/local/lib/twill from the repo's dist/ and
//                            production node_modules (a layer built each time)
//   twill.local/pause:lab    only /pause, lab/images/pause.c built static
//   twill.local/toolbox:lab  only Debian's static busybox and its applets
// The base layer takes a minute or more (debootstrap), so it is cached under
// $TWILL_CACHE_DIR/images (default /var/cache/twill/images), keyed by its
// recipe and the node binary's digest, built under a lock into a temporary
// directory and renamed into place; the production node_modules are cached
// the same way, keyed by package.json and package-lock.json. Every tar is
// deterministic (names sorted, mtime 0, numeric owners), so an unchanged
// repo gives byte-identical layers and archives (two debootstraps agree too,
// as long as the mirror's bookworm does not change).
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import {
  chmod,
  copyFile,
  mkdir,
  open,
  readdir,
  readFile,
  realpath,
  rename,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ALLOCATOR_ENV } from '../src/cli/allocator.ts';
import { run } from '../src/exec/runner.ts';
import { alive } from './kit/process.ts';

export const LAB_IMAGE_REFS = {
  twill: 'twill.local/twill:lab',
  pause: 'twill.local/pause:lab',
  toolbox: 'twill.local/toolbox:lab',
} as const;

/** The archive of each image (`ctr images import <path>`). */
export interface LabImages {
  readonly twill: string;
  readonly pause: string;
  readonly toolbox: string;
}

const ROOT = resolve(import.meta.dirname, '..');
const PATH_ENV = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const EPOCH = '1970-01-01T00:00:00Z';

/**
 * The base layer's recipe: any change here (bump `version` for a change in the code) is a new cache
 * key.
 */
const BASE_RECIPE = {
  version: 4,
  suite: 'bookworm',
  variant: 'minbase',
  include: ['iproute2', 'iptables', 'nftables', 'libjemalloc2'],
  mirror: 'http://deb.debian.org/debian',
  /** node is stripped of its symbols and debug info (18 MB), as for dist/twill-cni */
  stripNode: true,
} as const;

/** The toolbox's applets a drill may use; the image gets every applet busybox has. */
const TOOLBOX_APPLETS = [
  'sh',
  'ping',
  'wget',
  'nc',
  'ip',
  'sleep',
  'cat',
  'ls',
  'echo',
  'hostname',
  'nslookup',
  'httpd',
];

/**
 * GNU tar flags for a reproducible archive; layers of ours also get owner and group 0 (`rootTar`).
 */
const TAR_DETERMINISTIC = ['--format=gnu', '--sort=name', '--numeric-owner', '--mtime=@0'];
const TAR_ROOT_OWNED = [...TAR_DETERMINISTIC, '--owner=0', '--group=0'];

/**
 * One layer: `<dir>/<hex>/layer.tar`, an uncompressed tar whose sha256 `hex` is its diff_id and its
 * blob digest.
 */
interface Layer {
  readonly dir: string;
  readonly hex: string;
  readonly size: number;
  /** the image history's `created_by` */
  readonly createdBy: string;
}

interface ImageConfig {
  /** beyond PATH */
  readonly Env?: readonly string[];
  readonly Entrypoint?: readonly string[];
  readonly Cmd?: readonly string[];
  readonly WorkingDir: string;
}

function cacheRoot(): string {
  return join(process.env.TWILL_CACHE_DIR ?? '/var/cache/twill', 'images');
}

function sha256(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

async function sha256File(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file, { highWaterMark: 1 << 20 }))
    hash.update(chunk as Buffer);
  return hash.digest('hex');
}

function imageArch(): string {
  const arch = ({ x64: 'amd64', arm64: 'arm64' } as Record<string, string>)[process.arch];
  if (arch === undefined) throw new Error(`lab images: no image architecture for ${process.arch}`);
  return arch;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/**
 * Whether an ELF executable is statically linked (it has no PT_INTERP program header); 64-bit
 * little-endian ELF only.
 */
export async function isStaticElf(file: string): Promise<boolean> {
  const fh = await open(file, 'r');
  try {
    const head = Buffer.alloc(64);
    await fh.read(head, 0, 64, 0);
    if (head.readUInt32BE(0) !== 0x7f454c46 || head[4] !== 2 || head[5] !== 1)
      throw new Error(`${file}: not a 64-bit little-endian ELF file`);
    const phoff = Number(head.readBigUInt64LE(32));
    const phentsize = head.readUInt16LE(54);
    const phnum = head.readUInt16LE(56);
    const table = Buffer.alloc(phentsize * phnum);
    await fh.read(table, 0, table.length, phoff);
    // PT_INTERP
    for (let i = 0; i < phnum; i++) if (table.readUInt32LE(i * phentsize) === 3) return false;
    return true;
  } finally {
    await fh.close();
  }
}

/**
 * Fails when something is mounted at or below `dir` (a debootstrap tree must never be removed with
 * /proc or /dev inside it).
 */
async function assertNothingMountedUnder(path: string): Promise<void> {
  const dir = await realpath(path).catch(() => path);
  const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
  const below = mountinfo
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter(
      (point): point is string =>
        point !== undefined && (point === dir || point.startsWith(`${dir}/`)),
    );
  if (below.length > 0)
    throw new Error(
      `lab images: ${below.join(', ')} still mounted; unmount before removing ${dir}`,
    );
}

/**
 * Runs `fn` holding the lock file `file` (created exclusively, holding our
 * pid). A lock whose process is gone is stale and taken over. The lock only
 * saves a second build of the same thing: the results are renamed into place
 * atomically, so a race costs time, never correctness.
 */
async function withLock<T>(
  file: string,
  log: (line: string) => void,
  fn: () => Promise<T>,
): Promise<T> {
  const deadline = Date.now() + 60 * 60_000;
  let told = false;
  for (;;) {
    try {
      await writeFile(file, `${process.pid}\n`, { flag: 'wx' });
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    const text = await readFile(file, 'utf8').catch(() => '');
    const holder = Number.parseInt(text, 10);
    // an empty file is a holder between its create and its write, unless it is old
    const young =
      text === '' &&
      (await stat(file).then(
        (s) => Date.now() - s.mtimeMs < 10_000,
        () => false,
      ));
    if (!young && !(Number.isInteger(holder) && alive(holder))) {
      await rm(file, { force: true });
      continue;
    }
    if (Date.now() > deadline)
      throw new Error(`lab images: ${file} still held by pid ${holder} after an hour`);
    if (!told) log(`images: waiting for pid ${text.trim() || '?'} (lock ${file})`);
    told = true;
    await new Promise((r) => setTimeout(r, 1_000));
  }
  try {
    return await fn();
  } finally {
    const text = await readFile(file, 'utf8').catch(() => '');
    if (text.trim() === String(process.pid)) await rm(file, { force: true });
  }
}

/**
 * Renames a finished build `tmp` to `dir`; when a racing build got there
 * first (`dir` exists and is not empty), keeps theirs and drops ours.
 */
async function publish(tmp: string, dir: string): Promise<void> {
  try {
    await rename(tmp, dir);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw e;
    await rm(tmp, { recursive: true, force: true });
  }
}

/** Removes `<cache>/<prefix>*.tmp-<pid>` left by builds whose process is gone. */
async function removeStaleTemps(cache: string, prefix: string): Promise<void> {
  for (const name of await readdir(cache)) {
    const m = /\.tmp-(\d+)$/.exec(name);
    if (!name.startsWith(prefix) || m?.[1] === undefined || alive(Number(m[1]))) continue;
    await assertNothingMountedUnder(join(cache, name));
    await rm(join(cache, name), { recursive: true, force: true });
  }
}

/** Tars `entries` of `from` into `<into>/<sha256>/layer.tar`. */
async function tarLayer(o: {
  from: string;
  entries: readonly string[];
  into: string;
  flags: readonly string[];
  createdBy: string;
}): Promise<Layer> {
  await mkdir(o.into, { recursive: true });
  const tmp = join(o.into, '.layer.tar.tmp');
  await run('tar', [...o.flags, '-C', o.from, '-cf', tmp, '--', ...o.entries], {
    timeoutMs: 600_000,
  });
  const hex = await sha256File(tmp);
  const { size } = await stat(tmp);
  await mkdir(join(o.into, hex), { recursive: true });
  await rename(tmp, join(o.into, hex, 'layer.tar'));
  return { dir: o.into, hex, size, createdBy: o.createdBy };
}

/** Every top-level entry of `dir`, in byte order (what tar --sort=name does below them). */
async function topLevel(dir: string): Promise<string[]> {
  return (await readdir(dir)).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
}

/** A layer cached in `dir` (layer.json + `<hex>/layer.tar` of the recorded size), or undefined. */
async function cachedLayer(dir: string): Promise<Layer | undefined> {
  try {
    const meta = JSON.parse(await readFile(join(dir, 'layer.json'), 'utf8')) as {
      hex: string;
      size: number;
      createdBy: string;
    };
    const { size } = await stat(join(dir, meta.hex, 'layer.tar'));
    return size === meta.size ? { dir, hex: meta.hex, size, createdBy: meta.createdBy } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Trims a debootstrap tree to an image's root: no device nodes, apt lists or caches, logs, host
 * files or documentation.
 */
async function trimRootfs(rootfs: string): Promise<void> {
  for (const dir of [
    'dev',
    'proc',
    'sys',
    'tmp',
    'var/tmp',
    'var/lib/apt/lists',
    'var/cache/apt',
    'var/log',
  ]) {
    const path = join(rootfs, dir);
    for (const name of await readdir(path).catch(() => [] as string[])) {
      if (dir === 'var/lib/apt/lists' && name === 'partial') continue;
      await rm(join(path, name), { recursive: true, force: true });
    }
  }
  // debootstrap copies the host's; the runtime mounts its own (kubelet: resolv.conf, hostname,
  // hosts)
  for (const file of ['etc/resolv.conf', 'etc/hostname'])
    await rm(join(rootfs, file), { force: true });
  // backups, and ldconfig's cache of inode numbers and times: the one file two debootstraps of the
  // same packages disagree on
  for (const file of [
    'var/cache/debconf/config.dat-old',
    'var/cache/debconf/templates.dat-old',
    'var/cache/ldconfig/aux-cache',
  ])
    await rm(join(rootfs, file), { force: true });
  // what Debian's slim images leave out (43 MiB here): documentation but the copyright files,
  // manuals, translations
  for (const dir of [
    'usr/share/man',
    'usr/share/info',
    'usr/share/locale',
    'usr/share/groff',
    'usr/share/lintian',
  ]) {
    for (const name of await readdir(join(rootfs, dir)).catch(() => [] as string[]))
      await rm(join(rootfs, dir, name), { recursive: true, force: true });
  }
  const doc = join(rootfs, 'usr', 'share', 'doc');
  for (const pkg of await readdir(doc, { withFileTypes: true })) {
    if (!pkg.isDirectory()) continue;
    for (const name of await readdir(join(doc, pkg.name)))
      if (name !== 'copyright')
        await rm(join(doc, pkg.name, name), { recursive: true, force: true });
  }
}

/**
 * The twill image's first layer: Debian bookworm minbase + iproute2, iptables, nftables,
 * libjemalloc2, and node; cached.
 */
async function ensureBase(cache: string, log: (line: string) => void): Promise<Layer> {
  const node = await realpath(join(ROOT, 'node_modules', 'node', 'bin', 'node'));
  const key = sha256(JSON.stringify({ ...BASE_RECIPE, node: await sha256File(node) })).slice(0, 16);
  const dir = join(cache, `base-${key}`);
  const hit = await cachedLayer(dir);
  if (hit !== undefined) {
    log(`images: base layer cached (${dir})`);
    return hit;
  }
  return withLock(join(cache, '.base.lock'), log, async () => {
    const again = await cachedLayer(dir);
    if (again !== undefined) return again;
    await removeStaleTemps(cache, '.base-');
    const tmp = join(cache, `.base-${key}.tmp-${process.pid}`);
    const rootfs = join(tmp, 'rootfs');
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp, { recursive: true });
    const started = Date.now();
    log(
      `images: building the base layer with debootstrap ${BASE_RECIPE.suite} from ${BASE_RECIPE.mirror} (about a minute on a good mirror, once)…`,
    );
    // a private mount namespace: debootstrap's /proc and /sys mounts in the tree end with it, even
    // when it is killed
    const debootstrap = [
      '--mount',
      '--propagation',
      'private',
      '--',
      'debootstrap',
      `--variant=${BASE_RECIPE.variant}`,
      `--include=${BASE_RECIPE.include.join(',')}`,
      BASE_RECIPE.suite,
      rootfs,
      BASE_RECIPE.mirror,
    ];
    try {
      await run('unshare', debootstrap, { timeoutMs: 30 * 60_000 });
    } catch (e) {
      const tail = await readFile(join(rootfs, 'debootstrap', 'debootstrap.log'), 'utf8').then(
        (t) => t.split('\n').slice(-30).join('\n'),
        () => '',
      );
      await assertNothingMountedUnder(tmp);
      await rm(tmp, { recursive: true, force: true });
      throw new Error(
        `lab images: debootstrap failed: ${(e as Error).message}${tail ? `\n--- debootstrap.log (tail) ---\n${tail}` : ''}`,
        { cause: e },
      );
    }
    await assertNothingMountedUnder(tmp);
    await trimRootfs(rootfs);
    const target = join(rootfs, 'usr', 'local', 'bin', 'node');
    await copyFile(node, target);
    await chmod(target, 0o755);
    if (BASE_RECIPE.stripNode)
      await run('strip', ['--strip-all', target], { timeoutMs: 120_000 }).catch(() => undefined);
    // the tree must run what the image runs: node, and iptables on the nf_tables backend (Debian's
    // default, as on the host)
    const nodeVersion = (
      await run('chroot', [rootfs, '/usr/local/bin/node', '--version'])
    ).stdout.trim();
    const iptables = (await run('chroot', [rootfs, 'iptables', '-V'])).stdout.trim();
    if (!iptables.includes('nf_tables'))
      throw new Error(`lab images: the base's iptables is not the nf_tables one: ${iptables}`);
    const createdBy = `debootstrap --variant=${BASE_RECIPE.variant} --include=${BASE_RECIPE.include.join(',')} ${BASE_RECIPE.suite} (${BASE_RECIPE.mirror}); node ${nodeVersion} as /usr/local/bin/node`;
    const out = join(tmp, 'out');
    const layer = await tarLayer({
      from: rootfs,
      entries: await topLevel(rootfs),
      into: out,
      flags: TAR_DETERMINISTIC,
      createdBy,
    });
    await writeFile(
      join(out, 'layer.json'),
      `${JSON.stringify({ hex: layer.hex, size: layer.size, createdBy, built: new Date().toISOString(), buildSeconds: Math.round((Date.now() - started) / 1000) }, null, 2)}\n`,
    );
    await publish(out, dir);
    await rm(tmp, { recursive: true, force: true });
    log(
      `images: base layer built in ${((Date.now() - started) / 1000).toFixed(0)} s (${iptables}, node ${nodeVersion}, ${(layer.size / 2 ** 20).toFixed(0)} MiB)`,
    );
    const published = await cachedLayer(dir);
    if (published === undefined)
      throw new Error(`lab images: ${dir} holds no complete layer after its build`);
    return published;
  });
}

/**
 * The production node_modules for the repo's package.json and lock (`npm ci --omit=dev`, no install
 * scripts); cached. The directory holding node_modules.
 */
async function ensureProdModules(cache: string, log: (line: string) => void): Promise<string> {
  const manifest = await readFile(join(ROOT, 'package.json'));
  const lock = await readFile(join(ROOT, 'package-lock.json'));
  const key = sha256(Buffer.concat([manifest, Buffer.from('\0'), lock])).slice(0, 16);
  const dir = join(cache, `modules-${key}`);
  if (await exists(join(dir, 'node_modules', '.package-lock.json'))) return dir;
  return withLock(join(cache, '.modules.lock'), log, async () => {
    if (await exists(join(dir, 'node_modules', '.package-lock.json'))) return dir;
    await removeStaleTemps(cache, '.modules-');
    const tmp = join(cache, `.modules-${key}.tmp-${process.pid}`);
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp, { recursive: true });
    await writeFile(join(tmp, 'package.json'), manifest);
    await writeFile(join(tmp, 'package-lock.json'), lock);
    log('images: installing the production node_modules (npm ci --omit=dev)…');
    await run(
      'npm',
      [
        'ci',
        '--prefix',
        tmp,
        '--omit=dev',
        '--ignore-scripts',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
        '--loglevel=error',
      ],
      { timeoutMs: 600_000 },
    );
    await publish(tmp, dir);
    return dir;
  });
}

/** mkdir -p with mode 0755 on every directory it makes (whatever the umask). */
async function mkdirs(root: string, rel: string): Promise<string> {
  await mkdir(root, { recursive: true });
  let path = root;
  for (const part of rel.split('/')) {
    path = join(path, part);
    await mkdir(path).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'EEXIST') throw e;
    });
    await chmod(path, 0o755);
  }
  return path;
}

/**
 * The twill image's second layer: /usr/local/lib/twill (as the Dockerfile lays it out) and
 * /usr/local/bin/twill.
 */
async function appLayer(work: string, modules: string): Promise<Layer> {
  const dist = join(ROOT, 'dist');
  for (const need of [join(dist, 'src', 'cli', 'main.js'), join(dist, 'twill-cni')]) {
    if (!(await exists(need)))
      throw new Error(`lab images: ${need} is missing; run \`npm run build\` first`);
  }
  const stage = join(work, 'twill-app');
  const lib = await mkdirs(stage, 'usr/local/lib/twill');
  await copyFile(join(ROOT, 'package.json'), join(lib, 'package.json'));
  await run('cp', ['-a', join(modules, 'node_modules'), join(lib, 'node_modules')], {
    timeoutMs: 120_000,
  });
  await mkdirs(lib, 'dist');
  await run('cp', ['-a', join(dist, 'src'), join(lib, 'dist', 'src')], { timeoutMs: 120_000 });
  // where deploy/daemonset.yaml's install-cni-plugin copies it from (the Dockerfile's COPY …
  // ./twill-cni)
  await copyFile(join(dist, 'twill-cni'), join(lib, 'twill-cni'));
  await chmod(join(lib, 'twill-cni'), 0o755);
  await chmod(join(lib, 'dist', 'src', 'cli', 'main.js'), 0o755);
  // a symlink, not a wrapper: the shebang's Node flags apply (see src/cli/loader.ts)
  await symlink(
    '/usr/local/lib/twill/dist/src/cli/main.js',
    join(await mkdirs(stage, 'usr/local/bin'), 'twill'),
  );
  const flags = [...TAR_ROOT_OWNED, '--mode=go-w,a+rX'];
  return tarLayer({
    from: stage,
    entries: ['usr'],
    into: join(work, 'layers'),
    flags,
    createdBy:
      'twill: /usr/local/lib/twill (package.json, production node_modules, dist/src, twill-cni), /usr/local/bin/twill',
  });
}

/** The pause image's only layer: /pause, built static from lab/images/pause.c. */
async function pauseLayer(work: string): Promise<Layer> {
  const stage = await mkdirs(work, 'pause-root');
  const out = join(stage, 'pause');
  await run(
    'gcc',
    ['-static', '-O2', '-s', '-Wall', '-Wextra', '-o', out, join(ROOT, 'lab', 'images', 'pause.c')],
    { timeoutMs: 120_000 },
  );
  if (!(await isStaticElf(out)))
    throw new Error(
      'lab images: gcc -static gave a dynamic /pause (is libc6-dev installed? scripts/host-deps.sh)',
    );
  await chmod(out, 0o755);
  return tarLayer({
    from: stage,
    entries: ['pause'],
    into: join(work, 'layers'),
    flags: TAR_ROOT_OWNED,
    createdBy: 'gcc -static -O2 lab/images/pause.c -o /pause',
  });
}

/**
 * The toolbox image's only layer: Debian's static busybox as /bin/busybox, a symlink for each
 * applet, a minimal /etc.
 */
async function toolboxLayer(work: string): Promise<Layer> {
  const busybox = '/bin/busybox';
  if (!(await exists(busybox)) || !(await isStaticElf(busybox)))
    throw new Error(
      `lab images: ${busybox} is missing or not static; install busybox-static (scripts/host-deps.sh)`,
    );
  const applets = (await run(busybox, ['--list'])).stdout
    .split('\n')
    .filter((a) => a !== '' && a !== 'busybox' && !a.includes('/'));
  const missing = TOOLBOX_APPLETS.filter((a) => !applets.includes(a));
  if (missing.length > 0) throw new Error(`lab images: ${busybox} has no ${missing.join(', ')}`);
  const stage = await mkdirs(work, 'toolbox-root');
  const bin = await mkdirs(stage, 'bin');
  await copyFile(busybox, join(bin, 'busybox'));
  await chmod(join(bin, 'busybox'), 0o755);
  for (const applet of applets) await symlink('busybox', join(bin, applet));
  for (const dir of ['dev', 'proc', 'sys', 'var', 'etc']) await mkdirs(stage, dir);
  await mkdir(join(stage, 'root'), { mode: 0o700 });
  await chmod(join(stage, 'root'), 0o700);
  await mkdir(join(stage, 'tmp'));
  await chmod(join(stage, 'tmp'), 0o1777);
  await writeFile(
    join(stage, 'etc', 'passwd'),
    'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n',
    { mode: 0o644 },
  );
  await writeFile(join(stage, 'etc', 'group'), 'root:x:0:\nnogroup:x:65534:\n', { mode: 0o644 });
  const version =
    (await run(busybox, ['--help']).catch(() => ({ stdout: '' }))).stdout.split('\n')[0]?.trim() ??
    '';
  return tarLayer({
    from: stage,
    entries: await topLevel(stage),
    into: join(work, 'layers'),
    flags: TAR_ROOT_OWNED,
    createdBy: `${version || 'busybox'} (Debian busybox-static), ${applets.length} applets in /bin`,
  });
}

/** Writes a `docker save` archive of one image to `out` (through a temporary file). */
async function writeArchive(o: {
  out: string;
  ref: string;
  layers: readonly Layer[];
  config: ImageConfig;
  work: string;
}): Promise<void> {
  const config = {
    architecture: imageArch(),
    os: 'linux',
    created: EPOCH,
    config: { ...o.config, Env: [PATH_ENV, ...(o.config.Env ?? [])] },
    rootfs: { type: 'layers', diff_ids: o.layers.map((l) => `sha256:${l.hex}`) },
    history: o.layers.map((l) => ({ created: EPOCH, created_by: l.createdBy })),
  };
  const configText = JSON.stringify(config);
  const configName = `${sha256(configText)}.json`;
  const manifest = [
    { Config: configName, RepoTags: [o.ref], Layers: o.layers.map((l) => `${l.hex}/layer.tar`) },
  ];
  const stage = join(o.work, `archive-${sha256(o.ref).slice(0, 8)}`);
  await mkdir(stage, { recursive: true });
  await writeFile(join(stage, configName), configText, { mode: 0o644 });
  await writeFile(join(stage, 'manifest.json'), JSON.stringify(manifest), { mode: 0o644 });
  const tmp = `${o.out}.tmp-${process.pid}`;
  const layerArgs = o.layers.flatMap((l) => ['-C', l.dir, `${l.hex}/layer.tar`]);
  await run(
    'tar',
    [...TAR_ROOT_OWNED, '-cf', tmp, '-C', stage, 'manifest.json', configName, ...layerArgs],
    { timeoutMs: 600_000 },
  );
  await rename(tmp, o.out);
}

/**
 * The pause image's archive at `out` (gcc and libc6-dev; no root); `work` is an empty or missing
 * scratch directory.
 */
export async function buildPauseArchive(o: { out: string; work: string }): Promise<void> {
  await writeArchive({
    out: o.out,
    ref: LAB_IMAGE_REFS.pause,
    layers: [await pauseLayer(o.work)],
    config: { Entrypoint: ['/pause'], WorkingDir: '/' },
    work: o.work,
  });
}

/**
 * The toolbox image's archive at `out` (busybox-static; no root); `work` is an empty or missing
 * scratch directory.
 */
export async function buildToolboxArchive(o: { out: string; work: string }): Promise<void> {
  await writeArchive({
    out: o.out,
    ref: LAB_IMAGE_REFS.toolbox,
    layers: [await toolboxLayer(o.work)],
    config: { Cmd: ['sh'], WorkingDir: '/' },
    work: o.work,
  });
}

/**
 * Builds the three archives into `outDir` (twill.tar, pause.tar,
 * toolbox.tar) and returns their paths. Needs root (debootstrap, chroot),
 * the packages of scripts/host-deps.sh, and a built dist/ (`npm run build`).
 * The first run builds the cached base (35 to 65 s here, more on a slow
 * mirror); later ones only the small layers and the archives (seconds).
 */
export async function buildLabImages(o: {
  outDir: string;
  log: (line: string) => void;
}): Promise<LabImages> {
  const started = Date.now();
  const cache = cacheRoot();
  await mkdir(cache, { recursive: true });
  await mkdir(o.outDir, { recursive: true });
  // the staging trees and layers are on the cache's disk, not in outDir (often /run, a tmpfs)
  await removeStaleTemps(cache, '.work-');
  const work = join(cache, `.work-${Date.now()}.tmp-${process.pid}`);
  await mkdir(work);
  const images: LabImages = {
    twill: join(o.outDir, 'twill.tar'),
    pause: join(o.outDir, 'pause.tar'),
    toolbox: join(o.outDir, 'toolbox.tar'),
  };
  try {
    const base = await ensureBase(cache, o.log);
    const modules = await ensureProdModules(cache, o.log);
    const app = await appLayer(work, modules);
    await writeArchive({
      out: images.twill,
      ref: LAB_IMAGE_REFS.twill,
      layers: [base, app],
      config: {
        // as the Dockerfile's ENV: twill runs with jemalloc (src/cli/allocator.ts)
        Env: Object.entries(ALLOCATOR_ENV).map(([k, v]) => `${k}=${v}`),
        Entrypoint: ['/usr/local/bin/twill'],
        WorkingDir: '/usr/local/lib/twill',
      },
      work,
    });
    await buildPauseArchive({ out: images.pause, work: join(work, 'pause') });
    await buildToolboxArchive({ out: images.toolbox, work: join(work, 'toolbox') });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  const sizes = await Promise.all(
    Object.values(images).map(
      async (p: string) => `${p} ${((await stat(p)).size / 2 ** 20).toFixed(1)} MiB`,
    ),
  );
  o.log(`images: ${sizes.join(', ')} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return images;
}
