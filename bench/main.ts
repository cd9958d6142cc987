// `npm run bench [-- --json] [-- --only <suite>]`: runs every benchmark suite
// (as root: they build network namespaces and a real etcd) and prints one
// table of every figure, or JSON with --json.
import { cniSuite } from './cni.ts';
import { dataplaneSuite } from './dataplane.ts';
import { eventsSuite } from './events.ts';
import { idleSuite } from './idle.ts';
import { memorySuite } from './memory.ts';
import { throughputSuite } from './throughput.ts';
import { renderTable, type BenchRow, type BenchSuite } from './table.ts';

const suites: BenchSuite[] = [
  dataplaneSuite,
  memorySuite,
  eventsSuite,
  idleSuite,
  cniSuite,
  throughputSuite,
];

async function main(argv: readonly string[]): Promise<number> {
  const json = argv.includes('--json');
  const onlyAt = argv.indexOf('--only');
  const only = onlyAt >= 0 ? argv[onlyAt + 1] : undefined;
  const chosen = suites.filter((s) => only === undefined || s.name === only);
  if (only !== undefined && chosen.length === 0) {
    process.stderr.write(
      `--only ${only}: no such suite (have: ${suites.map((s) => s.name).join(', ')})\n`,
    );
    return 2;
  }
  const ctl = new AbortController();
  process.once('SIGINT', () => ctl.abort());
  const rows: BenchRow[] = [];
  for (const suite of chosen) {
    process.stderr.write(`bench: ${suite.name}…\n`);
    rows.push(...(await suite.run(ctl.signal)));
  }
  process.stdout.write(json ? `${JSON.stringify(rows, null, 2)}\n` : `${renderTable(rows)}\n`);
  return rows.some((r) => r.target && !r.target.met) ? 1 : 0;
}

process.exitCode = await main(process.argv.slice(2));
