// The benchmark table of docs/benchmarks.md (scripts/bench-table.ts): `npm run bench -- --json`
// output, npm's header lines included, becomes one markdown table; the rows here are real ones,
// from the run of 2026-11-24.
import { describe, expect, it } from 'vitest';
import {
  BENCH_BEGIN,
  BENCH_END,
  parseBenchOutput,
  renderBenchTable,
  replaceBenchBlock,
} from '../../scripts/bench-table.ts';

const ROWS = [
  {
    suite: 'dataplane',
    figure: 'cold convergence, 5000 peers, host-gw (process start → all entries)',
    value: 1387,
    unit: 'ms',
    yardstick: { name: 'raw ip -batch', value: 433 },
    target: { text: '≤ 1000 ms, ≤ 10× raw', met: false },
  },
  {
    suite: 'dataplane',
    figure: '  the same daemon with no peers (Node + libraries floor), host-gw',
    value: 82,
    unit: 'MiB',
  },
  {
    suite: 'events',
    figure: 'lease deleted → route gone (incl. 500 ms grace) p99, vxlan, 5000 peers, 100 events',
    value: 999.8,
    unit: 'ms',
    target: { text: '≤ 1000 ms', met: true },
  },
  {
    suite: 'cni',
    figure: 'ADD p50, 40 runs',
    value: 65.4043150000216,
    unit: 'ms',
    yardstick: { name: 'bridge + host-local', value: 13.957406000001356 },
    target: { text: 'ADD p50 ≤ 2× reference', met: false },
  },
  {
    suite: 'idle',
    figure: 'idle CPU over 60 s, 4 peers, 20004 unrelated nat rules left alone: the daemon',
    value: 0,
    unit: '% of a core',
    yardstick: { name: 'no extra rules', value: 0 },
    target: { text: '≤ 1 %', met: true },
  },
];

/** What `npm run bench -- --json > FILE` writes: npm's and the build's lines, then the JSON. */
const NPM_OUTPUT = [
  '',
  '> twill@0.1.0 bench',
  '> npm run build && node bench/main.ts --json',
  '',
  '',
  '> twill@0.1.0 build:cni',
  '> node scripts/build-cni.ts',
  '',
  JSON.stringify(ROWS, null, 2),
  '',
].join('\n');

describe('parseBenchOutput', () => {
  it('skips the lines npm prints before the JSON', () => {
    expect(parseBenchOutput(NPM_OUTPUT)).toEqual(ROWS);
  });

  it('takes bare JSON too', () => {
    expect(parseBenchOutput(JSON.stringify(ROWS))).toEqual(ROWS);
  });

  it('refuses output without the rows, and names a bad field', () => {
    expect(() => parseBenchOutput('> twill@0.1.0 bench\nbench: dataplane…\n')).toThrow(
      /no JSON array/,
    );
    const bad = [{ ...ROWS[0], value: '1387' }];
    expect(() => parseBenchOutput(JSON.stringify(bad))).toThrow(/row 1: "value"/);
  });
});

describe('renderBenchTable', () => {
  const lines = renderBenchTable(ROWS).split('\n');

  it('prints one header, then one line per row', () => {
    expect(lines[0]).toBe('| suite | figure | twill | yardstick | target | met |');
    expect(lines[1]).toBe('|---|---|---|---|---|---|');
    expect(lines).toHaveLength(2 + ROWS.length);
  });

  it('gives the yardstick with the ratio, the target and whether it was met', () => {
    expect(lines[2]).toBe(
      '| dataplane | cold convergence, 5000 peers, host-gw (process start → all entries) | 1387 ms | 433 ms (raw ip -batch), 3.20× | ≤ 1000 ms, ≤ 10× raw | NO |',
    );
    expect(lines[5]).toBe(
      '| cni | ADD p50, 40 runs | 65.4 ms | 13.96 ms (bridge + host-local), 4.69× | ADD p50 ≤ 2× reference | NO |',
    );
  });

  it('marks a row without yardstick or target with dashes, and an indented figure with ↳', () => {
    expect(lines[3]).toBe(
      '| dataplane | ↳ the same daemon with no peers (Node + libraries floor), host-gw | 82 MiB | - | - | - |',
    );
  });

  it('does not round a value up to its target', () => {
    expect(lines[4]).toContain('| 999.8 ms | - | ≤ 1000 ms | yes |');
  });

  it('gives no ratio to a yardstick of zero', () => {
    expect(lines[6]).toContain('| 0 % of a core | 0 % of a core (no extra rules) | ≤ 1 % | yes |');
  });

  it('escapes a pipe inside a cell', () => {
    const [row] = ROWS;
    const table = renderBenchTable([{ ...(row as (typeof ROWS)[0]), figure: 'a | b' }]);
    expect(table.split('\n')[2]).toContain('| a \\| b |');
  });
});

describe('replaceBenchBlock', () => {
  it('rewrites only what stands between the markers', () => {
    const doc = `# Benchmarks\n\nRun of a day.\n\n${BENCH_BEGIN}\nold table\n${BENCH_END}\n\nNotes.\n`;
    expect(replaceBenchBlock(doc, '| new |')).toBe(
      `# Benchmarks\n\nRun of a day.\n\n${BENCH_BEGIN}\n| new |\n${BENCH_END}\n\nNotes.\n`,
    );
  });

  it('refuses a document without the markers', () => {
    expect(() => replaceBenchBlock('# Benchmarks\n', '| new |')).toThrow(/bench:begin/);
  });
});
