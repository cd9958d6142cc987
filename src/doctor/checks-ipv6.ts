// Doctor checks a dual-stack or IPv6-only node adds (pure): IPv6 forwarding,
// the IPv6 vxlan device twill-v6.<VNI> over the underlay's IPv6 address, and
// twill's chains in ip6tables (in nftables mode there are none to check: the
// nft-tables check looks at table ip6 twill-ipv6, and masq-leftovers at
// chains left in ip6tables). An IPv4-only node does not run them
// (checks.ts), so its report is what it always was; the IPv6 side of the MTU
// and subnet.env checks lives in those checks.
import { chainSpecs6, diffChain, type ChainSpec } from '../dataplane/masq.ts';
import type { ObservedChain } from '../dataplane/model.ts';
import type { Cidr6 } from '../net/ipv6.ts';
import { verdicts, type CheckResult, type DoctorFacts } from './facts.ts';
import { ipv6Config, ipv6Only, masqMode, ownLeases, overlayView } from './overlay.ts';

const READ_FIX =
  "run twill doctor as root, in the node's network namespace, with the --proc-sys-net twill run has";

export function checkIpv6Forward(f: DoctorFacts): CheckResult {
  const v = verdicts('ipv6-forward');
  const r = f.ipv6Forward;
  if (r === undefined) return v.warn('not read', READ_FIX);
  if (!r.ok) return v.warn(`could not read net.ipv6.conf.all.forwarding: ${r.error}`, READ_FIX);
  if (r.value === undefined)
    return v.fail(
      'the node has no IPv6 sysctls (IPv6 is disabled: ipv6.disable=1 on the kernel command line, or the module is not loaded), but the network config enables IPv6',
      ipv6Only(f)
        ? 'enable IPv6 on the node (remove ipv6.disable=1 and reboot): the network config is IPv6 only'
        : 'enable IPv6 on the node (remove ipv6.disable=1 and reboot), or turn EnableIPv6 off in the network config',
    );
  if (r.value === '1') return v.ok('net.ipv6.conf.all.forwarding is 1');
  return v.fail(
    `net.ipv6.conf.all.forwarding is ${r.value}: the node does not forward IPv6 pod traffic`,
    'sysctl -w net.ipv6.conf.all.forwarding=1 and persist it in /etc/sysctl.d/ (with forwarding on, an interface configured by router advertisements needs accept_ra=2 to keep its default route)',
  );
}

export function checkVxlan6Device(f: DoctorFacts): CheckResult {
  const v = verdicts('vxlan6-device');
  const view = overlayView(f);
  if (view.backend === 'host-gw')
    return v.ok('host-gw backend: IPv6 routes go via each peer’s PublicIPv6, no device');
  const name = view.device6;
  if (name === undefined) return v.warn('skipped: the backend is unknown');
  if (!f.links.ok) return v.warn(`skipped: could not list links (${f.links.error})`);
  const dev = f.links.value.find((l) => l.name === name);
  const restart = `ip link del ${name}, then restart twill run (it creates the device again)`;
  if (!dev)
    return v.fail(
      `${name} does not exist: IPv6 pod traffic to other nodes has no tunnel`,
      'start twill run (it creates the device), and look for errors about it in its log',
    );
  if (dev.kind !== 'vxlan')
    return v.fail(`${name} is a ${dev.kind ?? 'plain'} device, not vxlan`, restart);
  const wrong: string[] = [];
  const backend = f.store.ok ? f.store.value.config.backend : undefined;
  if (backend?.type === 'vxlan' && dev.port !== backend.port)
    wrong.push(`UDP port ${dev.port ?? '?'}, want ${backend.port}`);
  const u6 = f.underlay6;
  if (u6?.ok && dev.local !== u6.value.ip)
    wrong.push(`local ${dev.local ?? 'none'}, the underlay's IPv6 address is ${u6.value.ip}`);
  if (wrong.length > 0)
    return v.fail(`${name}: ${wrong.join('; ')} (peers send to the wrong place)`, restart);
  if (u6 && !u6.ok)
    return v.warn(
      `${name} exists (local ${dev.local ?? 'none'}); cannot tell the underlay's IPv6 address: ${u6.error}`,
      'give the underlay interface a global IPv6 address, or pass the --iface twill run uses',
    );
  return v.ok(
    `${name}: vxlan VNI ${dev.vni ?? '?'} port ${dev.port ?? '?'} local ${dev.local ?? '?'}`,
  );
}

/**
 * Our lease's IPv6 subnet: the store's valid record with our PublicIP (PublicIPv6 on an IPv6-only
 * node) and an IPv6 subnet.
 */
function ownSubnet6(f: DoctorFacts): Cidr6 | undefined {
  return ownLeases(f).find((l) => l.subnet6)?.subnet6 ?? undefined;
}

/** The rules of one chain less `--random-fully` (which depends on the iptables version). */
const plain = (rules: readonly string[] | null): string[] | null =>
  rules === null ? null : rules.map((r) => r.replace(' --random-fully', ''));

/**
 * What is wrong with one observed ip6tables chain (nothing when it is as twill writes it): the ops
 * the daemon's diff (diffChain) would apply to it, in words.
 */
function chainProblems(want: ChainSpec, seen: ObservedChain): string[] {
  const { table, parent, chain } = want;
  const ops = diffChain(
    { ...want, rules: plain(want.rules) },
    { jumps: seen.jumps, rules: plain(seen.rules) },
  );
  const out: string[] = [];
  for (const op of ops) {
    if (op.kind !== 'chain') continue;
    if (op.action === 'add') return [`no chain ${chain} in the ${table} table`];
    if (op.action === 'delete') out.push(`${chain} exists but --ip-masq is off`);
    else if (op.missing.length > 0) out.push(`${chain} lacks \`${op.missing[0]}\``);
    else out.push(`${chain}'s rules are not in twill's order (or duplicated)`);
  }
  if (ops.some((op) => op.kind === 'jump')) {
    const n = seen.jumps.length;
    out.push(
      want.rules === null || n !== 1
        ? `${n} jump${n === 1 ? '' : 's'} from ${parent} to ${chain}, want ${want.rules === null ? 'none' : 'one'}`
        : `the jump from ${parent} to ${chain} is \`${seen.jumps[0] ?? ''}\`, not twill's \`${want.jump}\``,
    );
  }
  return out;
}

export function checkIp6tablesChains(f: DoctorFacts): CheckResult {
  const v = verdicts('ip6tables-chains');
  if (masqMode(f) === 'nftables')
    return v.ok(
      'nftables mode: twill keeps no ip6tables chain (nft-tables checks table ip6 twill-ipv6)',
    );
  const c = f.ip6Chains;
  if (c === undefined) return v.warn('not read');
  if (!c.ok)
    return v.warn(`could not list ip6tables chains: ${c.error}`, 'install ip6tables (iptables)');
  const cfg = ipv6Config(f);
  const env = f.subnetEnv.ok ? f.subnetEnv.value : undefined;
  // the daemon writes the chains from its lease: the store's word first, subnet.env's second
  const subnet6 = ownSubnet6(f) ?? env?.subnet6;
  if (!cfg || !env || !subnet6)
    return v.warn(
      'skipped: needs the IPv6 network (from the store), our IPv6 subnet and --ip-masq (from subnet.env)',
      'check that the lease store is reachable and twill run has written subnet.env',
    );
  const specs = chainSpecs6({
    ipMasq: env.ipMasq,
    network: cfg.network,
    subnet: subnet6,
    randomFully: false,
  });
  const problems = [
    ...chainProblems(specs.postrouting, c.value.postrouting),
    ...chainProblems(specs.forward, c.value.forward),
  ];
  if (problems.length > 0)
    return v.fail(
      `ip6tables: ${problems.join('; ')}: IPv6 pod traffic is ${env.ipMasq ? 'not masqueraded or ' : ''}not forwarded as twill means`,
      'start twill run (it rewrites its chains within a second), and look for ip6tables-restore errors in its log',
    );
  return v.ok(
    `ip6tables: ${env.ipMasq ? 'TWILL-POSTRTG and ' : ''}TWILL-FWD as twill writes them, one jump each`,
  );
}
