// `twill status`, the reads: the network config and every lease from the
// store (one listing), our subnet.env, the interface, the kernel's view of
// twill's objects, and whether a `twill run` is running in this network
// namespace (and what its /readyz says, when its health port is known).
import { readdir, readFile, readlink } from 'node:fs/promises';
import { vxlan6DeviceName, vxlanDeviceName } from '../dataplane/desired.ts';
import { detectIptables, observe } from '../dataplane/observe.ts';
import type { Runner } from '../exec/runner.ts';
import { listLeases } from '../lease/snapshot.ts';
import type { LeaseStore } from '../lease/types.ts';
import { discoverInterface, type IfaceRequest } from '../net/iface.ts';
import { sameCidr } from '../net/ipv4.ts';
import { readSubnetEnv } from '../subnetenv.ts';
import type { StatusInput } from './report.ts';

export interface GatherOptions {
  readonly store: LeaseStore;
  readonly runner: Runner;
  readonly iface: IfaceRequest;
  readonly subnetFile: string;
  /** the daemon's health port (0: unknown) */
  readonly healthzPort: number;
  readonly signal: AbortSignal;
}

/** A `twill run` process in our own network namespace, by pid. */
async function daemonPid(): Promise<number | undefined> {
  const ours = await readlink('/proc/self/ns/net');
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    const argv = (await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '')).split('\0');
    const isTwill =
      argv.some((a) => /(^|\/)(twill|main\.js|main\.ts)$/.test(a)) && argv.includes('run');
    if (isTwill && (await readlink(`/proc/${name}/ns/net`).catch(() => '')) === ours)
      return Number(name);
  }
  return undefined;
}

async function daemonState(healthzPort: number): Promise<StatusInput['daemon']> {
  const pid = await daemonPid();
  if (pid === undefined)
    return { running: false, detail: 'not running: showing the store and kernel views only' };
  if (healthzPort <= 0)
    return {
      running: true,
      detail: `running (pid ${pid}); pass --healthz-port to ask its /readyz`,
    };
  try {
    const res = await fetch(`http://127.0.0.1:${healthzPort}/readyz`, {
      signal: AbortSignal.timeout(2_000),
    });
    return {
      running: true,
      detail: `running (pid ${pid}); /readyz ${res.status}: ${(await res.text()).trim()}`,
    };
  } catch (err) {
    return {
      running: true,
      detail: `running (pid ${pid}); /readyz on port ${healthzPort} did not answer (${err instanceof Error ? err.message : String(err)})`,
    };
  }
}

export async function gatherStatus(o: GatherOptions): Promise<StatusInput> {
  const { store, runner, signal } = o;
  const config = await store.getNetworkConfig(signal);
  const [env, records, choice, iptables, daemon] = await Promise.all([
    readSubnetEnv(o.subnetFile).catch(() => undefined),
    listLeases(store, signal),
    discoverInterface(runner, { ...o.iface, ipv6: config.ipv6 !== null }, signal),
    detectIptables(runner, signal),
    daemonState(o.healthzPort),
  ]);
  const mine = records.find(
    (r) =>
      r.ok &&
      (env ? sameCidr(r.lease.subnet, env.subnet) : r.lease.attrs.publicIp === choice.publicIp),
  );
  const expiresAt = mine?.ok ? await store.leaseExpiry?.(mine.key, signal) : undefined;
  const self = mine?.ok ? { ...mine.lease, expiresAt: expiresAt ?? 0 } : undefined;
  const vxlan = config.backend.type === 'vxlan' ? config.backend : undefined;
  const device = vxlan ? vxlanDeviceName(vxlan.vni) : undefined;
  // a dual-stack node's IPv6 routes, twill-v6 device entries and ip6tables chains, as a pass reads
  const v6 =
    config.ipv6 !== null
      ? { ipv6: true, dev6: vxlan ? vxlan6DeviceName(vxlan.vni) : undefined }
      : {};
  const observed = await observe(runner, device, signal, { chains: true, ...v6 });
  return {
    config,
    self,
    records,
    choice,
    ipMasq: env?.ipMasq ?? false,
    randomFully: iptables.randomFully,
    observed,
    daemon,
    anySubnetSize: store.anySubnetSize === true,
  };
}
