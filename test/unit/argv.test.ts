// Unit tests of twill's command-line parser (src/cli/argv.ts): option forms, switches, repeated
// and replaced values, the usage errors and what wins over them, the help's layout; then the
// `twill` command's exit codes and streams for each outcome, run as a real process.
import { execFile } from 'node:child_process';
import { resolve as resolvePath } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import {
  commandHelp,
  parseCommandLine,
  programHelp,
  wrap,
  type Outcome,
  type ProgramSpec,
} from '../../src/cli/argv.ts';

const PROGRAM: ProgramSpec = {
  name: 'prog',
  description: 'a program to test the parser with',
  commands: [
    {
      name: 'go',
      description: 'go somewhere',
      options: [
        { name: 'to', arg: 'place', help: 'where to go', default: 'home' },
        { name: 'via', arg: 'stop', repeat: true, help: 'a stop on the way; repeatable' },
        { name: 'fast', help: 'hurry' },
      ],
    },
    { name: 'stay', description: 'stay here', options: [{ name: 'json', help: 'as JSON' }] },
  ],
};

function given(args: string[]): Record<string, unknown> {
  const outcome = parseCommandLine(PROGRAM, args);
  if (outcome.kind !== 'command') throw new Error(`not a command: ${JSON.stringify(outcome)}`);
  return Object.fromEntries(outcome.given);
}

function error(args: string[]): Extract<Outcome, { kind: 'error' }> {
  const outcome = parseCommandLine(PROGRAM, args);
  if (outcome.kind !== 'error') throw new Error(`not an error: ${JSON.stringify(outcome)}`);
  return outcome;
}

describe('parseCommandLine: options', () => {
  it('takes `--name value` and `--name=value`, and gives only what was given', () => {
    expect(given(['go'])).toStrictEqual({});
    expect(given(['go', '--to', 'work'])).toStrictEqual({ to: 'work' });
    expect(given(['go', '--to=work'])).toStrictEqual({ to: 'work' });
    expect(given(['go', '--to=a=b'])).toStrictEqual({ to: 'a=b' });
    expect(given(['go', '--to='])).toStrictEqual({ to: '' });
  });

  it('takes the next argument as the value even when it starts with a dash', () => {
    expect(given(['go', '--to', '-1'])).toStrictEqual({ to: '-1' });
    expect(given(['go', '--to', '--fast'])).toStrictEqual({ to: '--fast' });
  });

  it('lets the last value win, except for a repeatable option, which keeps all in order', () => {
    expect(given(['go', '--to', 'a', '--to=b'])).toStrictEqual({ to: 'b' });
    expect(given(['go', '--via', 'x', '--fast', '--via=y', '--via', 'x'])).toStrictEqual({
      via: ['x', 'y', 'x'],
      fast: true,
    });
  });

  it('gives a switch as true, and refuses a value for it', () => {
    expect(given(['go', '--fast'])).toStrictEqual({ fast: true });
    expect(error(['go', '--fast=true']).message).toBe("option '--fast' takes no value");
  });

  it("refuses another command's option, an unknown one and a short one, naming it", () => {
    expect(error(['stay', '--fast']).message).toBe("unknown option '--fast'");
    expect(error(['go', '--slow']).message).toBe("unknown option '--slow'");
    expect(error(['go', '--slow=1']).message).toBe("unknown option '--slow'");
    expect(error(['go', '-f']).message).toBe("unknown option '-f'");
  });

  it('refuses a value option at the end with no value', () => {
    expect(error(['go', '--fast', '--to']).message).toBe("option '--to <place>' argument missing");
  });

  it('refuses positional arguments, also after --', () => {
    expect(error(['go', 'there']).message).toBe(
      "too many arguments for 'go': 'there' (it takes options only)",
    );
    expect(error(['go', '--', '--fast']).message).toContain("'--fast'");
  });

  it("reports the first mistake, with the command's help", () => {
    const e = error(['go', '--slow', 'there', '--to']);
    expect(e.message).toBe("unknown option '--slow'");
    expect(e.help).toBe(commandHelp(PROGRAM, PROGRAM.commands[0]!));
  });
});

describe('parseCommandLine: commands, help and version', () => {
  const goHelp = commandHelp(PROGRAM, PROGRAM.commands[0]!);

  it('with no arguments is an error without a message, with the program help', () => {
    expect(parseCommandLine(PROGRAM, [])).toStrictEqual({
      kind: 'error',
      message: undefined,
      help: programHelp(PROGRAM),
    });
  });

  it('refuses an unknown command and an option before the command', () => {
    expect(error(['went']).message).toBe("unknown command 'went'");
    expect(error(['']).message).toBe("unknown command ''");
    expect(error(['--to', 'x', 'go']).message).toBe("unknown option '--to'");
    expect(error(['went']).help).toBe(programHelp(PROGRAM));
  });

  it('gives the program help for --help, -h and `help`', () => {
    for (const args of [['--help'], ['-h'], ['help'], ['--help', 'go']])
      expect(parseCommandLine(PROGRAM, args), args.join(' ')).toStrictEqual({
        kind: 'help',
        text: programHelp(PROGRAM),
      });
  });

  it("gives a command's help for its --help or -h anywhere, even after a mistake, and `help go`", () => {
    for (const args of [
      ['go', '--help'],
      ['go', '-h'],
      ['go', '--fast', '-h'],
      ['go', '--slow', 'there', '--help'],
      ['help', 'go'],
    ])
      expect(parseCommandLine(PROGRAM, args), args.join(' ')).toStrictEqual({
        kind: 'help',
        text: goHelp,
      });
  });

  it('takes --help as a value where a value is due', () => {
    expect(given(['go', '--to', '--help'])).toStrictEqual({ to: '--help' });
  });

  it('refuses `help` with an unknown command or more than one', () => {
    expect(error(['help', 'went']).message).toBe("unknown command 'went'");
    expect(error(['help', 'go', 'stay']).message).toContain("too many arguments for 'help'");
  });

  it('gives the version for --version, before the command or among its options', () => {
    for (const args of [['--version'], ['go', '--version'], ['go', '--slow', '--version']])
      expect(parseCommandLine(PROGRAM, args), args.join(' ')).toStrictEqual({ kind: 'version' });
  });
});

describe('help', () => {
  it("lists a command's options in order with their value names and defaults, then --help", () => {
    expect(commandHelp(PROGRAM, PROGRAM.commands[0]!)).toBe(
      [
        'Usage: prog go [options]',
        '',
        'go somewhere',
        '',
        'Options:',
        '  --to <place>  where to go (default: "home")',
        '  --via <stop>  a stop on the way; repeatable',
        '  --fast        hurry',
        '  -h, --help    display help for command',
        '',
      ].join('\n'),
    );
  });

  it('lists the commands and wraps long descriptions under themselves at 80 columns', () => {
    const long = 'word '.repeat(30).trim();
    const text = programHelp({
      name: 'prog',
      description: long,
      commands: [{ name: 'go', description: long, options: [] }],
    });
    const lines = text.split('\n');
    expect(lines.every((l) => l.length <= 80)).toBe(true);
    expect(lines.slice(0, 5)).toStrictEqual([
      'Usage: prog [options] [command]',
      '',
      'word '.repeat(16).trim(),
      'word '.repeat(14).trim(),
      '',
    ]);
    const go = lines.indexOf(`  go [options]    ${'word '.repeat(12).trim()}`);
    expect(go).toBeGreaterThan(0);
    expect(lines[go + 1]).toBe(`${' '.repeat(18)}${'word '.repeat(12).trim()}`);
    expect(lines[go + 2]).toBe(`${' '.repeat(18)}${'word '.repeat(6).trim()}`);
    expect(lines[go + 3]).toBe('  help [command]  display help for command');
  });

  it('keeps each option on one line when the option names leave too narrow a column', () => {
    const help = commandHelp(PROGRAM, {
      name: 'go',
      description: 'go',
      options: [{ name: 'a-very-long-option-name-indeed', arg: 'value', help: 'x '.repeat(60) }],
    });
    const line = help.split('\n').find((l) => l.includes('--a-very-long'));
    expect(line?.trimEnd()).toBe(
      `  --a-very-long-option-name-indeed <value>  ${'x '.repeat(60).trim()}`,
    );
  });

  it('wrap keeps a word longer than the width on a line of its own', () => {
    expect(wrap('a bb cccccc d', 4)).toStrictEqual(['a bb', 'cccccc', 'd']);
    expect(wrap('', 10)).toStrictEqual(['']);
  });
});

describe('the twill command', () => {
  const main = resolvePath(import.meta.dirname, '../../src/cli/main.ts');
  async function twill(
    args: string[],
    env: NodeJS.ProcessEnv = {},
  ): Promise<{ code: number; stdout: string; stderr: string }> {
    try {
      const r = await promisify(execFile)(process.execPath, [main, ...args], {
        env: { PATH: process.env.PATH, ...env },
      });
      return { code: 0, ...r };
    } catch (err) {
      const e = err as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  }

  it('prints the version and the help on stdout, exit 0', async () => {
    const version = await twill(['--version']);
    expect(version).toMatchObject({ code: 0, stderr: '' });
    expect(version.stdout).toMatch(/^\d+\.\d+\.\d+\S*\n$/);
    const help = await twill(['doctor', '--help']);
    expect(help).toMatchObject({ code: 0, stderr: '' });
    expect(help.stdout).toContain('--bridge <name>');
  });

  it('prints the mistake and the help on stderr, exit 2', async () => {
    const r = await twill(['status', '--cleanup']);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.split('\n').slice(0, 3)).toStrictEqual([
      "error: unknown option '--cleanup'",
      '',
      'Usage: twill status [options]',
    ]);
  });

  it('prints only the help on stderr with no command, exit 2', async () => {
    const r = await twill([]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^Usage: twill \[options\] \[command\]\n/);
  });

  it('reports a bad flag value in one line, exit 2, with the environment read too', async () => {
    const r = await twill(['run'], { TWILL_LOG_LEVEL: 'loud' });
    expect(r).toMatchObject({
      code: 2,
      stderr:
        'twill: --log-level "loud": must be one of fatal, error, warn, info, debug, trace, silent\n',
    });
  });
});
