// Entry point of the twill CNI plugin (the single executable twill-cni): the
// only reader of process.env and stdin here. Hands both to runPlugin and
// writes its answer to stdout; SIGTERM/SIGINT abort the work in flight.
// Inside the executable this module is loaded into a V8 startup snapshot at
// build time (after one warm-up call), and `start` runs when the snapshot
// is deserialized.
import { startupSnapshot } from 'node:v8';
import { run } from '../src/exec/runner.ts';
import { runPlugin } from './plugin.ts';

async function readStdin(): Promise<string> {
  if (process.stdin.isTTY) return '';
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

async function main(): Promise<number> {
  const ctl = new AbortController();
  const stop = (): void => ctl.abort(new Error('stopped by signal'));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  const outcome = await runPlugin(
    { env: process.env, stdin: await readStdin() },
    { runner: run, signal: ctl.signal },
  );
  process.stdout.write(outcome.stdout);
  return outcome.exitCode;
}

function start(): void {
  main().then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`twill-cni: ${String(err)}\n`);
      process.exitCode = 1;
    },
  );
}

/**
 * Runs the code paths of a call once while the snapshot is built, so that the
 * snapshot holds them compiled: a first spawn costs ~7 ms of
 * lazy compilation otherwise.
 */
function warmUp(): void {
  const signal = new AbortController().signal;
  const version = runPlugin(
    { env: { CNI_COMMAND: 'VERSION' }, stdin: '{}' },
    { runner: run, signal },
  );
  const spawned = run(process.execPath, ['--version'], { signal });
  Promise.all([version, spawned]).catch((err: unknown) =>
    process.stderr.write(`twill-cni: warm-up failed: ${String(err)}\n`),
  );
}

if (startupSnapshot.isBuildingSnapshot()) {
  startupSnapshot.setDeserializeMainFunction(start);
  warmUp();
} else {
  start();
}
