// Unit tests of ADD's live batches (the host one shows the bridge, waits,
// then runs the host batch; the pod one waits for the pod batch) against a
// stand-in for `ip`: a shell loop that reads batch lines as they come,
// answers each `link show dev X` at once, logs every line it got, and fails a
// line as ip does. And the number of processes an ADD starts, bridge there or
// not: ADD_PROCESSES.
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseNetConf } from '../../cni/config.ts';
import { parseEnv } from '../../cni/env.ts';
import { CniError } from '../../cni/errors.ts';
import { openHostSession, type KernelDeps } from '../../cni/kernel.ts';
import { ADD_PROCESSES, cmdAdd } from '../../cni/verbs/add.ts';
import type { PluginDeps } from '../../cni/verbs/common.ts';
import { CommandError, openFed, type Feeder, type RunOptions } from '../../src/exec/runner.ts';
import { subnetEnvText } from '../../lab/kit/call-cni.ts';

/**
 * `ip -batch -` as far as the session uses it; logs to $1, and $2 is the kind every shown link
 * has.
 */
const FAKE_IP = [
  'LOG=$1; KIND=$2; n=0',
  'while IFS= read -r l; do',
  '  n=$((n+1)); printf "%s\\n" "$l" >> "$LOG"',
  '  case $l in',
  '    "link show dev nosuch0") echo "Device \\"nosuch0\\" does not exist." >&2; echo "Command failed -:$n" >&2; exit 1;;',
  '    "link show dev "*) printf \'[{"ifname":"%s","address":"02:00:00:00:00:01","mtu":1450,"flags":["UP"],"linkinfo":{"info_kind":"%s"}}]\\n\' "${l#link show dev }" "$KIND";;',
  '    fail*) echo "RTNETLINK answers: File exists" >&2; echo "Command failed -:$n" >&2; exit 1;;',
  '  esac',
  'done',
].join('\n');

let dir: string;
let log: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'twill-session-'));
  log = join(dir, 'ip.log');
  await writeFile(log, '');
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Starts FAKE_IP in place of `ip`, counting the processes started. */
function fakeSpawn(kind: string, started: string[][]): Feeder {
  return (file, args, opts) => {
    started.push([file, ...args]);
    return openFed('/bin/sh', ['-c', FAKE_IP, 'sh', log, kind], opts);
  };
}

async function linesGot(): Promise<string[]> {
  return (await readFile(log, 'utf8')).split('\n').filter((l) => l !== '');
}

function deps(kind: string, started: string[][] = []): KernelDeps {
  return {
    runner: () => Promise.reject(new Error('no runner call expected')),
    signal: new AbortController().signal,
    openFed: fakeSpawn(kind, started),
  };
}

describe('openHostSession', () => {
  it('shows the bridge before anything else is sent, then runs the batch in the same process', async () => {
    const started: string[][] = [];
    const s = openHostSession(deps('bridge', started), 'cni0');
    expect(await s.bridge).toEqual({ kind: 'bridge', linkType: undefined });
    expect(await linesGot()).toEqual(['link show dev cni0']);
    const out = await s.finish(['link set dev x up', 'link show dev x', 'link show dev y']);
    expect(out.map((o) => (o[0] as { ifname: string }).ifname)).toEqual(['x', 'y']);
    expect(await linesGot()).toEqual([
      'link show dev cni0',
      'link set dev x up',
      'link show dev x',
      'link show dev y',
    ]);
    expect(started).toEqual([['ip', '-d', '-json', '-batch', '-']]);
  });

  it('says a missing bridge is missing', async () => {
    const s = openHostSession(deps('bridge'), 'nosuch0');
    expect(await s.bridge).toBeUndefined();
  });

  it('sends nothing more on close', async () => {
    const s = openHostSession(deps('veth'), 'cni0');
    expect(await s.bridge).toEqual({ kind: 'veth', linkType: undefined });
    await s.close();
    expect(await linesGot()).toEqual(['link show dev cni0']);
  });

  it('numbers a failed line as the caller counted its lines', async () => {
    const s = openHostSession(deps('bridge'), 'cni0');
    await s.bridge;
    const err = await s.finish(['link set dev x up', 'fail here']).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CommandError);
    expect((err as CommandError).stderr).toBe(
      'RTNETLINK answers: File exists\nCommand failed -:2\n',
    );
  });
});

describe('ADD', () => {
  async function add(
    bridge: string,
    kind: string,
  ): Promise<{ result: unknown; runs: string[][]; started: string[][] }> {
    const netns = join(dir, 'netns');
    await writeFile(netns, '');
    await writeFile(
      join(dir, 'subnet.env'),
      subnetEnvText({ network: '10.244.0.0/16', subnet: '10.244.3.0/24', mtu: 1450 }),
    );
    const runs: string[][] = [];
    const started: string[][] = [];
    const d: PluginDeps = {
      log: { info: () => undefined, error: () => undefined },
      signal: new AbortController().signal,
      openFed: fakeSpawn(kind, started),
      runner: (file, args, opts?: RunOptions) => {
        runs.push([file, ...args]);
        const shown = (opts?.input ?? '')
          .split('\n')
          .flatMap((l) => (l.startsWith('link show dev ') ? [l.slice(14)] : []));
        const stdout = shown
          .map(
            (ifname) =>
              `${JSON.stringify([{ ifname, address: '02:00:00:00:00:02', mtu: 1450 }])}\n`,
          )
          .join('');
        return Promise.resolve({ stdout, stderr: '' });
      },
    };
    const env = parseEnv({
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: 'count',
      CNI_NETNS: netns,
      CNI_IFNAME: 'eth0',
    });
    // no gateway: the test must not set the host's ip_forward
    const conf = parseNetConf(
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'twnet',
        bridge,
        isDefaultGateway: false,
        isGateway: false,
        subnetFile: join(dir, 'subnet.env'),
        dataDir: join(dir, 'ipam'),
      }),
    );
    const result = await cmdAdd(d, { env, conf }).catch((e: unknown) => e);
    return { result, runs, started };
  }

  it(`starts ${ADD_PROCESSES} processes when the bridge exists (lo plays it here)`, async () => {
    const { result, runs, started } = await add('lo', 'bridge');
    expect(result).toMatchObject({
      interfaces: [{ name: 'lo' }, {}, { name: 'eth0', sandbox: join(dir, 'netns') }],
      ips: [{ address: '10.244.3.2/24' }],
    });
    expect(started).toEqual([
      ['ip', '-d', '-json', '-batch', '-'],
      ['nsenter', `--net=${join(dir, 'netns')}`, 'ip', '-json', '-batch', '-'],
    ]);
    expect(runs).toEqual([]);
    expect(started.length + runs.length).toBe(ADD_PROCESSES);
  });

  it(`starts ${ADD_PROCESSES} processes when it creates the bridge`, async () => {
    const { result, runs, started } = await add('twtnobr0', 'bridge');
    expect(result).toMatchObject({ ips: [{ address: '10.244.3.2/24' }] });
    expect(started.map((r) => r[0])).toEqual(['nsenter']);
    expect(runs).toEqual([['ip', '-json', '-batch', '-']]);
    expect(started.length + runs.length).toBe(ADD_PROCESSES);
  });

  it('refuses a bridge that is not one having sent either ip nothing but the look, and reserves nothing', async () => {
    const { result, runs } = await add('lo', 'veth');
    expect(result).toBeInstanceOf(CniError);
    expect(result).toMatchObject({
      cniCode: 7,
      message:
        'network config: "bridge" "lo": lo already exists but is not a bridge (it is a veth device); twill leaves it alone',
    });
    expect(await linesGot()).toEqual(['link show dev lo']);
    expect(runs).toEqual([]);
    expect(await readdir(join(dir)).then((n) => n.includes('ipam'))).toBe(false);
  });
});
