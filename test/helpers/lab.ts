// Driving the netns lab as a user does, for the end-to-end tests: the lab
// command (`node lab/main.ts …`) and what a lab left behind after `down`
// (namespaces, its directory, processes whose arguments name that directory).
import { access } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { DrillResult } from '../../lab/drills.ts';
import { run } from '../../src/exec/runner.ts';

const LAB = resolve(import.meta.dirname, '../../lab/main.ts');

/** Runs the lab command; stdout (rejects with the CommandError on a non-zero exit). */
export async function lab(...args: string[]): Promise<string> {
  return labWith({}, ...args);
}

/** `lab`, with a bound other than 10 minutes. */
export async function labWith(o: { timeoutMs?: number }, ...args: string[]): Promise<string> {
  return (await run(process.execPath, [LAB, ...args], { timeoutMs: o.timeoutMs ?? 600_000 }))
    .stdout;
}

/**
 * `drill <which> --json` on lab `name`: the results, also when a drill
 * failed (the command then exits 1, and its JSON is what says why).
 */
export async function labDrills(
  name: string,
  which = 'all',
  timeoutMs = 600_000,
): Promise<DrillResult[]> {
  // arguments pass as "$@", never parsed by the shell; the exit code is dropped, the JSON kept
  const argv = [
    '-c',
    '"$@"; exit 0',
    'sh',
    process.execPath,
    LAB,
    '--name',
    name,
    'drill',
    which,
    '--json',
  ];
  const { stdout, stderr } = await run('sh', argv, { timeoutMs });
  if (stdout.trim() === '')
    throw new Error(`drill ${which} printed nothing; stderr: ${stderr.slice(-3000)}`);
  return JSON.parse(stdout) as DrillResult[];
}

/** What of lab `name` is still there: namespaces, its directory, its processes. */
export async function labLeftovers(name: string): Promise<string[]> {
  const nets = (await run('ip', ['netns', 'list'])).stdout
    .split('\n')
    .filter((l) => l.startsWith(`${name}-`));
  const dir = await access(`/run/twill-lab/${name}`).then(
    () => [`/run/twill-lab/${name}`],
    () => [],
  );
  const procs = (await run('ps', ['-eo', 'args'])).stdout
    .split('\n')
    .filter((l) => l.includes(`/run/twill-lab/${name}/`));
  return [...nets, ...dir, ...procs];
}
