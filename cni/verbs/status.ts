// STATUS (CNI 1.1): ready (no output) once subnet.env is in place and, when
// `readyUrl` is configured, the daemon answers it with a 2xx; code 50 ("not
// available") otherwise.
import { CNI_CODES, asCniError, fail } from '../errors.ts';
import { loadSubnet, type PluginDeps, type Request } from './common.ts';

const READY_TIMEOUT_MS = 2000;

async function daemonReady(url: string, signal: AbortSignal): Promise<string | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.any([signal, AbortSignal.timeout(READY_TIMEOUT_MS)]) });
    return res.ok ? undefined : `${url} answered ${res.status}`;
  } catch (err) {
    return `${url} did not answer: ${(err as Error).message}`;
  }
}

export async function cmdStatus(deps: PluginDeps, req: Request): Promise<void> {
  const { conf } = req;
  try {
    await loadSubnet(conf.subnetFile);
  } catch (err) {
    fail(CNI_CODES.notAvailable, `twill is not ready: ${asCniError(err).message}`);
  }
  if (conf.readyUrl === undefined) return;
  const problem = await daemonReady(conf.readyUrl, deps.signal);
  if (problem) fail(CNI_CODES.notAvailable, `twill is not ready: ${problem}`);
}
