// The Vagrant lab without VMs: `vagrant validate` on the Vagrantfile (with
// provider config ignored, again with the VirtualBox provider config
// checked for real against a stub VBoxManage, and with vagrant-lxc's),
// the machines it defines, and `bash -n` plus shellcheck on every
// provisioning script. Vagrant runs with its home and machine state in a
// temporary directory, so the repository and ~/.vagrant.d stay untouched.
import { chmod, cp, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import { commandFailure } from '../helpers/rejection.ts';
import { VAGRANT_LAB } from '../../lab/vagrant-cluster.ts';
import { LXC_LAB } from '../../lab/vagrant-lab.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const SCRIPTS = join(ROOT, 'lab', 'vagrant');
let tmp = '';

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'twill-vagrant-'));
  await mkdir(join(tmp, 'bin'));
  // VirtualBox's provider is usable when `VBoxManage --version` answers a supported version.
  await writeFile(
    join(tmp, 'bin', 'VBoxManage'),
    '#!/bin/sh\n[ "$1" = --version ] && { echo 7.0.14r161095; exit 0; }\necho "stub VBoxManage: $*" >&2\nexit 1\n',
  );
  await chmod(join(tmp, 'bin', 'VBoxManage'), 0o755);
});

afterAll(async () => {
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

/**
 * Runs vagrant in `dir` with a private home and state; `vbox` puts the stub VBoxManage first on
 * PATH.
 */
async function vagrant(
  dir: string,
  args: readonly string[],
  opts: { vbox?: boolean; env?: readonly string[] } = {},
): Promise<string> {
  const path = opts.vbox
    ? `${join(tmp, 'bin')}:${process.env.PATH ?? ''}`
    : (process.env.PATH ?? '');
  const env = [
    `PATH=${path}`,
    `VAGRANT_CWD=${dir}`,
    `VAGRANT_HOME=${join(tmp, 'home')}`,
    `VAGRANT_DOTFILE_PATH=${join(tmp, 'dot')}`,
    ...(opts.env ?? []),
  ];
  const { stdout, stderr } = await run('env', [...env, 'vagrant', ...args], { timeoutMs: 60_000 });
  return stdout + stderr;
}

async function failure(p: Promise<unknown>): Promise<string> {
  return (await commandFailure(p)).message;
}

/** A copy of the Vagrantfile and lab/vagrant/ with `edit` applied to the Vagrantfile. */
async function brokenCopy(name: string, edit: (text: string) => string): Promise<string> {
  const dir = join(tmp, name);
  await cp(SCRIPTS, join(dir, 'lab', 'vagrant'), { recursive: true });
  await writeFile(
    join(dir, 'Vagrantfile'),
    edit(await readFile(join(ROOT, 'Vagrantfile'), 'utf8')),
  );
  return dir;
}

describe('Vagrantfile', () => {
  it('passes `vagrant validate --ignore-provider` (what a machine without a provider can check)', async () => {
    expect(await vagrant(ROOT, ['validate', '--ignore-provider'])).toContain(
      'Vagrantfile validated successfully.',
    );
  });

  it('passes plain `vagrant validate` with the VirtualBox provider config checked', async () => {
    expect(await vagrant(ROOT, ['validate'], { vbox: true })).toContain(
      'Vagrantfile validated successfully.',
    );
  });

  it('passes `vagrant validate` with the lxc provider config checked (vagrant-lxc, from scripts/host-deps.sh)', async () => {
    expect(await vagrant(ROOT, ['validate'], { env: ['VAGRANT_DEFAULT_PROVIDER=lxc'] })).toContain(
      'Vagrantfile validated successfully.',
    );
  });

  it('fails lxc validation for a misspelled vagrant-lxc setting', async () => {
    const dir = await brokenCopy('broken-lxc', (t) =>
      t.replace('lxc.ssh_ip_addr = ip', 'lxc.ssh_ip_adr = ip'),
    );
    expect(
      await failure(vagrant(dir, ['validate'], { env: ['VAGRANT_DEFAULT_PROVIDER=lxc'] })),
    ).toContain('ssh_ip_adr');
  });

  it('fails validation for a misspelled VirtualBox setting and a missing provisioning script', async () => {
    const dir = await brokenCopy('broken', (t) =>
      t
        .replace('vb.cpus = cpus', 'vb.cpuz = cpus')
        .replace('lab/vagrant/etcd.sh', 'lab/vagrant/nope.sh'),
    );
    const msg = await failure(vagrant(dir, ['validate'], { vbox: true }));
    expect(msg).toContain('cpuz');
    expect(msg).toContain('nope.sh');
  });

  it('defines etcd, outside and TWILL_LAB_NODES nodes (default 3)', async () => {
    const machines = async (env: string[]): Promise<string[]> => {
      const out = await vagrant(ROOT, ['status', '--machine-readable'], { vbox: true, env });
      return out
        .split('\n')
        .filter((l) => l.split(',')[2] === 'state')
        .map((l) => l.split(',')[1] ?? '');
    };
    expect(await machines([])).toEqual(['etcd', 'outside', 'node1', 'node2', 'node3']);
    expect(await machines(['TWILL_LAB_NODES=5'])).toEqual([
      'etcd',
      'outside',
      'node1',
      'node2',
      'node3',
      'node4',
      'node5',
    ]);
  });

  it('adds TWILL_LAB_SPARES spare nodes after the nodes, and reads the settings `up --vagrant` wrote', async () => {
    const machines = async (env: string[]): Promise<string[]> => {
      const out = await vagrant(ROOT, ['status', '--machine-readable'], { vbox: true, env });
      return out
        .split('\n')
        .filter((l) => l.split(',')[2] === 'state')
        .map((l) => l.split(',')[1] ?? '');
    };
    expect(await machines(['TWILL_LAB_NODES=2', 'TWILL_LAB_SPARES=2'])).toEqual([
      'etcd',
      'outside',
      'node1',
      'node2',
      'node3',
      'node4',
    ]);
    const dot = join(tmp, 'dot-settings');
    await mkdir(dot, { recursive: true });
    await writeFile(
      join(dot, 'twill-lab.json'),
      JSON.stringify({ provider: 'lxc', nodes: 1, pods: 2, spares: 1, backend: 'vxlan' }),
    );
    expect(await machines([`VAGRANT_DOTFILE_PATH=${dot}`])).toEqual([
      'etcd',
      'outside',
      'node1',
      'node2',
    ]);
    expect(await machines([`VAGRANT_DOTFILE_PATH=${dot}`, 'TWILL_LAB_NODES=3'])).toHaveLength(6);
  });

  it('refuses a bad node count or backend', async () => {
    expect(
      await failure(vagrant(ROOT, ['validate', '-p'], { env: ['TWILL_LAB_NODES=0'] })),
    ).toContain('TWILL_LAB_NODES must be 1..200');
    expect(
      await failure(vagrant(ROOT, ['validate', '-p'], { env: ['TWILL_LAB_BACKEND=udp'] })),
    ).toContain('TWILL_LAB_BACKEND must be vxlan or host-gw');
  });

  it('uses the addresses and paths VagrantCluster assumes', async () => {
    const vagrantfile = await readFile(join(ROOT, 'Vagrantfile'), 'utf8');
    expect(vagrantfile).toContain(`UNDERLAY = "${VAGRANT_LAB.underlay}"`);
    expect(vagrantfile).toContain('ETCD_IP = "#{UNDERLAY}.10"');
    expect(vagrantfile).toContain('ip = "#{UNDERLAY}.#{10 + i}"');
    expect(vagrantfile).toContain(`OUTSIDE_ADDR = "${VAGRANT_LAB.outsideIp}/24"`);
    expect(vagrantfile).toContain(`LXC_BRIDGE = "${LXC_LAB.bridge}"`);
    expect(vagrantfile).toContain(`override.vm.box = "${LXC_LAB.box}"`);
    expect(vagrantfile).toContain(`lxc.container_name = "${LXC_LAB.containerPrefix}#{name}"`);
    expect(await readFile(join(ROOT, 'scripts', 'vagrant-box.sh'), 'utf8')).toContain(
      `BOX=${LXC_LAB.box}\n`,
    );
    expect(await readFile(join(SCRIPTS, 'etcd.sh'), 'utf8')).toContain(
      `ETCD_DATA_DIR=${VAGRANT_LAB.etcdDataDir}\n`,
    );
    expect(await readFile(join(SCRIPTS, 'node.sh'), 'utf8')).toContain(
      `StandardOutput=append:${VAGRANT_LAB.twillLog}\n`,
    );
    expect(await readFile(join(SCRIPTS, 'twill-lab'), 'utf8')).toContain(
      `PREFIX=${VAGRANT_LAB.podNetnsPrefix}\n`,
    );
  });
});

describe('provisioning scripts', () => {
  const scripts = async (): Promise<string[]> =>
    (await readdir(SCRIPTS)).sort().map((f) => join(SCRIPTS, f));

  it('are the ones the Vagrantfile and node.sh use', async () => {
    expect((await readdir(SCRIPTS)).sort()).toEqual([
      'base.sh',
      'etcd.sh',
      'node.sh',
      'nodejs.sh',
      'outside.sh',
      'twill-lab',
    ]);
  });

  it('are bash with `set -eu`', async () => {
    for (const file of await scripts()) {
      const text = await readFile(file, 'utf8');
      expect(text.startsWith('#!/bin/bash\n'), file).toBe(true);
      expect(text, file).toMatch(/^set -eu$/m);
    }
  });

  it('pass `bash -n`, which catches a syntax error', async () => {
    for (const file of await scripts()) await run('bash', ['-n', file]);
    const bad = join(tmp, 'bad.sh');
    await writeFile(bad, '#!/bin/bash\nset -eu\nif true; then echo\n');
    expect(await failure(run('bash', ['-n', bad]))).toContain('syntax error');
  });

  it('pass shellcheck (installed by scripts/host-deps.sh), which catches an unquoted expansion', async () => {
    await run('shellcheck', ['--version']).catch(() => {
      throw new Error('shellcheck is missing: run scripts/host-deps.sh (as root) first');
    });
    // shellcheck reports on stdout; sent to stderr so a failure's message carries the findings.
    const shellcheck = (files: readonly string[]): Promise<unknown> =>
      run('bash', ['-c', 'shellcheck --shell=bash -- "$@" >&2', 'shellcheck', ...files]);
    await shellcheck(await scripts());
    const bad = join(tmp, 'unquoted.sh');
    await writeFile(bad, '#!/bin/bash\nset -eu\nrm -rf $1/x\n');
    expect(await failure(shellcheck([bad]))).toContain('SC2086');
  });
});
