// The kubelet lab's image archives (lab/images.ts), on the two small images
// (the twill one needs root and debootstrap; the kubelet lab imports it into
// containerd): the `docker save` layout containerd's importer reads
// (manifest.json, a config whose diff_ids are the layers' sha256), the refs,
// the entry points, what each layer holds, and byte-identical rebuilds.
// Needs gcc with libc6-dev and busybox-static (scripts/host-deps.sh), no root.
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildPauseArchive,
  buildToolboxArchive,
  isStaticElf,
  LAB_IMAGE_REFS,
} from '../../lab/images.ts';
import { run } from '../../src/exec/runner.ts';

interface Manifest {
  Config: string;
  RepoTags: string[];
  Layers: string[];
}

interface Config {
  architecture: string;
  os: string;
  config: { Env?: string[]; Entrypoint?: string[]; Cmd?: string[]; WorkingDir?: string };
  rootfs: { type: string; diff_ids: string[] };
  history: { created_by: string }[];
}

const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

/** Unpacks an archive into `dir` and reads its one image. */
async function openArchive(
  archive: string,
  dir: string,
): Promise<{ manifest: Manifest; config: Config; configBytes: Buffer; layerFiles: string[] }> {
  await run('mkdir', ['-p', dir]);
  await run('tar', ['-xf', archive, '-C', dir]);
  const manifests = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as Manifest[];
  expect(manifests).toHaveLength(1);
  const manifest = manifests[0] as Manifest;
  const configBytes = await readFile(join(dir, manifest.Config));
  return {
    manifest,
    config: JSON.parse(configBytes.toString('utf8')) as Config,
    configBytes,
    layerFiles: manifest.Layers.map((l) => join(dir, l)),
  };
}

/** `tar -tv` of a layer: [mode, owner, name] per entry (and the mtime, which must be the epoch). */
async function listLayer(
  file: string,
): Promise<{ mode: string; owner: string; name: string; link: string }[]> {
  const { stdout } = await run('tar', ['--numeric-owner', '--utc', '-tvf', file]);
  return stdout
    .trim()
    .split('\n')
    .map((line) => {
      const [mode = '', owner = '', , date = '', time = '', ...rest] = line.split(/\s+/);
      expect(`${date} ${time}`).toBe('1970-01-01 00:00');
      const [name = '', link = ''] = rest.join(' ').split(' -> ');
      return { mode, owner, name, link };
    });
}

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'twill-images-'));
  await buildPauseArchive({ out: join(dir, 'pause.tar'), work: join(dir, 'work-pause') });
  await buildPauseArchive({
    out: join(dir, 'pause-again.tar'),
    work: join(dir, 'work-pause-again'),
  });
  await buildToolboxArchive({ out: join(dir, 'toolbox.tar'), work: join(dir, 'work-toolbox') });
});
afterAll(async () => {
  if (dir !== '') await rm(dir, { recursive: true, force: true });
});

describe.each([
  ['pause', LAB_IMAGE_REFS.pause],
  ['toolbox', LAB_IMAGE_REFS.toolbox],
])('the %s archive', (name, ref) => {
  it("is a docker save archive of one image: its ref, a config named by its digest, diff_ids that are the layers' sha256", async () => {
    const { stdout } = await run('tar', ['-tf', join(dir, `${name}.tar`)]);
    const { manifest, config, configBytes, layerFiles } = await openArchive(
      join(dir, `${name}.tar`),
      join(dir, `open-${name}`),
    );
    expect(stdout.trim().split('\n').sort()).toEqual(
      ['manifest.json', manifest.Config, ...manifest.Layers].sort(),
    );
    expect(manifest.RepoTags).toEqual([ref]);
    expect(manifest.Config).toBe(`${sha256(configBytes)}.json`);
    expect(config).toMatchObject({
      architecture: process.arch === 'arm64' ? 'arm64' : 'amd64',
      os: 'linux',
      rootfs: { type: 'layers' },
    });
    expect(config.config.Env).toEqual([
      'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    ]);
    expect(layerFiles).toHaveLength(1);
    const layers = await Promise.all(layerFiles.map((f) => readFile(f)));
    expect(config.rootfs.diff_ids).toEqual(layers.map((l) => `sha256:${sha256(l)}`));
    expect(manifest.Layers).toEqual(layers.map((l) => `${sha256(l)}/layer.tar`));
    expect(config.history).toHaveLength(layers.length);
  });
});

describe('the pause image', () => {
  it('holds only /pause, root-owned and executable, and runs it', async () => {
    const { config, layerFiles } = await openArchive(
      join(dir, 'pause.tar'),
      join(dir, 'open-pause-2'),
    );
    expect(config.config.Entrypoint).toEqual(['/pause']);
    expect(config.config.Cmd).toBeUndefined();
    expect(await listLayer(layerFiles[0] as string)).toEqual([
      { mode: '-rwxr-xr-x', owner: '0/0', name: 'pause', link: '' },
    ]);
  });

  it('is a static executable that ignores other signals and exits 0 on SIGTERM', async () => {
    const root = join(dir, 'pause-root');
    const { layerFiles } = await openArchive(join(dir, 'pause.tar'), join(dir, 'open-pause-3'));
    await run('mkdir', ['-p', root]);
    await run('tar', ['-xf', layerFiles[0] as string, '-C', root]);
    const pause = join(root, 'pause');
    expect(await isStaticElf(pause)).toBe(true);
    expect(await isStaticElf(process.execPath)).toBe(false);
    expect((await run(pause, ['-v'])).stdout).toMatch(/^twill-lab-pause /);
    // still there after SIGUSR1 and SIGHUP; then the exit status `wait` reports after SIGTERM
    const script = `"$0" & p=$!; sleep 0.2; kill -USR1 $p; kill -HUP $p; sleep 0.2; kill -0 $p && echo alive; kill -TERM $p; wait $p; echo "exit $?"`;
    expect((await run('sh', ['-c', script, pause])).stdout.trim().split('\n')).toEqual([
      'alive',
      'exit 0',
    ]);
  });

  it('is rebuilt byte for byte', async () => {
    const [a, b] = await Promise.all([
      readFile(join(dir, 'pause.tar')),
      readFile(join(dir, 'pause-again.tar')),
    ]);
    expect(sha256(a as Buffer)).toBe(sha256(b as Buffer));
  });
});

describe('the toolbox image', () => {
  it('runs sh from a static busybox with a link for every applet the drills use, and a sticky /tmp', async () => {
    const { config, layerFiles } = await openArchive(
      join(dir, 'toolbox.tar'),
      join(dir, 'open-toolbox-2'),
    );
    expect(config.config.Cmd).toEqual(['sh']);
    expect(config.config.Entrypoint).toBeUndefined();
    const entries = await listLayer(layerFiles[0] as string);
    const byName = new Map(entries.map((e) => [e.name.replace(/\/$/, ''), e]));
    expect(byName.get('bin/busybox')).toMatchObject({ mode: '-rwxr-xr-x', owner: '0/0' });
    for (const applet of [
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
    ]) {
      expect(byName.get(`bin/${applet}`), applet).toMatchObject({
        mode: 'lrwxrwxrwx',
        link: 'busybox',
      });
    }
    expect(byName.get('tmp')?.mode).toBe('drwxrwxrwt');
    expect(entries.every((e) => e.owner === '0/0')).toBe(true);
    const root = join(dir, 'toolbox-root');
    await run('mkdir', ['-p', root]);
    await run('tar', ['-xf', layerFiles[0] as string, '-C', root]);
    expect(await isStaticElf(join(root, 'bin', 'busybox'))).toBe(true);
    expect((await run(join(root, 'bin', 'sh'), ['-c', 'echo $((6 * 7))'])).stdout.trim()).toBe(
      '42',
    );
  });
});
