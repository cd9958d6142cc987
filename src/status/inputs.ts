// `twill status`, the reads: the network config and every lease from the
// store (one listing), our subnet.env, the interface, the kernel's view of
// twill's objects, and whether a `twill run` is running in this network
// namespace (and what its /readyz says, when its health port is known). An
// IPv6-only node's interface is found by its IPv6 address, its lease by its
// IPv6 subnet or PublicIPv6, and what an earlier IPv4 run left in the kernel
// is read too (as the daemon's first pass reads it, to remove it). twill's
// nftables tables are read in either mode (in iptables mode, tolerantly: an
// nftables-mode run's leftovers); in nftables mode twill's iptables chains are
// read as an iptables-mode run's leftovers instead of as the masquerade.
import { readdir, readFile, readlink } from 'node:fs/promises';
import { vxlan6DeviceName, vxlanDeviceName } from '../dataplane/desired.ts';
import { NFT_TABLES, nftTableLabel, type NftTableSeen } from '../dataplane/nft.ts';
import { observeNftTable, readIptablesLeftovers } from '../dataplane/nft-observe.ts';
import { detectIptables, observe } from '../dataplane/observe.ts';
import type { Runner } from '../exec/runner.ts';
import { listLeases } from '../lease/snapshot.ts';
import type { Lease, LeaseStore } from '../lease/types.ts';
import { discoverInterface, type IfaceChoice, type IfaceRequest } from '../net/iface.ts';
import { sameCidr } from '../net/ipv4.ts';
import { sameCidr6 } from '../net/ipv6.ts';
import { readSubnetEnv, subnetFamilies, type SubnetEnv } from '../subnetenv.ts';
import type { StatusInput } from './report.ts';

export interface GatherOptions {
  readonly store: LeaseStore;
  readonly runner: Runner;
  readonly iface: IfaceRequest;
  readonly subnetFile: string;
  /** --cni-bridge (default cni0) */
  readonly cniBridge?: string;
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

/**
 * Whether a lease is this node's: the one subnet.env names (by its IPv4 subnet, or its IPv6 one on
 * an IPv6-only node), else the one with our PublicIP (PublicIPv6 with IPv4 off, where no lease
 * has a PublicIP).
 */
export function isOwnLease(
  lease: Lease,
  o: { ipv4: boolean; env: SubnetEnv | undefined; choice: IfaceChoice },
): boolean {
  if (o.env) {
    const { v4, v6 } = subnetFamilies(o.env);
    if (v4) return lease.subnet !== null && sameCidr(lease.subnet, v4.subnet);
    return !!v6 && !!lease.subnet6 && sameCidr6(lease.subnet6, v6.subnet);
  }
  const ip = o.ipv4 ? o.choice.publicIp : o.choice.publicIp6;
  if (ip === null || ip === undefined) return false;
  return (o.ipv4 ? lease.attrs.publicIp : lease.attrs.publicIpv6) === ip;
}

/**
 * twill's nftables tables, by nftTableLabel (null: absent). `wanted` (nftables mode, the families
 * that are on) are read as a pass reads them, a failure failing the status; the others
 * tolerantly, one that cannot be read (no nft command) left out.
 */
async function readNftTables(
  runner: Runner,
  wanted: { ipv4: boolean; ipv6: boolean },
  signal: AbortSignal,
): Promise<Map<string, NftTableSeen | null>> {
  const seen = await Promise.all(
    NFT_TABLES.map((t) => {
      const read = observeNftTable(runner, t, signal);
      if (t.family === 'ip' ? wanted.ipv4 : wanted.ipv6) return read;
      return read.catch((err: unknown) => {
        if (signal.aborted) throw err;
        return undefined;
      });
    }),
  );
  return new Map(
    NFT_TABLES.flatMap((t, i) => {
      const table = seen[i];
      return table === undefined ? [] : [[nftTableLabel(t), table] as const];
    }),
  );
}

export async function gatherStatus(o: GatherOptions): Promise<StatusInput> {
  const { store, runner, signal } = o;
  const config = await store.getNetworkConfig(signal);
  const ipv4 = config.ipv4 !== null;
  const ipv6 = config.ipv6 !== null;
  const nftables = config.nftables;
  const [env, records, choice, iptables, daemon, nftTables, leftovers] = await Promise.all([
    readSubnetEnv(o.subnetFile).catch(() => undefined),
    listLeases(store, signal),
    discoverInterface(runner, { ...o.iface, ipv6, ...(ipv4 ? {} : { ipv4: false }) }, signal),
    // nftables mode needs no iptables (the node may have none)
    nftables ? undefined : detectIptables(runner, signal, { ipv4 }),
    daemonState(o.healthzPort),
    readNftTables(runner, nftables ? { ipv4, ipv6 } : { ipv4: false, ipv6: false }, signal),
    // nftables mode: an iptables-mode run's chains (a chain that cannot be read is unknown)
    nftables ? readIptablesLeftovers(runner, signal) : undefined,
  ]);
  const mine = records.find((r) => r.ok && isOwnLease(r.lease, { ipv4, env, choice }));
  const expiresAt = mine?.ok ? await store.leaseExpiry?.(mine.key, signal) : undefined;
  const self = mine?.ok ? { ...mine.lease, expiresAt: expiresAt ?? 0 } : undefined;
  const vxlan = config.backend.type === 'vxlan' ? config.backend : undefined;
  const device = vxlan ? vxlanDeviceName(vxlan.vni) : undefined;
  // a dual-stack or IPv6-only node's IPv6 routes, twill-v6 device entries and ip6tables chains, as
  // a pass reads them; with IPv4 off, what an IPv4 run left (as the daemon's first pass reads it)
  const v6 = ipv6 ? { ipv6: true, dev6: vxlan ? vxlan6DeviceName(vxlan.vni) : undefined } : {};
  const v4 = ipv4 ? {} : { ipv4: false, leftovers4: true };
  // nftables mode: the masquerade is in twill's tables, the chains are read as leftovers
  const observed = await observe(runner, ipv4 ? device : undefined, signal, {
    chains: !nftables,
    ...v6,
    ...v4,
  });
  return {
    config,
    self,
    records,
    choice,
    ipMasq: env?.ipMasq ?? false,
    // nftables mode: fully-random, as the daemon writes it there (every nft twill runs has it)
    randomFully: iptables?.randomFully ?? true,
    ...(o.cniBridge === undefined ? {} : { cniBridge: o.cniBridge }),
    observed,
    nftTables,
    ...(leftovers ? { leftovers } : {}),
    daemon,
    anySubnetSize: store.anySubnetSize === true,
  };
}
