// The Vagrant lab's life cycle for `npm run lab -- up|status|down --vagrant`:
// which provider (VirtualBox or libvirt where a hypervisor is usable, else
// lxc: system containers sharing this kernel, through vagrant-lxc), the
// settings later commands read back (<dotfile path>/twill-lab.json, which the
// Vagrantfile reads too), and for lxc what Vagrant does not make itself: the
// box, built here from the Debian mirror (scripts/vagrant-box.sh), and the
// bridge the machines hang on (twvagrant0, the host's 192.168.56.1/24).
// `down` leaves nothing: `vagrant destroy -f`, then the bridge, any container,
// container directory or cgroup folder of the lab's machines that outlived
// it, and the dotfile directory.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, rmdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { TwillError } from '../src/errors.ts';
import { run } from '../src/exec/runner.ts';
import { labNodeCount, VAGRANT_LAB, VagrantCluster, type VagrantExec } from './vagrant-cluster.ts';

export type VagrantProvider = 'virtualbox' | 'libvirt' | 'lxc';
const PROVIDERS: readonly VagrantProvider[] = ['virtualbox', 'libvirt', 'lxc'];

/** What the Vagrantfile's lxc machines use (its LXC_BRIDGE, and the host's address there). */
export const LXC_LAB = {
  bridge: 'twvagrant0',
  hostAddress: `${VAGRANT_LAB.underlay}.1/24`,
  containerPrefix: 'twill-lab-',
  lxcPath: '/var/lib/lxc',
  cgroupRoot: '/sys/fs/cgroup',
  box: 'twill/bookworm-lxc',
} as const;

export interface VagrantLabSettings {
  readonly provider: VagrantProvider;
  readonly nodes: number;
  readonly pods: number;
  readonly spares: number;
  readonly backend: 'vxlan' | 'host-gw';
  /** fs.inotify.max_user_instances as `up` found it and raised it (lxc), for `down` to put back */
  readonly inotify?: { readonly was: number; readonly set: number };
}

const REPO_ROOT = resolve(import.meta.dirname, '..');
const BOX_SCRIPT = join(REPO_ROOT, 'scripts', 'vagrant-box.sh');

/** The Vagrant dotfile directory of the lab in `dir` (VAGRANT_DOTFILE_PATH, else .vagrant). */
export function dotfileDir(dir = REPO_ROOT): string {
  return process.env.VAGRANT_DOTFILE_PATH ?? join(dir, '.vagrant');
}

export function settingsFile(dir = REPO_ROOT): string {
  return join(dotfileDir(dir), 'twill-lab.json');
}

/** The settings `up --vagrant` wrote; undefined when no Vagrant lab was brought up here. */
export async function readSettings(dir = REPO_ROOT): Promise<VagrantLabSettings | undefined> {
  let text: string;
  try {
    text = await readFile(settingsFile(dir), 'utf8');
  } catch {
    return undefined;
  }
  const s = JSON.parse(text) as Partial<VagrantLabSettings>;
  if (
    !PROVIDERS.includes(s.provider as VagrantProvider) ||
    !Number.isInteger(s.nodes) ||
    !Number.isInteger(s.pods) ||
    !Number.isInteger(s.spares) ||
    (s.backend !== 'vxlan' && s.backend !== 'host-gw')
  )
    throw new TwillError('CONFIG_INVALID', `${settingsFile(dir)}: not the lab's settings: ${text}`);
  return s as VagrantLabSettings;
}

/**
 * Runs a long step with its output shown (on stderr: stdout is the lab's answer); rejects on a
 * non-zero exit or after `timeoutMs`.
 */
function runShown(file: string, args: readonly string[], timeoutMs: number): Promise<void> {
  return new Promise((done, fail) => {
    const child = spawn(file, args, { stdio: ['ignore', 2, 2] });
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      fail(err);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) done();
      else
        fail(
          new TwillError(
            'COMMAND_FAILED',
            `${[file, ...args].join(' ')}: ${code === null ? `killed by ${signal ?? '?'} (timeout ${timeoutMs} ms?)` : `exit ${code}`} (its output is above)`,
          ),
        );
    });
  });
}

/** Whether `file args…` runs and exits 0. */
async function works(exec: VagrantExec, file: string, args: readonly string[]): Promise<boolean> {
  return exec(file, args, { timeoutMs: 60_000 }).then(
    () => true,
    () => false,
  );
}

/**
 * The provider to use and why: TWILL_LAB_PROVIDER when set; else VirtualBox when VBoxManage
 * answers, libvirt when /dev/kvm exists and vagrant-libvirt is installed, else lxc.
 */
export async function chooseProvider(
  env: Readonly<Record<string, string | undefined>> = process.env,
  exec: VagrantExec = run,
  hasKvm: () => boolean = () => existsSync('/dev/kvm'),
): Promise<{ provider: VagrantProvider; why: string }> {
  const asked = env.TWILL_LAB_PROVIDER;
  if (asked !== undefined && asked !== '') {
    if (!PROVIDERS.includes(asked as VagrantProvider))
      throw new TwillError(
        'CONFIG_INVALID',
        `TWILL_LAB_PROVIDER=${JSON.stringify(asked)}: must be ${PROVIDERS.join(', ')}`,
      );
    return { provider: asked as VagrantProvider, why: 'TWILL_LAB_PROVIDER' };
  }
  if (await works(exec, 'VBoxManage', ['--version']))
    return { provider: 'virtualbox', why: 'VirtualBox answers (VBoxManage --version)' };
  const plugins = await exec('vagrant', ['plugin', 'list'], { timeoutMs: 60_000 }).then(
    (r) => r.stdout,
    () => '',
  );
  if (hasKvm() && /^vagrant-libvirt\b/m.test(plugins))
    return { provider: 'libvirt', why: '/dev/kvm and vagrant-libvirt are there' };
  if (!/^vagrant-lxc\b/m.test(plugins))
    throw new TwillError(
      'CONFIG_MISSING',
      'no usable Vagrant provider: no VirtualBox, no /dev/kvm with vagrant-libvirt, no vagrant-lxc (scripts/host-deps.sh installs vagrant-lxc)',
    );
  return {
    provider: 'lxc',
    why: `no VirtualBox, ${hasKvm() ? 'no vagrant-libvirt' : 'no /dev/kvm'}: system containers sharing this kernel`,
  };
}

/** The lab's bridge for the lxc machines, with the host's address on it; idempotent. */
export async function ensureBridge(exec: VagrantExec = run): Promise<void> {
  const { bridge, hostAddress } = LXC_LAB;
  const exists = await works(exec, 'ip', ['link', 'show', 'dev', bridge]);
  if (!exists) await exec('ip', ['link', 'add', bridge, 'type', 'bridge'], { timeoutMs: 10_000 });
  await exec('ip', ['addr', 'replace', hostAddress, 'dev', bridge], { timeoutMs: 10_000 });
  await exec('ip', ['link', 'set', bridge, 'up'], { timeoutMs: 10_000 });
}

const INOTIFY_INSTANCES = '/proc/sys/fs/inotify/max_user_instances';

/**
 * inotify instances for `machines` containers: each container's systemd takes about 7 of the
 * per-user limit, and every privileged container's root is the host's root, so Debian's 128 stops
 * the 18th container's init. Raised (never lowered) to what the lab needs; the value before and
 * after, for `down` to put back.
 */
export async function ensureInotify(
  machines: number,
  file = INOTIFY_INSTANCES,
): Promise<{ was: number; set: number } | undefined> {
  const was = Number((await readFile(file, 'utf8')).trim());
  const want = 256 + 16 * machines;
  if (!Number.isInteger(was) || was >= want) return undefined;
  await writeFile(file, `${want}\n`);
  return { was, set: want };
}

/** Builds the lxc box when its recipe changed and adds it to Vagrant; ms it took. */
export async function ensureBox(log: (line: string) => void): Promise<number> {
  const t0 = performance.now();
  log(
    'lab: the lxc box (scripts/vagrant-box.sh: built from the Debian mirror when its recipe changed)…',
  );
  await runShown(BOX_SCRIPT, [], 1_800_000);
  return performance.now() - t0;
}

/**
 * The `vagrant up` arguments after the provider: on lxc one machine at a time. vagrant-lxc's
 * parallel start hangs now and then (a `sudo lxc-start` left a zombie and Vagrant waited on it for
 * good, 4 batches into 25 machines), and containers booting together on a small host gain little.
 */
export function upOptions(s: VagrantLabSettings): string[] {
  return s.provider === 'lxc' ? ['--no-parallel'] : [];
}

/** The env for every vagrant call on the lab (the Vagrantfile reads the settings file too). */
function vagrantEnv(dir: string, s: VagrantLabSettings): string[] {
  return [
    `VAGRANT_CWD=${dir}`,
    `TWILL_LAB_NODES=${s.nodes}`,
    `TWILL_LAB_PODS=${s.pods}`,
    `TWILL_LAB_SPARES=${s.spares}`,
    `TWILL_LAB_BACKEND=${s.backend}`,
  ];
}

/**
 * A cluster object for the lab in `dir`: as many node machines as `up --vagrant` wrote in the
 * settings, else (a lab brought up with plain `vagrant up`) as TWILL_LAB_NODES and
 * TWILL_LAB_SPARES say, as the Vagrantfile reads them.
 */
export async function openVagrantLab(
  dir = REPO_ROOT,
  env: Readonly<Record<string, string | undefined>> = process.env,
): Promise<VagrantCluster> {
  const s = await readSettings(dir);
  const spares = Number(env.TWILL_LAB_SPARES ?? '0');
  if (!s && (!Number.isInteger(spares) || spares < 0))
    throw new TwillError(
      'CONFIG_INVALID',
      `TWILL_LAB_SPARES=${JSON.stringify(env.TWILL_LAB_SPARES)}: must be a whole number ≥ 0`,
    );
  return new VagrantCluster({
    dir,
    nodes: s ? s.nodes + s.spares : labNodeCount(env) + spares,
    ...(s ? { provider: s.provider } : {}),
    transport: 'ssh',
    sshDir: join(dotfileDir(dir), 'twill-lab-ssh'),
  });
}

/**
 * `vagrant up` of the whole lab (the lxc box and bridge first); ms per step. The build of twill
 * (npm run build) is the caller's: lxc machines run what the host built.
 */
export async function vagrantUp(
  o: { dir?: string; settings: VagrantLabSettings },
  log: (line: string) => void,
): Promise<{ boxMs: number; upMs: number }> {
  const dir = o.dir ?? REPO_ROOT;
  const s = o.settings;
  await mkdir(dotfileDir(dir), { recursive: true });
  await writeFile(settingsFile(dir), `${JSON.stringify(s)}\n`);
  let boxMs = 0;
  if (s.provider === 'lxc') {
    boxMs = await ensureBox(log);
    await ensureBridge();
    const inotify = await ensureInotify(2 + s.nodes + s.spares);
    if (inotify) {
      log(
        `lab: fs.inotify.max_user_instances ${inotify.was} → ${inotify.set} (each container's systemd takes some; down puts it back)`,
      );
      await writeFile(settingsFile(dir), `${JSON.stringify({ ...s, inotify })}\n`);
    }
  }
  log(
    `lab: vagrant up --provider ${s.provider}: etcd, outside, node1..node${s.nodes}${s.spares > 0 ? ` and ${s.spares} spare nodes` : ''}…`,
  );
  const t0 = performance.now();
  await runShown(
    'env',
    [...vagrantEnv(dir, s), 'vagrant', 'up', '--provider', s.provider, ...upOptions(s)],
    3_600_000,
  );
  return { boxMs, upMs: performance.now() - t0 };
}

/** Names of the lxc containers on this host (lxc-ls). */
async function allContainers(): Promise<string[]> {
  const out = await run('lxc-ls', ['-1'], { timeoutMs: 30_000 }).then(
    (r) => r.stdout,
    () => '',
  );
  return out
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
}

/** Names of the lab's lxc containers that exist, whoever made them. */
async function labContainers(): Promise<string[]> {
  return (await allContainers()).filter((n) => n.startsWith(LXC_LAB.containerPrefix));
}

/**
 * cgroup folders LXC made for the lab's containers (payload and monitor), and its shared
 * `lxc.pivot` folders when no other container is left to use them.
 */
async function labCgroups(): Promise<string[]> {
  const found: string[] = [];
  const pivot = (await allContainers()).length === 0;
  const controllers = await readdir(LXC_LAB.cgroupRoot).catch(() => [] as string[]);
  for (const ctl of controllers) {
    const base = join(LXC_LAB.cgroupRoot, ctl);
    const entries = await readdir(base).catch(() => [] as string[]);
    for (const e of entries)
      if (
        e.startsWith(`lxc.payload.${LXC_LAB.containerPrefix}`) ||
        e.startsWith(`lxc.monitor.${LXC_LAB.containerPrefix}`) ||
        (pivot && e === 'lxc.pivot')
      )
        found.push(join(base, e));
  }
  return found;
}

/** Every folder under `dir` (itself last), deepest first. */
async function foldersDeepestFirst(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const sub = await Promise.all(
    entries.filter((e) => e.isDirectory()).map((e) => foldersDeepestFirst(join(dir, e.name))),
  );
  return [...sub.flat(), dir];
}

/**
 * What the Vagrant lab left on this host: its containers, their directories and cgroup folders, the
 * bridge, the settings file. Empty after `down`.
 */
export async function vagrantLeftovers(dir = REPO_ROOT): Promise<string[]> {
  const left: string[] = [];
  for (const c of await labContainers()) left.push(`lxc container ${c}`);
  const dirs = await readdir(LXC_LAB.lxcPath).catch(() => [] as string[]);
  for (const d of dirs)
    if (d.startsWith(LXC_LAB.containerPrefix)) left.push(`${join(LXC_LAB.lxcPath, d)}`);
  for (const g of await labCgroups()) left.push(`cgroup folder ${g}`);
  if (await works(run, 'ip', ['link', 'show', 'dev', LXC_LAB.bridge]))
    left.push(`bridge ${LXC_LAB.bridge}`);
  if (existsSync(settingsFile(dir))) left.push(settingsFile(dir));
  return left;
}

/** Ends the shared ssh connections the lab's commands opened (ssh -O exit per machine). */
async function closeSshConnections(dir: string): Promise<void> {
  const sshDir = join(dotfileDir(dir), 'twill-lab-ssh');
  const config = join(sshDir, 'config');
  const text = await readFile(config, 'utf8').catch(() => '');
  const hosts = [...text.matchAll(/^Host\s+(\S+)/gm)].map((m) => m[1] ?? '');
  await Promise.all(
    hosts.map((h) =>
      run('ssh', ['-F', config, '-o', `ControlPath=${sshDir}/%C`, '-O', 'exit', h], {
        timeoutMs: 10_000,
      }).catch(() => undefined),
    ),
  );
}

/**
 * `vagrant destroy -f` of every machine the settings define, then whatever outlived it on an lxc
 * lab; what was removed besides the machines.
 */
export async function vagrantDown(
  dir = REPO_ROOT,
): Promise<{ destroyMs: number; removed: string[] }> {
  const s = await readSettings(dir);
  await closeSshConnections(dir);
  const t0 = performance.now();
  // what outlives a failed destroy is removed all the same (lxc), then the failure is reported
  let failed: Error | undefined;
  if (s)
    await runShown('env', [...vagrantEnv(dir, s), 'vagrant', 'destroy', '-f'], 1_800_000).catch(
      (err: unknown) => (failed = err instanceof Error ? err : new Error(String(err))),
    );
  const destroyMs = performance.now() - t0;
  const removed: string[] = [];
  for (const c of await labContainers()) {
    await run('lxc-destroy', ['-f', '-n', c], { timeoutMs: 120_000 }).catch(() => undefined);
    removed.push(`lxc container ${c}`);
  }
  const dirs = await readdir(LXC_LAB.lxcPath).catch(() => [] as string[]);
  for (const d of dirs.filter((x) => x.startsWith(LXC_LAB.containerPrefix))) {
    await rm(join(LXC_LAB.lxcPath, d), { recursive: true, force: true });
    removed.push(join(LXC_LAB.lxcPath, d));
  }
  for (const g of await labCgroups()) {
    for (const f of await foldersDeepestFirst(g)) await rmdir(f).catch(() => undefined);
    if (!existsSync(g)) removed.push(`cgroup folder ${g}`);
  }
  if (await works(run, 'ip', ['link', 'show', 'dev', LXC_LAB.bridge])) {
    await run('ip', ['link', 'del', LXC_LAB.bridge], { timeoutMs: 10_000 });
    removed.push(`bridge ${LXC_LAB.bridge}`);
  }
  // the inotify limit as it was, unless someone changed it since
  if (s?.inotify) {
    const now = Number((await readFile(INOTIFY_INSTANCES, 'utf8')).trim());
    if (now === s.inotify.set) {
      await writeFile(INOTIFY_INSTANCES, `${s.inotify.was}\n`);
      removed.push(`fs.inotify.max_user_instances back to ${s.inotify.was}`);
    }
  }
  // the machines are gone: Vagrant's state of them, the ssh settings and sockets, the settings
  // (without settings this lab did not make them, and their state stays; after a failed destroy
  // it is what `vagrant destroy` needs again)
  if (failed !== undefined) throw failed;
  if (s) await rm(dotfileDir(dir), { recursive: true, force: true });
  return { destroyMs, removed };
}
