// The plugin's kernel work, all through the project's single process runner:
// `ip -json -batch -` in the plugin's own (host) netns, the same inside the
// pod's netns through `nsenter --net=<CNI_NETNS>`, link deletion that treats
// "already gone" as done, and IPv4 forwarding for the gateway bridge.
import { readFile, writeFile } from 'node:fs/promises';
import { CommandError, type Runner } from '../src/exec/runner.ts';
import { jsonOutputs } from './ip-batch.ts';

export interface KernelDeps {
  readonly runner: Runner;
  readonly signal: AbortSignal;
}

const TIMEOUT_MS = 10_000;

function batchInput(lines: readonly string[]): string {
  return `${lines.join('\n')}\n`;
}

/** Runs a batch in the host netns; returns what each show command printed. */
export async function hostBatch(k: KernelDeps, lines: readonly string[]): Promise<unknown[][]> {
  const { stdout } = await k.runner('ip', ['-json', '-batch', '-'], { input: batchInput(lines), signal: k.signal, timeoutMs: TIMEOUT_MS });
  return jsonOutputs(stdout);
}

/** Runs a batch inside the netns at `netns` (a path). */
export async function podBatch(k: KernelDeps, netns: string, lines: readonly string[]): Promise<unknown[][]> {
  const args = [`--net=${netns}`, 'ip', '-json', '-batch', '-'];
  const { stdout } = await k.runner('nsenter', args, { input: batchInput(lines), signal: k.signal, timeoutMs: TIMEOUT_MS });
  return jsonOutputs(stdout);
}

export function isNoDevice(err: unknown): boolean {
  return err instanceof CommandError && /Cannot find device|does not exist/.test(err.stderr);
}

/** Deletes a host link (its veth peer goes with it); false when it was already gone. */
export async function deleteLink(k: KernelDeps, dev: string): Promise<boolean> {
  try {
    await k.runner('ip', ['link', 'del', 'dev', dev], { signal: k.signal, timeoutMs: TIMEOUT_MS });
    return true;
  } catch (err) {
    if (isNoDevice(err)) return false;
    throw err;
  }
}

/** Deletes host links in one batch, going on past links that are already gone. */
export async function deleteLinks(k: KernelDeps, devs: readonly string[]): Promise<void> {
  if (devs.length === 0) return;
  const lines = devs.map((d) => `link del dev ${d}`);
  try {
    await k.runner('ip', ['-force', '-batch', '-'], { input: batchInput(lines), signal: k.signal, timeoutMs: TIMEOUT_MS });
  } catch (err) {
    // with -force every line ran; only "already gone" failures are acceptable
    if (!(err instanceof CommandError)) throw err;
    const other = err.stderr.split('\n').filter((l) => l.trim() !== '' && !/Cannot find device|Command failed/.test(l));
    if (other.length > 0) throw err;
  }
}

const IP_FORWARD = '/proc/sys/net/ipv4/ip_forward';

/** Turns on IPv4 forwarding in the host netns, as the bridge plugin does for a gateway. */
export async function enableForwarding(): Promise<void> {
  const now = await readFile(IP_FORWARD, 'utf8');
  if (now.trim() !== '1') await writeFile(IP_FORWARD, '1');
}
