// Entry point of the twill CNI plugin (the single executable twill-cni): the
// only reader of process.env and stdin here. Hands both to runPlugin and
// writes its answer to stdout; SIGTERM/SIGINT abort the work in flight.
// Nothing runs on load: the executable's main script (sea-loader.ts) calls
// `start`; at build time it calls `warmUp` (VERSION, and ADD and DEL against
// a fake `ip`) and then keeps the code cache those calls compiled.
import { mkdtempSync, readSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isatty } from 'node:tty';
import { join } from 'node:path';
import { openFed, run, type Feeder, type Runner } from '../src/exec/runner.ts';
import { linkKind } from './kernel.ts';
import { runPlugin } from './plugin.ts';

/**
 * stdin to its end. Read synchronously (the config is small and nothing else runs yet): creating
 * process.stdin's stream and waiting for its events costs about a millisecond. A non-blocking
 * stdin that has no data yet (EAGAIN) is read on through the stream, after what was read.
 */
async function readStdin(): Promise<string> {
  if (isatty(0)) return '';
  const chunks: Buffer[] = [];
  const buf = Buffer.allocUnsafe(64 * 1024);
  for (;;) {
    let n: number;
    try {
      n = readSync(0, buf);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw err;
      for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
      break;
    }
    if (n === 0) break;
    chunks.push(Buffer.from(buf.subarray(0, n)));
  }
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
  // the answer is out before the exit below: a write to a pipe may finish after this call returns
  await new Promise<void>((resolve) => process.stdout.write(outcome.stdout, () => resolve()));
  return outcome.exitCode;
}

/** Runs one call of the plugin (the executable's start) and exits with its code. */
export function start(): void {
  main().then(
    (code) => {
      // everything is awaited and written (stdout above; stderr and the log file are written
      // synchronously): exiting now skips tearing down the V8 heap, about 1 ms
      process.exit(code);
    },
    (err: unknown) => {
      process.stderr.write(`twill-cni: ${String(err)}\n`);
      process.exitCode = 1;
    },
  );
}

/**
 * An `ip` that answers without running: each `link show dev X` line of a batch gets a link named
 * X, and `ip -d link show` a bridge; everything else succeeds. Only for the build's warm-up
 * calls.
 */
const fakeIp: Runner = (_file, args, opts = {}) => {
  if (opts.input !== undefined) {
    const shown = (opts.input ?? '')
      .split('\n')
      .flatMap((l) => (l.startsWith('link show dev ') ? [l.slice('link show dev '.length)] : []));
    const links = shown.map(
      (ifname) =>
        `${JSON.stringify([{ ifname, address: '02:00:00:00:00:01', mtu: 1450, flags: ['UP'] }])}\n`,
    );
    return Promise.resolve({ stdout: links.join(''), stderr: '' });
  }
  if (args.includes('show'))
    return Promise.resolve({
      stdout: JSON.stringify([{ linkinfo: { info_kind: 'bridge' }, link_type: 'ether' }]),
      stderr: '',
    });
  return Promise.resolve({ stdout: '', stderr: '' });
};

/**
 * The same for ADD's live batches: a shell loop that answers each `link show dev X` line as it
 * comes (X a bridge) and ignores the rest.
 */
const FAKE_LIVE_IP = [
  'while IFS= read -r l; do',
  '  case $l in "link show dev "*)',
  `    printf '[{"ifname":"%s","address":"02:00:00:00:00:01","mtu":1450,"flags":[],"linkinfo":{"info_kind":"bridge"}}]\\n' "\${l#link show dev }";;`,
  '  esac',
  'done',
].join('\n');

const fakeLiveIp: Feeder = (_file, _args, opts) => openFed('/bin/sh', ['-c', FAKE_LIVE_IP], opts);

/**
 * Runs ADD and DEL once each, for an IPv4 node whose bridge exists (lo plays it) and for a
 * dual-stack node whose bridge does not, against the fake ips and a throwaway subnet.env, netns
 * stand-in and IP store (no gateway: nothing of the build host's is read or written but those
 * files), so that the code cache holds their code paths compiled too.
 */
async function warmUpCalls(signal: AbortSignal): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'twill-cni-warm-'));
  try {
    const netns = join(dir, 'netns');
    writeFileSync(netns, '');
    const v4 = 'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\n';
    const v6 = 'FLANNEL_IPV6_NETWORK=fd00::/48\nFLANNEL_IPV6_SUBNET=fd00:0:0:3::1/64\n';
    for (const [i, text] of [v4, v4 + v6].entries()) {
      const subnetFile = join(dir, `subnet${i}.env`);
      writeFileSync(subnetFile, `${text}FLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n`);
      const stdin = JSON.stringify({
        cniVersion: '1.0.0',
        name: 'warm',
        type: 'twill',
        bridge: i === 0 ? 'lo' : 'twwarm0',
        isDefaultGateway: false,
        isGateway: false,
        subnetFile,
        dataDir: join(dir, 'ipam'),
        logFile: '/dev/null',
      });
      for (const verb of ['ADD', 'DEL']) {
        const env = {
          CNI_COMMAND: verb,
          CNI_CONTAINERID: `warm${i}`,
          CNI_NETNS: netns,
          CNI_IFNAME: 'eth0',
        };
        const k = { runner: fakeIp, openFed: fakeLiveIp, signal };
        const { exitCode, stdout } = await runPlugin({ env, stdin }, k);
        if (exitCode !== 0) throw new Error(`warm-up ${verb}: ${stdout}`);
      }
    }
    await linkKind({ runner: fakeIp, signal }, 'twwarm0');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Runs the code paths of a call once at build time, before the code cache is taken (sea-loader.ts),
 * so that the cache holds them compiled: a first spawn costs ~7 ms of lazy compilation otherwise,
 * and ADD's own path some more.
 */
export async function warmUp(): Promise<void> {
  const signal = new AbortController().signal;
  const version = runPlugin(
    { env: { CNI_COMMAND: 'VERSION' }, stdin: '{}' },
    { runner: run, signal },
  );
  const spawned = run(process.execPath, ['--version'], { signal });
  await Promise.all([version, spawned, warmUpCalls(signal)]);
}
