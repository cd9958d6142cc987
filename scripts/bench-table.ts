// `npm run docs:bench -- FILE`: turns the output of `npm run bench -- --json` into the one
// benchmark table of docs/benchmarks.md, rewriting what stands between its `bench:begin` and
// `bench:end` markers. `node scripts/bench-table.ts [FILE]` prints the table instead. FILE may be
// left out to read stdin. npm's own lines before the JSON ("> twill@0.1.0 bench", the build's) are
// skipped, so the output of `npm run bench -- --json > FILE` is taken as it is.
import { readFile, writeFile } from 'node:fs/promises';
import { ratio, type BenchRow } from '../bench/table.ts';

export const BENCH_BEGIN = '<!-- bench:begin -->';
export const BENCH_END = '<!-- bench:end -->';

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** One row of the JSON, checked field by field; the error names the row and the field. */
function benchRow(v: unknown, i: number): BenchRow {
  const bad = (what: string): Error => new Error(`bench row ${i + 1}: ${what}`);
  if (!isRecord(v)) throw bad('is not an object');
  const { suite, figure, value, unit, yardstick, target } = v;
  if (typeof suite !== 'string') throw bad('"suite" is not a string');
  if (typeof figure !== 'string') throw bad('"figure" is not a string');
  if (typeof value !== 'number' || !Number.isFinite(value)) throw bad('"value" is not a number');
  if (typeof unit !== 'string') throw bad('"unit" is not a string');
  const row: { -readonly [K in keyof BenchRow]: BenchRow[K] } = { suite, figure, value, unit };
  if (yardstick !== undefined) {
    if (
      !isRecord(yardstick) ||
      typeof yardstick.name !== 'string' ||
      typeof yardstick.value !== 'number'
    )
      throw bad('"yardstick" is not {name, value}');
    row.yardstick = { name: yardstick.name, value: yardstick.value };
  }
  if (target !== undefined) {
    if (!isRecord(target) || typeof target.text !== 'string' || typeof target.met !== 'boolean')
      throw bad('"target" is not {text, met}');
    row.target = { text: target.text, met: target.met };
  }
  return row;
}

/**
 * The rows of `npm run bench -- --json` output: the JSON array that starts on the first line
 * beginning with `[` that parses (npm prints its header lines before it on stdout).
 */
export function parseBenchOutput(text: string): BenchRow[] {
  const end = text.lastIndexOf(']');
  let start = 0;
  for (const line of text.split('\n')) {
    if (line.trimStart().startsWith('[') && end > start) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(text.slice(start, end + 1));
      } catch {
        start += line.length + 1;
        continue;
      }
      if (!Array.isArray(parsed)) break;
      return parsed.map(benchRow);
    }
    start += line.length + 1;
  }
  throw new Error('no JSON array of bench rows found (expected `npm run bench -- --json` output)');
}

/**
 * A measured value for the table: whole numbers as they are, others to 4 significant digits (so
 * 999.8 ms under a 1000 ms target does not print as 1000), trailing zeros dropped.
 */
function figure(n: number): string {
  if (Number.isInteger(n)) return String(n);
  return Math.abs(n) >= 1000 ? n.toFixed(0) : String(Number(n.toPrecision(4)));
}

/** Text for one table cell: pipes escaped, so a cell never splits. */
function cell(text: string): string {
  return text.replaceAll('|', '\\|');
}

/**
 * The rows as one markdown table: suite, figure (an indented figure, which qualifies the row above,
 * gets a ↳), twill's value, the yardstick measured in the same run with the ratio, the target and
 * whether it was met.
 */
export function renderBenchTable(rows: readonly BenchRow[]): string {
  const lines = [
    '| suite | figure | twill | yardstick | target | met |',
    '|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const name = /^\s/.test(r.figure) ? `↳ ${r.figure.trim()}` : r.figure;
    const q = ratio(r);
    const yardstick = r.yardstick
      ? `${figure(r.yardstick.value)} ${r.unit} (${r.yardstick.name})${q === undefined ? '' : `, ${q.toFixed(2)}×`}`
      : '-';
    const met = r.target ? (r.target.met ? 'yes' : 'NO') : '-';
    const cells = [r.suite, name, `${figure(r.value)} ${r.unit}`, yardstick, r.target?.text ?? '-'];
    lines.push(`| ${[...cells.map(cell), met].join(' | ')} |`);
  }
  return lines.join('\n');
}

/** `doc` with the text between the bench markers replaced by `table`. */
export function replaceBenchBlock(doc: string, table: string): string {
  const begin = doc.indexOf(BENCH_BEGIN);
  const end = doc.indexOf(BENCH_END);
  if (begin < 0 || end < 0 || end < begin)
    throw new Error(`no ${BENCH_BEGIN} … ${BENCH_END} block to rewrite`);
  return `${doc.slice(0, begin + BENCH_BEGIN.length)}\n${table}\n${doc.slice(end)}`;
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

async function main(argv: readonly string[]): Promise<number> {
  const writeAt = argv.indexOf('--write');
  const doc = writeAt >= 0 ? argv[writeAt + 1] : undefined;
  const rest = argv.filter((_, i) => writeAt < 0 || (i !== writeAt && i !== writeAt + 1));
  if ((writeAt >= 0 && doc === undefined) || rest.length > 1 || rest[0]?.startsWith('-')) {
    process.stderr.write('usage: bench-table.ts [--write DOC.md] [BENCH.json]\n');
    return 2;
  }
  const input = rest[0] === undefined ? await readStdin() : await readFile(rest[0], 'utf8');
  const table = renderBenchTable(parseBenchOutput(input));
  if (doc === undefined) {
    process.stdout.write(`${table}\n`);
    return 0;
  }
  await writeFile(doc, replaceBenchBlock(await readFile(doc, 'utf8'), table));
  process.stderr.write(`${doc}: benchmark table rewritten\n`);
  return 0;
}

if (import.meta.main) process.exitCode = await main(process.argv.slice(2));
