// Unit tests of the CNI plugin's pure input handling: the CNI_* variables per
// verb, the network config with its defaults, versions, and error mapping.
import { describe, expect, it } from 'vitest';
import { answerVersion, parseNetConf } from '../../cni/config.ts';
import { parseEnv } from '../../cni/env.ts';
import { CniError, asCniError, errorResult } from '../../cni/errors.ts';
import { hostVethName, ifnameProblem } from '../../cni/names.ts';
import { atLeast, parseVersion, versionResult } from '../../cni/version.ts';
import { CommandError } from '../../src/exec/runner.ts';
import { TwillError } from '../../src/errors.ts';

function codeOf(f: () => unknown): { code: number; msg: string } {
  try {
    f();
  } catch (err) {
    if (err instanceof CniError) return { code: err.cniCode, msg: err.message };
    const e = asCniError(err);
    return { code: e.cniCode, msg: e.message };
  }
  throw new Error('expected a failure');
}

const ADD_ENV = {
  CNI_COMMAND: 'ADD',
  CNI_CONTAINERID: 'c1',
  CNI_NETNS: '/var/run/netns/p',
  CNI_IFNAME: 'eth0',
};

describe('parseEnv', () => {
  it('reads what ADD needs', () => {
    expect(parseEnv({ ...ADD_ENV, CNI_ARGS: 'K8S_POD_NAME=web' })).toEqual({
      command: 'ADD',
      containerId: 'c1',
      netns: '/var/run/netns/p',
      ifname: 'eth0',
      args: 'K8S_POD_NAME=web',
    });
  });

  it.each([
    [{ ...ADD_ENV, CNI_COMMAND: undefined }, 'CNI_COMMAND is not set'],
    [{ ...ADD_ENV, CNI_COMMAND: 'FOO' }, 'CNI_COMMAND "FOO" is not one of'],
    [{ ...ADD_ENV, CNI_CONTAINERID: undefined }, 'CNI_CONTAINERID is not set; ADD needs it'],
    [{ ...ADD_ENV, CNI_NETNS: '' }, 'CNI_NETNS is not set'],
    [{ ...ADD_ENV, CNI_NETNS: 'relative' }, 'CNI_NETNS "relative" must be an absolute path'],
    [
      { ...ADD_ENV, CNI_IFNAME: 'a-very-long-ifname' },
      'CNI_IFNAME "a-very-long-ifname" is 18 bytes long; at most 15 are allowed',
    ],
    // 8 characters, 16 bytes: the kernel counts bytes
    [{ ...ADD_ENV, CNI_IFNAME: 'éééééééé' }, 'CNI_IFNAME "éééééééé" is 16 bytes long'],
    [{ ...ADD_ENV, CNI_IFNAME: 'et/h0' }, 'CNI_IFNAME "et/h0" may hold only letters, digits'],
    // ip -batch would cut the line at # or drop the quote
    [{ ...ADD_ENV, CNI_IFNAME: 'eth#0' }, 'CNI_IFNAME "eth#0" may hold only'],
    [{ ...ADD_ENV, CNI_IFNAME: '"eth0' }, 'CNI_IFNAME "\\"eth0" may hold only'],
    [{ ...ADD_ENV, CNI_IFNAME: '..' }, 'CNI_IFNAME ".." is not an interface name'],
    [
      { ...ADD_ENV, CNI_NETNS: '/var/run/netns/p\nlink set lo up' },
      'CNI_NETNS "/var/run/netns/p\\nlink set lo up" must not contain control characters',
    ],
    [
      { ...ADD_ENV, CNI_NETNS: '/var/run/netns/p q' },
      'CNI_NETNS "/var/run/netns/p q" must not contain',
    ],
    [
      { ...ADD_ENV, CNI_NETNS: '/var/run/netns/p#q' },
      'CNI_NETNS "/var/run/netns/p#q" must not contain',
    ],
    [
      { ...ADD_ENV, CNI_NETNS: "/var/run/netns/'p" },
      'must not contain control characters, white space, "#", quotes or backslashes',
    ],
    [{ ...ADD_ENV, CNI_NETNS: '/var/run/netns/p\\' }, 'must not contain'],
    [
      { ...ADD_ENV, CNI_COMMAND: 'CHECK', CNI_NETNS: '/var/run/netns/p\tq' },
      'CNI_NETNS "/var/run/netns/p\\tq" must not contain',
    ],
    [
      { ...ADD_ENV, CNI_CONTAINERID: '../etc' },
      'CNI_CONTAINERID "../etc" must start with a letter or digit',
    ],
  ])('refuses %j with code 4', (env, msg) => {
    const r = codeOf(() => parseEnv(env));
    expect(r.code).toBe(4);
    expect(r.msg).toContain(msg);
  });

  it('lets DEL go without CNI_NETNS, and GC/STATUS/VERSION with CNI_COMMAND only', () => {
    expect(parseEnv({ CNI_COMMAND: 'DEL', CNI_CONTAINERID: 'c1', CNI_IFNAME: 'eth0' }).netns).toBe(
      '',
    );
    for (const verb of ['GC', 'STATUS', 'VERSION'])
      expect(parseEnv({ CNI_COMMAND: verb }).command).toBe(verb);
  });

  it('accepts the interface names Linux and ip -batch both take', () => {
    for (const ifname of ['eth0', 'net1.100', 'a@b', 'x+y', 'v_1-2', '123456789012345'])
      expect(parseEnv({ ...ADD_ENV, CNI_IFNAME: ifname }).ifname).toBe(ifname);
  });

  it('does not refuse a DEL for its netns path (DEL never uses it)', () => {
    expect(
      parseEnv({ CNI_COMMAND: 'DEL', CNI_CONTAINERID: 'c1', CNI_IFNAME: 'eth0', CNI_NETNS: '/x y' })
        .command,
    ).toBe('DEL');
  });
});

describe('parseNetConf', () => {
  it('fills the defaults', () => {
    const c = parseNetConf('{"cniVersion":"1.0.0","name":"twill","type":"twill"}');
    expect(c).toMatchObject({
      subnetFile: '/run/twill/subnet.env',
      bridge: 'cni0',
      isGateway: true,
      isDefaultGateway: true,
      hairpinMode: true,
      mtu: undefined,
      dataDir: '/var/lib/cni/networks',
      logFile: undefined,
    });
  });

  it('reads every key, case-insensitively as Go does, and the runtime keys', () => {
    const c = parseNetConf(
      JSON.stringify({
        cniVersion: '1.1.0',
        name: 'n',
        Bridge: 'br1',
        isGateway: false,
        isDefaultGateway: false,
        hairpinMode: false,
        mtu: 1400,
        dataDir: '/d',
        subnetFile: '/s',
        logFile: '/l',
        prevResult: { ips: [] },
        'cni.dev/valid-attachments': [{ containerID: 'a', ifname: 'eth0' }],
      }),
    );
    expect(c).toMatchObject({
      bridge: 'br1',
      isGateway: false,
      isDefaultGateway: false,
      hairpinMode: false,
      mtu: 1400,
      dataDir: '/d',
      subnetFile: '/s',
      logFile: '/l',
    });
    expect(c.prevResult).toEqual({ ips: [] });
    expect(c.validAttachments).toEqual([{ containerId: 'a', ifname: 'eth0' }]);
  });

  it("reads GC's list also under the 1.1.0 spec text's key, cni.dev/attachments", () => {
    const only = parseNetConf(
      JSON.stringify({
        cniVersion: '1.1.0',
        name: 'n',
        'cni.dev/attachments': [{ containerID: 'b', ifname: 'eth0' }],
      }),
    );
    expect(only.validAttachments).toEqual([{ containerId: 'b', ifname: 'eth0' }]);
    const both = parseNetConf(
      JSON.stringify({
        cniVersion: '1.1.0',
        name: 'n',
        'cni.dev/valid-attachments': [{ containerID: 'a', ifname: 'eth0' }],
        'cni.dev/attachments': [{ containerID: 'b', ifname: 'eth0' }],
      }),
    );
    expect(both.validAttachments).toEqual([
      { containerId: 'a', ifname: 'eth0' },
      { containerId: 'b', ifname: 'eth0' },
    ]);
    expect(parseNetConf('{"cniVersion":"1.1.0","name":"n"}').validAttachments).toBeUndefined();
  });

  it('keeps the gateway on the bridge when it is the default gateway', () => {
    expect(parseNetConf('{"cniVersion":"1.0.0","name":"n","isGateway":false}').isGateway).toBe(
      true,
    );
  });

  it.each([
    ['{"cniVersion":', 6, 'network config: not valid JSON'],
    ['[1]', 7, 'must be a JSON object'],
    ['{"name":"n"}', 7, '"cniVersion" is missing'],
    [
      '{"cniVersion":"0.2.0","name":"n"}',
      1,
      '"cniVersion" "0.2.0" is not supported; twill supports 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0',
    ],
    ['{"cniVersion":"1.0.0"}', 7, '"name" is missing'],
    ['{"cniVersion":"1.0.0","name":"a/b"}', 7, '"name" "a/b" must start'],
    [
      '{"cniVersion":"1.0.0","name":"n","mtu":10}',
      7,
      '"mtu" must be an integer from 68 to 65535, got 10',
    ],
    [
      '{"cniVersion":"1.0.0","name":"n","bridge":"averyveryverylongbridge"}',
      7,
      '"bridge" "averyveryverylongbridge" is 23 bytes long',
    ],
    [
      '{"cniVersion":"1.0.0","name":"n","bridge":"br#0"}',
      7,
      '"bridge" "br#0" may hold only letters, digits',
    ],
    ['{"cniVersion":"1.0.0","name":"n","bridge":"\'br0"}', 7, '"bridge" "\'br0" may hold only'],
    ['{"cniVersion":"1.0.0","name":"n","bridge":"brücke0"}', 7, '"bridge" "brücke0" may hold only'],
    [
      '{"cniVersion":"1.1.0","name":"n","cni.dev/attachments":"x"}',
      7,
      '"cni.dev/attachments" must be a list',
    ],
    [
      '{"cniVersion":"1.0.0","name":"n","dataDir":"rel"}',
      7,
      '"dataDir" must be an absolute path, got "rel"',
    ],
    [
      '{"cniVersion":"1.0.0","name":"n","hairpinMode":"yes"}',
      7,
      '"hairpinMode" must be true or false, got "yes"',
    ],
    [
      '{"cniVersion":"1.1.0","name":"n","cni.dev/valid-attachments":{}}',
      7,
      '"cni.dev/valid-attachments" must be a list',
    ],
    [
      '{"cniVersion":"1.0.0","name":"n","readyUrl":"ftp://x"}',
      7,
      '"readyUrl" must be an http(s) URL',
    ],
  ])('refuses %s with code %i', (text, code, msg) => {
    const r = codeOf(() => parseNetConf(text));
    expect(r.code).toBe(code);
    expect(r.msg).toContain(msg);
  });

  it('answers errors in the config version when it is a supported one', () => {
    expect(answerVersion('{"cniVersion":"0.3.1"}')).toBe('0.3.1');
    expect(answerVersion('{"cniVersion":"9.9.9"}')).toBe('1.1.0');
    expect(answerVersion('nonsense')).toBe('1.1.0');
  });
});

describe('versions and names', () => {
  it('orders versions and lists them for VERSION', () => {
    expect(atLeast(parseVersion('0.4.0'), '0.4.0')).toBe(true);
    expect(atLeast(parseVersion('0.3.1'), '0.4.0')).toBe(false);
    expect(versionResult()).toEqual({
      cniVersion: '1.1.0',
      supportedVersions: ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'],
    });
  });

  it('names the host veth from container id + ifname: 15 characters, stable, distinct', () => {
    const a = hostVethName('abc', 'eth0');
    expect(a).toMatch(/^twv[0-9a-f]{12}$/);
    expect(hostVethName('abc', 'eth0')).toBe(a);
    expect(hostVethName('abc', 'eth1')).not.toBe(a);
    expect(ifnameProblem(a)).toBeUndefined();
  });
});

describe('errors', () => {
  it('maps twill error codes to CNI codes and shapes the error JSON', () => {
    expect(asCniError(new TwillError('SUBNET_ENV_INVALID', 'bad')).cniCode).toBe(102);
    expect(
      asCniError(
        new CommandError({ command: ['ip'], exitCode: 2, stderr: 'x', reason: 'exit code 2' }),
      ).cniCode,
    ).toBe(101);
    expect(asCniError(Object.assign(new Error('EACCES'), { syscall: 'open' })).cniCode).toBe(5);
    expect(asCniError(new Error('boom')).cniCode).toBe(100);
    expect(errorResult('1.0.0', new CniError({ cniCode: 7, message: 'm', details: 'd' }))).toEqual({
      cniVersion: '1.0.0',
      code: 7,
      msg: 'm',
      details: 'd',
    });
  });
});
