// Unit tests of the verbs' failure paths with a fake process runner: GC
// deletes stale veths before it releases their addresses, keeps an address
// whose veth it could not delete, goes on past failures and reports them;
// ADD's rollback runs under its own signal after the call's was aborted.
import { mkdir, mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseEnv } from '../../cni/env.ts';
import { parseNetConf } from '../../cni/config.ts';
import { CniError } from '../../cni/errors.ts';
import { hostVethName } from '../../cni/names.ts';
import { cmdAdd } from '../../cni/verbs/add.ts';
import { cmdGc } from '../../cni/verbs/gc.ts';
import type { PluginDeps } from '../../cni/verbs/common.ts';
import { CommandError, type RunOptions } from '../../src/exec/runner.ts';
import { subnetEnvText } from '../../lab/kit/call-cni.ts';

interface Call {
  readonly file: string;
  readonly args: readonly string[];
  readonly input: string | undefined;
  readonly aborted: boolean | undefined;
}

let dir: string;
const log = { info: () => undefined, error: () => undefined };

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'twill-verbs-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function storeFile(ip: string, owner: string, ageMs: number): Promise<void> {
  const file = join(dir, 'ipam', 'twnet', ip);
  await writeFile(file, owner);
  const t = new Date(Date.now() - ageMs);
  await utimes(file, t, t);
}

describe('GC', () => {
  it('deletes stale veths first, keeps what it cannot delete, goes on, and reports every failure', async () => {
    await mkdir(join(dir, 'ipam', 'twnet'), { recursive: true });
    await storeFile('10.244.3.2', 'keep\r\neth0', 600_000);
    await storeFile('10.244.3.3', 'gone\r\neth0', 600_000);
    await storeFile('10.244.3.4', 'stuck\r\neth0', 600_000);
    await storeFile('10.244.3.5', 'inflight\r\neth0', 1000); // an ADD in flight: reserved just now
    const calls: Call[] = [];
    const stuck = hostVethName('stuck', 'eth0');
    const deps: PluginDeps = {
      log,
      signal: new AbortController().signal,
      runner: async (file, args, opts?: RunOptions) => {
        // when the veths go, every address is still reserved
        expect(
          (await readdir(join(dir, 'ipam', 'twnet'))).filter((n) => n.startsWith('10.')).length,
        ).toBe(4);
        calls.push({ file, args, input: opts?.input, aborted: opts?.signal?.aborted });
        const lines = (opts?.input ?? '').trim().split('\n');
        const at = lines.indexOf(`link del dev ${stuck}`) + 1;
        throw new CommandError({
          command: [file, ...args],
          exitCode: 1,
          stderr: `Cannot find device "x"\nCommand failed -:1\nRTNETLINK answers: Device or resource busy\nCommand failed -:${at}\n`,
          reason: 'exit code 1',
        });
      },
    };
    const conf = parseNetConf(
      JSON.stringify({
        cniVersion: '1.1.0',
        name: 'twnet',
        dataDir: join(dir, 'ipam'),
        'cni.dev/attachments': [{ containerID: 'keep', ifname: 'eth0' }],
      }),
    );
    const err = await cmdGc(deps, { env: parseEnv({ CNI_COMMAND: 'GC' }), conf }).catch(
      (e: unknown) => e,
    );
    expect(calls).toHaveLength(1);
    expect(calls[0]?.input).toContain(`link del dev ${hostVethName('gone', 'eth0')}`);
    expect(err).toBeInstanceOf(CniError);
    expect((err as CniError).message).toMatch(
      new RegExp(
        `GC finished with 1 error\\(s\\): cannot delete veth ${stuck}: RTNETLINK answers: Device or resource busy`,
      ),
    );
    // released: the stale one whose veth is gone; kept: the valid one, the stuck one, the one in
    // flight
    expect((await readdir(join(dir, 'ipam', 'twnet'))).sort()).toEqual([
      '10.244.3.2',
      '10.244.3.4',
      '10.244.3.5',
    ]);
  });
});

describe('ADD rollback', () => {
  it('cleans up under its own signal when the call was stopped (SIGTERM)', async () => {
    const netns = join(dir, 'netns');
    await writeFile(netns, '');
    await writeFile(
      join(dir, 'subnet.env'),
      subnetEnvText({ network: '10.244.0.0/16', subnet: '10.244.3.0/24', mtu: 1450 }),
    );
    const ctl = new AbortController();
    const calls: Call[] = [];
    const deps: PluginDeps = {
      log,
      signal: ctl.signal,
      runner: (file, args, opts?: RunOptions) => {
        calls.push({ file, args, input: opts?.input, aborted: opts?.signal?.aborted });
        if (args.includes('-batch')) {
          ctl.abort(new Error('stopped by signal')); // SIGTERM while the host batch runs
          return Promise.reject(
            new CommandError({
              command: [file, ...args],
              exitCode: undefined,
              stderr: '',
              reason: 'cancelled',
            }),
          );
        }
        return Promise.resolve({ stdout: '', stderr: '' });
      },
    };
    const env = parseEnv({
      CNI_COMMAND: 'ADD',
      CNI_CONTAINERID: 'term',
      CNI_NETNS: netns,
      CNI_IFNAME: 'eth0',
    });
    const conf = parseNetConf(
      JSON.stringify({
        cniVersion: '1.0.0',
        name: 'twnet',
        bridge: 'twtnobr0',
        subnetFile: join(dir, 'subnet.env'),
        dataDir: join(dir, 'ipam'),
      }),
    );
    await expect(cmdAdd(deps, { env, conf })).rejects.toThrow('cancelled');
    const del = calls.find((c) => c.args.includes('del'));
    expect(del?.args).toEqual(['link', 'del', 'dev', hostVethName('term', 'eth0')]);
    expect(del?.aborted).toBe(false);
    expect((await readdir(join(dir, 'ipam', 'twnet'))).filter((n) => n.startsWith('10.'))).toEqual(
      [],
    );
  });
});
