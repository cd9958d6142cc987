// twill's command-line parser: `twill <command> [options]`, long options only, and the help
// text. It replaced the commander library, which the daemon loaded on every start for three
// commands whose options all come from one table (src/cli/flags.ts): commander was 107 KB of the
// bundle's 375 KB, and dropping it took 1.7 MiB of RSS and about 10 ms off `twill --version`.
// It only splits the command line: it applies no defaults and reads no environment
// (resolveRunFlags does, so it can tell a flag given from one not given), and it prints nothing
// (command.ts writes what the outcome says).
//
// The rules are commander's, as twill used it, so command lines keep their meaning:
// - `--name value` and `--name=value`; a value option takes the next argument whatever it is,
//   even one starting with `-` (use `--name=value` to make that plain);
// - a switch takes no value (`--ip-masq`, not `--ip-masq=true`);
// - an option given again replaces the earlier value, except a `repeat` one, which collects them;
// - `-h`/`--help` prints the help and `--version` the version, wherever they appear as options,
//   even after a mistake (the mistake is then not reported);
// - commands take no positional arguments; `--` ends the options, so anything after it is one;
// - `twill help [command]` is `twill [command] --help`.

/** One option of a command. */
export interface OptionSpec {
  /** without its dashes: `iface` is `--iface` */
  readonly name: string;
  /** the value's name in the help (`--iface <name|ip>`); without it, a switch taking no value */
  readonly arg?: string;
  /** may be given again, each value kept in order; otherwise the last one given wins */
  readonly repeat?: true;
  /** what it does, one line of plain text for the help */
  readonly help: string;
  /** shown in the help as `(default: "…")`; the parser does not apply it */
  readonly default?: string;
}

export interface CommandSpec {
  readonly name: string;
  readonly description: string;
  readonly options: readonly OptionSpec[];
}

export interface ProgramSpec {
  readonly name: string;
  readonly description: string;
  readonly commands: readonly CommandSpec[];
}

/** A switch's value is `true`, a repeat option's its values in order, another option's a string. */
export type OptionValue = string | readonly string[] | true;

/** The options given on the command line, by name (without dashes); absent when not given. */
export type GivenOptions = ReadonlyMap<string, OptionValue>;

export type Outcome =
  /** run `command` with `given` */
  | { readonly kind: 'command'; readonly command: string; readonly given: GivenOptions }
  /** print `text` on stdout and exit 0 */
  | { readonly kind: 'help'; readonly text: string }
  /** print the version on stdout and exit 0 */
  | { readonly kind: 'version' }
  /**
   * a usage error: print `error: <message>` (when there is one: a bare `twill` has none), then
   * the help, on stderr, and exit 2
   */
  | { readonly kind: 'error'; readonly message: string | undefined; readonly help: string };

/**
 * The help's width. Fixed rather than the terminal's, so the help reads the same in a pod's log
 * as in a shell; descriptions are wrapped to it, option lines too long for it are not (see rows).
 */
const WIDTH = 80;
/** A description column narrower than this is not wrapped: the help would be a thin ribbon. */
const MIN_WRAP = 40;
const HELP_OPTION = '-h, --help';
const HELP_TEXT = 'display help for command';

/** Splits the command line (without node and the script: process.argv.slice(2)). */
export function parseCommandLine(program: ProgramSpec, args: readonly string[]): Outcome {
  const [first, ...rest] = args;
  const topError = (message: string | undefined): Outcome => ({
    kind: 'error',
    message,
    help: programHelp(program),
  });
  if (first === undefined) return topError(undefined);
  if (first === '-h' || first === '--help') return { kind: 'help', text: programHelp(program) };
  if (first === '--version') return { kind: 'version' };
  if (first.startsWith('-') && first !== '-') return topError(`unknown option '${first}'`);
  if (first === 'help') {
    if (rest.length === 0) return { kind: 'help', text: programHelp(program) };
    const [name, ...extra] = rest;
    const cmd = program.commands.find((c) => c.name === name);
    if (cmd === undefined) return topError(`unknown command '${name}'`);
    if (extra.length > 0) return topError(`too many arguments for 'help': '${extra.join(' ')}'`);
    return { kind: 'help', text: commandHelp(program, cmd) };
  }
  const cmd = program.commands.find((c) => c.name === first);
  if (cmd === undefined) return topError(`unknown command '${first}'`);
  return parseCommand(program, cmd, rest);
}

function parseCommand(program: ProgramSpec, cmd: CommandSpec, args: readonly string[]): Outcome {
  const byName = new Map(cmd.options.map((o) => [o.name, o]));
  const given = new Map<string, OptionValue>();
  // the first mistake is kept and the walk goes on: a later --help still wins, as with commander
  let problem: string | undefined;
  const positional = (arg: string): void => {
    problem ??= `too many arguments for '${cmd.name}': '${arg}' (it takes options only)`;
  };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === '--') {
      args.slice(i + 1).forEach(positional);
      break;
    }
    if (arg === '-h' || arg === '--help') return { kind: 'help', text: commandHelp(program, cmd) };
    if (arg === '--version') return { kind: 'version' };
    if (!arg.startsWith('-') || arg === '-') {
      positional(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.startsWith('--') ? arg.slice(2, eq < 0 ? undefined : eq) : '';
    const opt = byName.get(name);
    if (opt === undefined) {
      problem ??= `unknown option '${eq < 0 ? arg : arg.slice(0, eq)}'`;
      continue;
    }
    if (opt.arg === undefined) {
      if (eq >= 0) problem ??= `option '--${name}' takes no value`;
      else given.set(name, true);
      continue;
    }
    let value: string;
    if (eq >= 0) value = arg.slice(eq + 1);
    else if (i + 1 < args.length) value = args[++i] as string;
    else {
      problem ??= `option '--${name} <${opt.arg}>' argument missing`;
      continue;
    }
    const before = given.get(name);
    given.set(name, opt.repeat ? [...(typeof before === 'object' ? before : []), value] : value);
  }
  if (problem !== undefined)
    return { kind: 'error', message: problem, help: commandHelp(program, cmd) };
  return { kind: 'command', command: cmd.name, given };
}

/** `twill --help`: the commands, each with its description. */
export function programHelp(program: ProgramSpec): string {
  const options: [string, string][] = [
    ['--version', 'print the version'],
    [HELP_OPTION, HELP_TEXT],
  ];
  const commands: [string, string][] = [
    ...program.commands.map((c): [string, string] => [`${c.name} [options]`, c.description]),
    ['help [command]', HELP_TEXT],
  ];
  const width = termWidth([...options, ...commands]);
  return [
    `Usage: ${program.name} [options] [command]`,
    '',
    ...wrap(program.description, WIDTH),
    '',
    'Options:',
    ...rows(options, width),
    '',
    'Commands:',
    ...rows(commands, width),
    '',
  ].join('\n');
}

/** `twill <command> --help`: every option with its value's name, its help and its default. */
export function commandHelp(program: ProgramSpec, cmd: CommandSpec): string {
  const options: [string, string][] = [
    ...cmd.options.map((o): [string, string] => [
      o.arg === undefined ? `--${o.name}` : `--${o.name} <${o.arg}>`,
      o.default === undefined ? o.help : `${o.help} (default: ${JSON.stringify(o.default)})`,
    ]),
    [HELP_OPTION, HELP_TEXT],
  ];
  return [
    `Usage: ${program.name} ${cmd.name} [options]`,
    '',
    ...wrap(cmd.description, WIDTH),
    '',
    'Options:',
    ...rows(options, termWidth(options)),
    '',
  ].join('\n');
}

/** The left column's width: the longest term and two spaces. */
function termWidth(items: readonly (readonly [string, string])[]): number {
  return Math.max(...items.map(([term]) => term.length)) + 2;
}

/**
 * Two columns, indented by two. The right one is wrapped under itself when it has room enough;
 * when it has not (`twill run`'s long option names), each item stays on one line, which also
 * keeps an option's help, variable and default on its line for grep.
 */
function rows(items: readonly (readonly [string, string])[], width: number): string[] {
  const room = WIDTH - 2 - width;
  const pad = ' '.repeat(2 + width);
  return items.flatMap(([term, text]) => {
    const lines = room >= MIN_WRAP ? wrap(text, room) : [text];
    return lines.map((line, i) => (i === 0 ? `  ${term.padEnd(width)}${line}` : `${pad}${line}`));
  });
}

/** Words into lines of at most `width` characters (a longer word gets a line of its own). */
export function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/).filter((w) => w !== '')) {
    if (line !== '' && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  return [...lines, line];
}
