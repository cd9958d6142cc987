// `npm run docs:flags`: writes the README's configuration reference, the table between
// `<!-- flags:begin … -->` and `<!-- flags:end -->`, from RUN_FLAGS in src/cli/flags.ts, so the
// flags, their variables and their defaults are written down once. Only the text between the two
// marker lines changes. test/unit/flags-doc.test.ts fails while the README's block differs from
// what this renders.
import { readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { envName, RUN_FLAGS, type FlagSpec } from '../src/cli/flags.ts';

export const README = join(resolve(import.meta.dirname, '..'), 'README.md');
const BEGIN = '<!-- flags:begin';
const END = '<!-- flags:end -->';

/** A table cell: a `|` would end the cell early. */
function cell(markdown: string): string {
  return markdown.replace(/\|/g, '\\|');
}

function defaultCell(f: FlagSpec): string {
  if (f.default !== undefined) {
    const value = `\`${f.default}\``;
    return f.defaultText === undefined ? value : `${value} (${f.defaultText})`;
  }
  return f.defaultText ?? (f.kind === 'bool' ? 'off' : '');
}

function envCell(f: FlagSpec): string {
  if (f.commandLineOnly) return 'none (command line only)';
  const name = `\`${envName(f.name)}\``;
  return f.kind === 'repeat' ? `${name} (comma list)` : name;
}

function inEffectCell(f: FlagSpec): string {
  const store =
    f.store === 'etcd'
      ? 'without `--kube-subnet-mgr`'
      : f.store === 'kube'
        ? 'with `--kube-subnet-mgr`'
        : undefined;
  // `twill status` and `twill doctor` take the other flags too; a run-only one only `twill run`
  if (f.runOnly) return store === undefined ? '`twill run` only' : `\`twill run\` only, ${store}`;
  return store ?? 'always';
}

/** The Markdown table of `flags`, one row each, without a trailing newline. */
export function flagsTable(flags: readonly FlagSpec[] = RUN_FLAGS): string {
  const rows = flags.map((f) =>
    [`\`--${f.name}\``, envCell(f), defaultCell(f), f.doc ?? f.help, inEffectCell(f)].map(cell),
  );
  return [
    '| flag | environment variable | default | meaning | in effect |',
    '|---|---|---|---|---|',
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

/** Where the block's text starts (after the begin marker's line) and ends (at the end marker). */
function blockBounds(readme: string): { start: number; end: number } {
  const begin = readme.indexOf(BEGIN);
  if (begin < 0 || readme.indexOf(BEGIN, begin + 1) >= 0)
    throw new Error(`README.md needs exactly one line starting with ${BEGIN}`);
  const start = readme.indexOf('\n', begin) + 1;
  const end = readme.indexOf(END, start);
  if (start === 0 || end < 0) throw new Error(`README.md has no ${END} after ${BEGIN}`);
  return { start, end };
}

/** The text between the marker lines, without its last newline. */
export function flagsBlock(readme: string): string {
  const { start, end } = blockBounds(readme);
  return readme.slice(start, end).replace(/\n$/, '');
}

/** `readme` with the text between the marker lines replaced by `table`. */
export function withFlagsBlock(readme: string, table: string): string {
  const { start, end } = blockBounds(readme);
  return `${readme.slice(0, start)}${table}\n${readme.slice(end)}`;
}

if (import.meta.main) {
  const before = await readFile(README, 'utf8');
  const after = withFlagsBlock(before, flagsTable());
  if (after === before) {
    process.stdout.write('README.md: the flags block is up to date\n');
  } else {
    await writeFile(README, after);
    process.stdout.write('README.md: rewrote the flags block from src/cli/flags.ts\n');
  }
}
