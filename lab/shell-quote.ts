// Quoting for the one place the lab must build a shell string: the command
// `vagrant ssh -c` hands to the remote shell. Locally every process still
// gets an argument array; only the remote side parses this text, so each
// argument is quoted to reach the remote program byte for byte.
import { TwillError } from '../src/errors.ts';

const SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/;

/**
 * POSIX-shell quoting: safe words stay bare, everything else goes in single quotes (`'` becomes
 * `'\''`).
 */
export function shQuote(arg: string): string {
  if (arg.includes('\0'))
    throw new TwillError(
      'CONFIG_INVALID',
      `shell argument ${JSON.stringify(arg)}: contains a NUL byte, which no shell argument can carry`,
    );
  if (SAFE.test(arg)) return arg;
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}

/** One command line: every argument quoted, joined by spaces. */
export function shJoin(argv: readonly string[]): string {
  if (argv.length === 0)
    throw new TwillError('CONFIG_INVALID', 'shell command: empty argument list');
  return argv.map(shQuote).join(' ');
}

/**
 * Commands run as root one after the other, stopping at the first failure: `sudo -n -- a … && sudo
 * -n -- b …`.
 */
export function sudoChain(commands: readonly (readonly string[])[]): string {
  if (commands.length === 0) throw new TwillError('CONFIG_INVALID', 'shell command: no commands');
  return commands
    .map((argv) => {
      if (argv.length === 0)
        throw new TwillError('CONFIG_INVALID', 'shell command: empty argument list');
      return shJoin(['sudo', '-n', '--', ...argv]);
    })
    .join(' && ');
}
