// The built `twill run` as it is deployed, jemalloc preloaded by its
// environment (src/cli/allocator.ts): the daemon has jemalloc mapped and says
// so, and the tools it runs (the long-lived ones checked: ip monitor, nft
// monitor) do not inherit the preload. Where the library cannot be loaded (hidden by a
// bind mount in a mount namespace of the test's own), ld.so complains, the
// daemon runs with glibc's malloc, says so with what to install, and
// programs the peers all the same. Its code comes from the code cache the
// build took (src/cli/loader.ts), and says so; with a V8 flag the cache was
// not taken under, V8 rejects the cache, the daemon says so and programs the
// peers all the same.
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allocatorIn, OWN_PRELOAD } from '../../src/cli/allocator.ts';
import { run } from '../../src/exec/runner.ts';
import { startEtcd, type EtcdServer } from '../../lab/kit/etcd.ts';
import { NetnsLab, sweepStaleNetns } from '../../lab/kit/netns.ts';
import { stopProcess } from '../../lab/kit/process.ts';
import { etcdStoreFlags, twillCommand, twillRunArgv } from '../../lab/kit/twill-command.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';

const lab = new NetnsLab();
let etcd: EtcdServer;
let dir: string;
let nodeNs: string;

/** The pids whose parent is `pid`. */
async function childrenOf(pid: number): Promise<number[]> {
  const found: number[] = [];
  for (const d of await readdir('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const stat = await readFile(`/proc/${d}/stat`, 'utf8').catch(() => '');
    // "pid (comm) state ppid …": comm may hold spaces, the fields after its ")" do not
    const ppid = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1];
    if (ppid === String(pid)) found.push(Number(d));
  }
  return found;
}

async function logOf(file: string): Promise<string> {
  return readFile(join(dir, file), 'utf8').catch(() => '');
}

/** `twill run` of node n1 against the lab's etcd, started by `command`. */
function runArgv(command: readonly string[]): string[] {
  return twillRunArgv(command, {
    store: etcdStoreFlags(etcd.endpoint, 'n1'),
    subnetFile: join(dir, 'subnet.env'),
    flags: ['--ip-masq'],
  });
}

/**
 * The daemon's log once it has programmed something: a pass, or on a cold start the routes it
 * writes early (host-gw: the first pass then finds the kernel as it wants it, and logs nothing).
 */
async function firstPass(file: string): Promise<string> {
  const wrote = /"(dataplane updated|dataplane written early)"/;
  await waitFor(async () => wrote.test(await logOf(file)), {
    timeoutMs: slowBound(10_000),
    what: `the first pass (${file})`,
  });
  return logOf(file);
}

function startLine(log: string): { allocator?: string; codeCache?: string } {
  const line = log.split('\n').find((l) => l.includes('"msg":"twill starting"'));
  return line ? (JSON.parse(line) as { allocator?: string; codeCache?: string }) : {};
}

beforeAll(async () => {
  await sweepStaleNetns();
  dir = await mkdtemp(join(tmpdir(), 'twill-alloc-'));
  const etcdNs = await lab.add('alloc-etcd');
  nodeNs = await lab.add('alloc-n1');
  await lab.link(
    { ns: etcdNs, dev: 'eth0', cidr: '10.124.0.1/24' },
    { ns: nodeNs, dev: 'eth0', cidr: '10.124.0.2/24' },
  );
  etcd = await startEtcd({ netns: etcdNs, host: '10.124.0.1', clientPort: 2379 });
  const put = (key: string, value: string): Promise<string> =>
    lab.exec(etcdNs, 'etcdctl', ['--endpoints', etcd.endpoint, 'put', key, value]);
  await put(
    '/coreos.com/network/config',
    '{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}',
  );
  // one peer, so every pass has a route to write
  await put(
    '/coreos.com/network/subnets/10.244.9.0-24',
    '{"PublicIP":"10.124.0.9","PublicIPv6":null,"BackendType":"host-gw"}',
  );
});

afterAll(async () => {
  await etcd?.destroy();
  await lab.destroy();
  await rm(dir, { recursive: true, force: true });
});

describe('the built twill run, jemalloc preloaded as deployed', () => {
  it('runs with jemalloc and says so; the tools it runs do not inherit the preload', async () => {
    const command = await twillCommand();
    expect(command).toContain(`LD_PRELOAD=${OWN_PRELOAD}`);
    const twill = lab.spawn(nodeNs, runArgv(command), join(dir, 'twill.log'));
    try {
      const log = await firstPass('twill.log');
      expect(startLine(log).allocator).toBe('jemalloc');
      expect(startLine(log).codeCache).toBe('accepted');
      expect(log).not.toContain('could not be loaded');
      expect(log).not.toContain('code cache');
      const pid = twill.pid as number;
      expect(allocatorIn(await readFile(`/proc/${pid}/maps`, 'utf8'))).toBe('jemalloc');
      // ip monitor (and nft monitor, when nft is there) run as long as the daemon does, from
      // when a cold start's early routes are in; a pass's read that ended meanwhile is skipped
      await waitFor(async () => (await childrenOf(pid)).length > 0, {
        timeoutMs: slowBound(10_000),
        what: "the daemon's monitors",
      });
      let checked = 0;
      for (const child of await childrenOf(pid)) {
        const [environ, maps] = await Promise.all([
          readFile(`/proc/${child}/environ`, 'utf8').catch(() => undefined),
          readFile(`/proc/${child}/maps`, 'utf8').catch(() => undefined),
        ]);
        if (environ === undefined || maps === undefined) continue;
        const preloads = environ.split('\0').filter((e) => e.startsWith('LD_PRELOAD='));
        expect(preloads, String(child)).toEqual([]);
        expect(allocatorIn(maps), String(child)).toBe('glibc');
        checked++;
      }
      expect(checked).toBeGreaterThan(0);
    } finally {
      await stopProcess(twill);
    }
  });

  it('where jemalloc cannot be loaded: glibc, a warning that names the package, the peers routed', async () => {
    const argv = runArgv(await twillCommand());
    // the library where ld.so finds it, hidden in a mount namespace of the daemon's alone
    const { stdout } = await run('ldconfig', ['-p']);
    const path = /\blibjemalloc\.so\.2 \([^)]*\) => (\S+)/.exec(stdout)?.[1];
    expect(path).toBeDefined();
    const hidden = [
      'unshare',
      '--mount',
      '--propagation',
      'private',
      'sh',
      '-c',
      'mount --bind /dev/null "$0" && exec "$@"',
      path as string,
      ...argv,
    ];
    await lab.exec(nodeNs, 'ip', ['route', 'flush', 'proto', '151']);
    const twill = lab.spawn(nodeNs, hidden, join(dir, 'twill-glibc.log'));
    try {
      const log = await firstPass('twill-glibc.log');
      expect(log).toContain(`object '${OWN_PRELOAD}' from LD_PRELOAD cannot be preloaded`);
      expect(startLine(log).allocator).toBe('glibc');
      expect(log).toMatch(
        /libjemalloc\.so\.2 could not be loaded \(install jemalloc: [^)]*libjemalloc2\)/,
      );
      const routes = await lab.exec(nodeNs, 'ip', ['route', 'show', 'proto', '151']);
      expect(routes).toContain('10.244.9.0/24 via 10.124.0.9');
    } finally {
      await stopProcess(twill);
    }
  });

  it('with a V8 flag the build did not take its code cache under: rejected, said, the peers routed', async () => {
    // Maglev allowed (the command's flags allow only the baseline compiler): another flag hash
    const argv = runArgv(await twillCommand(['--max-opt=2']));
    await lab.exec(nodeNs, 'ip', ['route', 'flush', 'proto', '151']);
    const twill = lab.spawn(nodeNs, argv, join(dir, 'twill-rejected.log'));
    try {
      const log = await firstPass('twill-rejected.log');
      expect(startLine(log).codeCache).toBe('rejected');
      expect(log).toMatch(/"level":30,.*the code cache built with twill is not used/);
      const routes = await lab.exec(nodeNs, 'ip', ['route', 'show', 'proto', '151']);
      expect(routes).toContain('10.244.9.0/24 via 10.124.0.9');
    } finally {
      await stopProcess(twill);
    }
  });
});
