// `npm run bench [-- --json] [-- --only <suite>] [-- --soak-minutes N]`: runs the benchmark
// suites (as root: they build network namespaces and a real etcd) and prints one table of every
// figure, or JSON with --json. The default run is every suite but `soak` (30 minutes of lease
// churn), which runs only when named: `--only soak`, shortened with `--soak-minutes N`.
import { cniSuite } from './cni.ts';
import { dataplaneSuite } from './dataplane.ts';
import { eventsSuite } from './events.ts';
import { idleSuite } from './idle.ts';
import { kubeSuite } from './kube.ts';
import { memorySuite } from './memory.ts';
import { DEFAULT_SOAK_MINUTES, soakSuite } from './soak.ts';
import { throughputSuite } from './throughput.ts';
import { renderTable, type BenchRow, type BenchSuite } from './table.ts';

const HELP = `usage: node bench/main.ts [--json] [--only SUITE] [--soak-minutes N]
  --json            print the rows as JSON instead of a text table
  --only SUITE      run one suite: dataplane, memory, kube, events, idle, cni, throughput,
                    or soak (never part of the default run)
  --soak-minutes N  how long the soak churns (default ${DEFAULT_SOAK_MINUTES}; e.g. 3 for a check)
Exit code 1 when a row misses its target, 2 on a usage error.
`;

function suites(soakMinutes: number): BenchSuite[] {
  return [
    dataplaneSuite,
    memorySuite,
    kubeSuite,
    eventsSuite,
    idleSuite,
    cniSuite,
    throughputSuite,
    soakSuite(soakMinutes),
  ];
}

/** The value after `flag`, or undefined when the flag is absent. */
function option(argv: readonly string[], flag: string): string | undefined {
  const at = argv.indexOf(flag);
  return at >= 0 ? (argv[at + 1] ?? '') : undefined;
}

async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(HELP);
    return 0;
  }
  const json = argv.includes('--json');
  const only = option(argv, '--only');
  const minutesText = option(argv, '--soak-minutes');
  const soakMinutes = minutesText === undefined ? DEFAULT_SOAK_MINUTES : Number(minutesText);
  if (!(soakMinutes > 0)) {
    process.stderr.write(`--soak-minutes ${minutesText}: not a positive number of minutes\n`);
    return 2;
  }
  const all = suites(soakMinutes);
  const chosen = all.filter((s) => (only === undefined ? s.optIn !== true : s.name === only));
  if (only !== undefined && chosen.length === 0) {
    process.stderr.write(
      `--only ${only}: no such suite (have: ${all.map((s) => s.name).join(', ')})\n`,
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
