// The Vagrant lab's life cycle without machines: which provider it picks
// (and says why) from what answers on the host, the settings file `up
// --vagrant` writes and later commands read back, and the cluster object
// those settings make.
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  chooseProvider,
  ensureInotify,
  openVagrantLab,
  readSettings,
  settingsFile,
  upOptions,
  type VagrantLabSettings,
} from '../../lab/vagrant-lab.ts';

/** A host where `VBoxManage --version` works or not and `vagrant plugin list` says `plugins`. */
function host(o: { vbox: boolean; plugins: string }) {
  const calls: string[] = [];
  const exec = async (file: string, args: readonly string[]): Promise<{ stdout: string }> => {
    calls.push([file, ...args].join(' '));
    if (file === 'VBoxManage') {
      if (!o.vbox) throw new Error('VBoxManage: not found');
      return { stdout: '7.0.14r161095\n' };
    }
    if (file === 'vagrant') return { stdout: o.plugins };
    throw new Error(`unexpected ${file}`);
  };
  return { exec, calls };
}

const LXC = 'vagrant-lxc (1.4.3, system)\n';
const LIBVIRT = 'vagrant-libvirt (0.11.2, system)\n';

describe('chooseProvider', () => {
  it('takes VirtualBox when VBoxManage answers', async () => {
    const { exec } = host({ vbox: true, plugins: LXC });
    expect(await chooseProvider({}, exec, () => true)).toEqual({
      provider: 'virtualbox',
      why: 'VirtualBox answers (VBoxManage --version)',
    });
  });

  it('takes libvirt with /dev/kvm and vagrant-libvirt, else lxc, saying why', async () => {
    const both = host({ vbox: false, plugins: LIBVIRT + LXC });
    expect((await chooseProvider({}, both.exec, () => true)).provider).toBe('libvirt');
    expect(await chooseProvider({}, both.exec, () => false)).toEqual({
      provider: 'lxc',
      why: 'no VirtualBox, no /dev/kvm: system containers sharing this kernel',
    });
    const lxcOnly = host({ vbox: false, plugins: LXC });
    expect((await chooseProvider({}, lxcOnly.exec, () => true)).why).toContain(
      'no vagrant-libvirt',
    );
  });

  it('refuses when nothing is usable, and takes TWILL_LAB_PROVIDER as asked', async () => {
    const none = host({ vbox: false, plugins: 'No plugins installed.\n' });
    await expect(chooseProvider({}, none.exec, () => false)).rejects.toThrow(
      /no usable Vagrant provider.*host-deps/,
    );
    expect(await chooseProvider({ TWILL_LAB_PROVIDER: 'lxc' }, none.exec, () => false)).toEqual({
      provider: 'lxc',
      why: 'TWILL_LAB_PROVIDER',
    });
    expect(none.calls).toHaveLength(2);
    await expect(chooseProvider({ TWILL_LAB_PROVIDER: 'docker' }, none.exec)).rejects.toThrow(
      /TWILL_LAB_PROVIDER="docker": must be virtualbox, libvirt, lxc/,
    );
  });
});

describe('the settings file', () => {
  let dir = '';
  let saved: string | undefined;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'twill-vagrant-lab-'));
    saved = process.env.VAGRANT_DOTFILE_PATH;
    delete process.env.VAGRANT_DOTFILE_PATH;
  });
  afterEach(async () => {
    if (saved !== undefined) process.env.VAGRANT_DOTFILE_PATH = saved;
    await rm(dir, { recursive: true, force: true });
  });

  it('lives in the dotfile directory, and its machines make the cluster', async () => {
    expect(settingsFile(dir)).toBe(join(dir, '.vagrant', 'twill-lab.json'));
    expect(await readSettings(dir)).toBeUndefined();
    const s: VagrantLabSettings = {
      provider: 'lxc',
      nodes: 3,
      pods: 2,
      spares: 2,
      backend: 'vxlan',
    };
    await mkdir(join(dir, '.vagrant'));
    await writeFile(settingsFile(dir), JSON.stringify(s));
    expect(await readSettings(dir)).toEqual(s);
    const c = await openVagrantLab(dir, {});
    expect(c.description).toBe(`vagrant lab on lxc (5 node machines, ${dir}/Vagrantfile)`);
  });

  it('refuses a file that is not the settings, and counts TWILL_LAB_NODES and spares without one', async () => {
    await mkdir(join(dir, '.vagrant'));
    await writeFile(settingsFile(dir), '{"provider":"docker","nodes":3}');
    await expect(readSettings(dir)).rejects.toThrow(/not the lab's settings/);
    await rm(settingsFile(dir));
    const c = await openVagrantLab(dir, { TWILL_LAB_NODES: '4', TWILL_LAB_SPARES: '1' });
    expect(c.description).toBe(`vagrant lab (5 node machines, ${dir}/Vagrantfile)`);
    await expect(openVagrantLab(dir, { TWILL_LAB_SPARES: '-1' })).rejects.toThrow(
      /TWILL_LAB_SPARES/,
    );
  });
});

describe('vagrant up', () => {
  it('starts lxc machines one at a time, and leaves VM providers to Vagrant', () => {
    const s: VagrantLabSettings = {
      provider: 'lxc',
      nodes: 3,
      pods: 2,
      spares: 0,
      backend: 'vxlan',
    };
    expect(upOptions(s)).toEqual(['--no-parallel']);
    expect(upOptions({ ...s, provider: 'libvirt' })).toEqual([]);
    expect(upOptions({ ...s, provider: 'virtualbox' })).toEqual([]);
  });
});

describe('the inotify limit', () => {
  it('is raised to what the containers need, never lowered', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'twill-inotify-'));
    try {
      const file = join(dir, 'max_user_instances');
      await writeFile(file, '128\n');
      expect(await ensureInotify(25, file)).toEqual({ was: 128, set: 656 });
      expect(await readFile(file, 'utf8')).toBe('656\n');
      expect(await ensureInotify(5, file)).toBeUndefined();
      expect(await readFile(file, 'utf8')).toBe('656\n');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
