// scripts/kube-apiserver.sh without building: the TWILL_KUBE_APISERVER
// override is honoured and checked, a cached binary is found, only the path
// goes to stdout, and --cached-only with nothing cached says what to run.
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runToExit, type Finished } from '../helpers/process.ts';
import { KUBE_APISERVER_SCRIPT } from '../helpers/kube.ts';

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'twill-kas-script-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function script(env: Record<string, string>, args: string[] = []): Promise<Finished> {
  // an empty cache by default, so nothing here can find the real one or start a build
  return runToExit([KUBE_APISERVER_SCRIPT, ...args], {
    input: '',
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', TWILL_CACHE_DIR: join(dir, 'empty-cache'), ...env },
    timeoutMs: 10_000,
  });
}

async function fakeBinary(name: string, mode: number): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, '#!/bin/sh\necho fake\n');
  await chmod(path, mode);
  return path;
}

describe('scripts/kube-apiserver.sh', () => {
  it('prints $TWILL_KUBE_APISERVER when it is an executable file, and nothing else', async () => {
    const bin = await fakeBinary('kas-exec', 0o755);
    const r = await script({ TWILL_KUBE_APISERVER: bin });
    expect(r).toMatchObject({ code: 0, stdout: `${bin}\n`, stderr: '' });
  });

  it('refuses a TWILL_KUBE_APISERVER that does not exist', async () => {
    const missing = join(dir, 'no-such-binary');
    const r = await script({ TWILL_KUBE_APISERVER: missing });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(`TWILL_KUBE_APISERVER=${missing} does not exist`);
  });

  it('refuses a TWILL_KUBE_APISERVER that is not executable, or a directory', async () => {
    const plain = await fakeBinary('kas-plain', 0o644);
    for (const path of [plain, dir]) {
      const r = await script({ TWILL_KUBE_APISERVER: path });
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain(`TWILL_KUBE_APISERVER=${path} is not an executable file`);
    }
  });

  it('prints the cached build when there is one', async () => {
    const cache = join(dir, 'cache');
    await mkdir(cache, { recursive: true });
    const cached = join(cache, 'kube-apiserver-v1.20.2');
    await writeFile(cached, '#!/bin/sh\n');
    await chmod(cached, 0o755);
    for (const args of [[], ['--cached-only']]) {
      const r = await script({ TWILL_CACHE_DIR: cache }, args);
      expect(r).toMatchObject({ code: 0, stdout: `${cached}\n`, stderr: '' });
    }
  });

  it('with --cached-only and nothing cached, fails and says how to build it', async () => {
    const r = await script({}, ['--cached-only']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('no kube-apiserver at');
    expect(r.stderr).toContain('run scripts/kube-apiserver.sh');
  });

  it('passes shellcheck', async () => {
    const r = await runToExit(['shellcheck', KUBE_APISERVER_SCRIPT], { input: '', env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } });
    expect(r).toMatchObject({ code: 0, stdout: '' });
  });

  it('refuses an unknown argument', async () => {
    const r = await script({}, ['--bogus']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("unknown argument '--bogus'");
  });
});
