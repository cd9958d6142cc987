// The quoting of the remote command `vagrant ssh -c` carries: hostile
// arguments must reach the remote program byte for byte, through the same
// two shells as on a VM (the login shell running Vagrant's `bash -l -c '…'`
// wrapper, then bash), simulated here with local shells.
import { describe, expect, it } from 'vitest';
import { run } from '../../src/exec/runner.ts';
import { shJoin, shQuote, sudoChain } from '../../lab/shell-quote.ts';

const HOSTILE = [
  '',
  ' ',
  "'",
  '"',
  "it's",
  "'''",
  '\\',
  "\\'",
  '$(echo injected)',
  '`id`',
  '$HOME',
  '${PATH}',
  'a b',
  '\n',
  'a\nb\n',
  '\t',
  '*',
  '?',
  '[a]',
  '~',
  '~root',
  '!',
  '!!',
  '#comment',
  ';ls',
  '&&',
  '||',
  '|',
  '>',
  '<',
  '{a,b}',
  '--',
  '-rf',
  '%s',
  'x=y',
  'ünïcødé ✓',
  'a\'b"c$d`e\\f',
  '\x01\x7f',
  "é'\n$",
];

/** What Vagrant's ssh_run does with the command (ShellQuote.escape then `bash -l -c '…'`). */
function vagrantWrap(command: string): string {
  return `bash -c '${command.replaceAll("'", "'\\''")}'`;
}

async function roundTrip(args: readonly string[], shell: string): Promise<string[]> {
  const command = shJoin(['printf', '%s\\0', ...args]);
  const { stdout } = await run(shell, ['-c', vagrantWrap(command)]);
  return stdout.split('\0').slice(0, -1);
}

describe('shQuote', () => {
  it('leaves plain words bare and quotes everything else', () => {
    expect(shQuote('ip')).toBe('ip');
    expect(shQuote('10.244.1.2/24')).toBe('10.244.1.2/24');
    expect(shQuote('--endpoints=http://192.168.56.10:2379')).toBe(
      '--endpoints=http://192.168.56.10:2379',
    );
    expect(shQuote('')).toBe("''");
    expect(shQuote('a b')).toBe("'a b'");
    expect(shQuote("it's")).toBe("'it'\\''s'");
    expect(shQuote('$(id)')).toBe("'$(id)'");
  });

  it('refuses a NUL byte, which no argument can carry', () => {
    expect(() => shQuote('a\0b')).toThrow(/NUL/);
  });

  for (const shell of ['bash', 'sh']) {
    it(`carries every hostile argument byte for byte through Vagrant's wrapper and ${shell}`, async () => {
      expect(await roundTrip(HOSTILE, shell)).toEqual(HOSTILE);
    });
  }

  it('carries each hostile argument alone (no neighbour hides a mistake)', async () => {
    for (const arg of HOSTILE) expect(await roundTrip([arg], 'bash')).toEqual([arg]);
  });
});

describe('sudoChain', () => {
  it('runs each command under sudo -n, chained with &&', () => {
    expect(
      sudoChain([
        ['rm', '-rf', '--', '/var/lib/etcd/twill-lab'],
        ['systemctl', 'start', 'etcd'],
      ]),
    ).toBe('sudo -n -- rm -rf -- /var/lib/etcd/twill-lab && sudo -n -- systemctl start etcd');
  });

  it('stops at the first failure, as && does', async () => {
    const chain = sudoChain([['false'], ['echo', 'ran']]);
    const { stdout } = await run('bash', [
      '-c',
      `sudo() { shift 2; "$@"; }; ${chain} || echo stopped`,
    ]);
    expect(stdout.trim()).toBe('stopped');
  });

  it('refuses an empty command or an empty chain', () => {
    expect(() => sudoChain([])).toThrow(/no commands/);
    expect(() => sudoChain([[]])).toThrow(/empty/);
    expect(() => shJoin([])).toThrow(/empty/);
  });
});
