// scripts/kubernetes.sh without building: the TWILL_<NAME> overrides are
// honoured and checked, cached binaries are found, only their paths go to
// stdout (in the order asked), and --cached-only with something missing
// names what is missing and says what to run.
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runToExit, type Finished } from '../../lab/kit/process.ts';
import { KUBERNETES_SCRIPT } from '../helpers/kube.ts';

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'twill-kas-script-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function script(
  env: Record<string, string>,
  args: string[] = ['kube-apiserver'],
): Promise<Finished> {
  // an empty cache by default, so nothing here can find the real one or start a build
  return runToExit([KUBERNETES_SCRIPT, ...args], {
    input: '',
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      TWILL_CACHE_DIR: join(dir, 'empty-cache'),
      ...env,
    },
    timeoutMs: 10_000,
  });
}

async function fakeBinary(name: string, mode: number): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, '#!/bin/sh\necho fake\n');
  await chmod(path, mode);
  return path;
}

describe('scripts/kubernetes.sh', () => {
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
    for (const args of [['kube-apiserver'], ['--cached-only', 'kube-apiserver']]) {
      const r = await script({ TWILL_CACHE_DIR: cache }, args);
      expect(r).toMatchObject({ code: 0, stdout: `${cached}\n`, stderr: '' });
    }
  });

  it('with --cached-only and nothing cached, fails and says how to build it', async () => {
    const r = await script({}, ['--cached-only', 'kube-apiserver']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('not cached in');
    expect(r.stderr).toContain('kube-apiserver');
    expect(r.stderr).toContain('run scripts/kubernetes.sh');
  });

  it('prints several binaries in the order asked, overrides and cached builds mixed; with one missing, names only that one', async () => {
    const cache = join(dir, 'cache-several');
    await mkdir(cache, { recursive: true });
    const kubectl = join(cache, 'kubectl-v1.20.2');
    await writeFile(kubectl, '#!/bin/sh\n');
    await chmod(kubectl, 0o755);
    const kubelet = await fakeBinary('kubelet-override', 0o755);
    const ok = await script({ TWILL_CACHE_DIR: cache, TWILL_KUBELET: kubelet }, [
      '--cached-only',
      'kubectl',
      'kubelet',
    ]);
    expect(ok).toMatchObject({ code: 0, stdout: `${kubectl}\n${kubelet}\n`, stderr: '' });
    const missing = await script({ TWILL_CACHE_DIR: cache, TWILL_KUBELET: kubelet }, [
      '--cached-only',
      'kubectl',
      'kubelet',
      'kube-proxy',
    ]);
    expect(missing.code).toBe(1);
    expect(missing.stdout).toBe('');
    expect(missing.stderr).toMatch(/not cached in \S+: kube-proxy \(/);
  });

  it('passes shellcheck', async () => {
    const r = await runToExit(['shellcheck', KUBERNETES_SCRIPT], {
      input: '',
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    });
    expect(r).toMatchObject({ code: 0, stdout: '' });
  });

  it('refuses an unknown argument', async () => {
    const r = await script({}, ['--bogus']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("unknown argument '--bogus'");
  });
});
