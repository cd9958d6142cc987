// Doctor checks over twill's state (pure): subnet.env against our lease in
// the store (on a dual-stack node FLANNEL_IPV6_* too), cni0 carrying an
// address from an old subnet, owned routes no lease explains (IPv6 ones too on
// a dual-stack node), and what another overlay daemon (flannel) left behind.
// An IPv6-only node gets the same over IPv6 (its lease is found by its
// PublicIPv6), and what an earlier IPv4 run left there (twill's IPv4 routes,
// cni0's IPv4 addresses, the twill.<VNI> device, the iptables chains) is
// reported as stale.
import type { Lease } from '../lease/types.ts';
import {
  containsAddr,
  firstHost,
  formatCidr,
  formatIpv4,
  parseIpv4,
  sameCidr,
  type Cidr,
} from '../net/ipv4.ts';
import {
  containsAddr6,
  firstHost6,
  formatCidr6,
  formatIpv6,
  parseIpv6,
  sameCidr6,
  type Cidr6,
} from '../net/ipv6.ts';
import { subnetFamilies, type SubnetEnv } from '../subnetenv.ts';
import { chainLeftovers } from './checks-nft.ts';
import {
  failed,
  verdicts,
  type CheckResult,
  type ChainsFact,
  type DoctorFacts,
  type LinkFact,
} from './facts.ts';
import { families, ipv6Only, isOwnLease, ownAddress, ownLeases, twillDevices } from './overlay.ts';

const STORE_FIX =
  'check that the lease store is up and reachable: --etcd-endpoints and etcd, or with --kube-subnet-mgr the kubeconfig, the API server and RBAC';
const RESTART =
  'restart twill run (it rewrites subnet.env at start), then re-create pods wired from the old file';

/** The cluster's IPv4 network: from the config, else from subnet.env; undefined with IPv4 off. */
function network(f: DoctorFacts): Cidr | undefined {
  if (f.store.ok) return f.store.value.config.ipv4?.network;
  return (f.subnetEnv.ok ? f.subnetEnv.value?.network : undefined) ?? undefined;
}

/** The cluster's IPv6 network: from the config, else from subnet.env; undefined with IPv6 off. */
function network6(f: DoctorFacts): Cidr6 | undefined {
  if (f.store.ok) return f.store.value.config.ipv6?.network;
  return (f.subnetEnv.ok ? f.subnetEnv.value?.network6 : undefined) ?? undefined;
}

/** The file's pairs as it has them: "<file>: FLANNEL_NETWORK=… FLANNEL_SUBNET=… FLANNEL_IPV6_…". */
function envHead(file: string, env: SubnetEnv): string {
  const { v4, v6 } = subnetFamilies(env);
  const parts = [
    ...(v4
      ? [
          `FLANNEL_NETWORK=${formatCidr(v4.network)} FLANNEL_SUBNET=${formatIpv4(firstHost(v4.subnet))}/${v4.subnet.prefix}`,
        ]
      : []),
    ...(v6
      ? [
          `FLANNEL_IPV6_NETWORK=${formatCidr6(v6.network)} FLANNEL_IPV6_SUBNET=${formatIpv6(firstHost6(v6.subnet))}/${v6.subnet.prefix}`,
        ]
      : []),
  ];
  return `${file}: ${parts.length > 0 ? parts.join(' ') : 'no subnet'}`;
}

export function checkSubnetEnv(f: DoctorFacts): CheckResult {
  const v = verdicts('subnet-env');
  const file = f.subnetFile;
  if (!f.subnetEnv.ok)
    return v.fail(
      `${file} is unreadable: ${f.subnetEnv.error}`,
      `delete ${file} and restart twill run (it writes it again)`,
    );
  const env = f.subnetEnv.value;
  if (env === undefined) {
    return v.fail(
      `${file} does not exist: twill run has no lease yet (or uses another --subnet-file); the CNI plugin cannot wire pods`,
      'start twill run and look for "lease acquired" in its log, or pass the --subnet-file it uses',
    );
  }
  const head = envHead(file, env);
  if (!f.store.ok)
    return v.warn(`${head}; comparison with the lease skipped: ${f.store.error}`, STORE_FIX);
  const own = ownAddress(f);
  if (!own.ok)
    return v.warn(
      `${head}; skipped: cannot tell our ${own.field} (${own.error})`,
      `pass the --iface or ${own.field === 'PublicIP' ? '--public-ip' : '--public-ipv6'} twill run uses`,
    );
  const config = f.store.value.config;
  const mine = ownLeases(f);
  const c4 = config.ipv4;
  const problem = c4
    ? ipv4Problem(c4.network, env, mine, own.ip)
    : ipv6OnlyProblem(config.ipv6?.network ?? null, env, mine, own.ip);
  if (problem !== undefined) return v.fail(`${head}${problem.text}`, problem.fix);
  if (c4) {
    const v6 = ipv6Problem(config.ipv6?.network ?? null, env, mine);
    if (v6 !== undefined) return v.fail(`${head}, but ${v6}`, RESTART);
  }
  if (mine.length > 1)
    return v.warn(
      `${head}; ${mine.length} leases name ${own.field} ${own.ip}: ${mine.map((l) => l.key).join(', ')}`,
      c4
        ? 'delete the leases that are not in subnet.env (etcdctl del <prefix>/subnets/<key>)'
        : 'give each node its own --public-ipv6 (or interface address), and delete the Nodes that are gone (kubectl delete node <name>)',
    );
  return v.ok(`${head} matches our lease ${mine[0]?.key ?? ''} (${own.field} ${own.ip})`);
}

interface Problem {
  /** appended to the head: ", but …" */
  readonly text: string;
  readonly fix: string;
}

const NO_LEASE_FIX = (flag: string): string =>
  `start twill run (it acquires a lease), or pass the ${flag}/--iface it uses`;

/** What is wrong with subnet.env's IPv4 pair against the config's Network and our leases. */
function ipv4Problem(
  net: Cidr,
  env: SubnetEnv,
  mine: readonly Lease[],
  ip: string,
): Problem | undefined {
  const { v4 } = subnetFamilies(env);
  if (!v4)
    return {
      text: `, but the network config has Network ${formatCidr(net)} and the file has no FLANNEL_NETWORK/FLANNEL_SUBNET: the CNI plugin gives pods no IPv4 address`,
      fix: RESTART,
    };
  if (!sameCidr(net, v4.network))
    return { text: `, but the network config says Network ${formatCidr(net)}`, fix: RESTART };
  if (mine.length === 0)
    return {
      text: `, but no lease in the store has PublicIP ${ip}`,
      fix: NO_LEASE_FIX('--public-ip'),
    };
  if (!mine.some((l) => l.subnet !== null && sameCidr(l.subnet, v4.subnet)))
    return {
      text: `, but our lease (PublicIP ${ip}) is ${mine.map((l) => (l.subnet ? formatCidr(l.subnet) : `${l.key} (no IPv4 subnet)`)).join(', ')}`,
      fix: RESTART,
    };
  return undefined;
}

/**
 * An IPv6-only node's subnet.env (IPv4 off): no IPv4 pair, the IPv6 pair of the config's
 * IPv6Network and of our lease (found by PublicIPv6).
 */
function ipv6OnlyProblem(
  net6: Cidr6 | null,
  env: SubnetEnv,
  mine: readonly Lease[],
  ip: string,
): Problem | undefined {
  const { v4, v6 } = subnetFamilies(env);
  if (v4)
    return {
      text: ', but the network config turns IPv4 off ("EnableIPv4": false), so the file should have no FLANNEL_NETWORK/FLANNEL_SUBNET',
      fix: RESTART,
    };
  if (!v6 || net6 === null)
    return {
      text: `, but the network config has IPv6Network ${net6 ? formatCidr6(net6) : '?'} and the file has no FLANNEL_IPV6_NETWORK/FLANNEL_IPV6_SUBNET: the CNI plugin gives pods no address`,
      fix: RESTART,
    };
  if (!sameCidr6(net6, v6.network))
    return { text: `, but the network config says IPv6Network ${formatCidr6(net6)}`, fix: RESTART };
  if (mine.length === 0)
    return {
      text: `, but no lease in the store has PublicIPv6 ${ip}`,
      fix: NO_LEASE_FIX('--public-ipv6'),
    };
  if (!mine.some((l) => l.subnet6 && sameCidr6(l.subnet6, v6.subnet)))
    return {
      text: `, but our lease (PublicIPv6 ${ip}) is ${mine.map((l) => (l.subnet6 ? formatCidr6(l.subnet6) : `${l.key} (no IPv6 subnet)`)).join(', ')}`,
      fix: RESTART,
    };
  return undefined;
}

/**
 * What is wrong with subnet.env's IPv6 pair against the config's IPv6Network (null: IPv6 off) and
 * our lease, whose IPv4 subnet matched; undefined when nothing is.
 */
function ipv6Problem(
  network6: Cidr6 | null,
  env: SubnetEnv,
  mine: readonly Lease[],
): string | undefined {
  if (network6 === null)
    return env.network6
      ? 'the network config does not enable IPv6 (EnableIPv6), so the file should have no FLANNEL_IPV6_*'
      : undefined;
  if (!env.network6 || !env.subnet6)
    return `the network config enables IPv6 (IPv6Network ${formatCidr6(network6)}) and the file has no FLANNEL_IPV6_NETWORK/FLANNEL_IPV6_SUBNET: the CNI plugin gives pods no IPv6 address`;
  if (!sameCidr6(env.network6, network6))
    return `the network config says IPv6Network ${formatCidr6(network6)}`;
  const subnet = env.subnet;
  const lease = mine.find(
    (l) => l.subnet !== null && subnet !== null && sameCidr(l.subnet, subnet),
  );
  const subnet6 = env.subnet6;
  if (!lease?.subnet6)
    return `our lease ${lease?.key ?? ''} has no IPv6 subnet (a lease written before IPv6 was enabled?)`;
  if (!sameCidr6(lease.subnet6, subnet6))
    return `our lease's IPv6 subnet is ${formatCidr6(lease.subnet6)}, not ${formatCidr6(subnet6)}`;
  return undefined;
}

/**
 * cni0's IPv4 addresses, split into those in the subnet, in the network but not the subnet (old),
 * and outside the network.
 */
function bridgeAddresses(
  f: DoctorFacts,
  subnet: Cidr | undefined,
): { old: string[]; outside: string[] } {
  const bridge = f.links.ok ? f.links.value.find((l) => l.name === f.bridge) : undefined;
  const net = network(f);
  const out = { old: [] as string[], outside: [] as string[] };
  for (const a of bridge?.addresses ?? []) {
    const addr = parseIpv4(a.split('/')[0] ?? '');
    if (addr === undefined) continue;
    if (net && !containsAddr(net, addr)) out.outside.push(a);
    else if (subnet && !containsAddr(subnet, addr)) out.old.push(a);
  }
  return out;
}

/** The same over cni0's global IPv6 addresses and the IPv6 network (an IPv6-only node's). */
function bridgeAddresses6(
  f: DoctorFacts,
  subnet6: Cidr6 | undefined,
): { old: string[]; outside: string[] } {
  const bridge = f.links.ok ? f.links.value.find((l) => l.name === f.bridge) : undefined;
  const net6 = network6(f);
  const out = { old: [] as string[], outside: [] as string[] };
  for (const a of bridge?.addresses6 ?? []) {
    const addr = parseIpv6(a.split('/')[0] ?? '');
    if (addr === undefined) continue;
    if (net6 && !containsAddr6(net6, addr)) out.outside.push(a);
    else if (subnet6 && !containsAddr6(subnet6, addr)) out.old.push(a);
  }
  return out;
}

export function checkBridgeSubnet(f: DoctorFacts): CheckResult {
  const v = verdicts('cni0-subnet');
  if (!f.links.ok) return v.warn(`skipped: could not list links (${f.links.error})`);
  const bridge = f.links.value.find((l) => l.name === f.bridge);
  if (!bridge) return v.ok(`no ${f.bridge} (no pod wired on this node yet)`);
  const env = f.subnetEnv.ok ? f.subnetEnv.value : undefined;
  if (ipv6Only(f)) return bridgeSubnet6(f, bridge, env);
  const subnet = (env ? env.subnet : ownLeases(f)[0]?.subnet) ?? undefined;
  if (!subnet) return v.warn('skipped: no subnet.env and no lease to compare with');
  const { old } = bridgeAddresses(f, subnet);
  if (old.length === 0) return v.ok(`${f.bridge} carries no address outside ${formatCidr(subnet)}`);
  return v.fail(
    `${f.bridge} carries ${old.join(', ')} from an old subnet (the node's subnet is now ${formatCidr(subnet)}): the bridge keeps routing the old subnet to pods that are gone`,
    `${old.map((a) => `ip addr del ${a} dev ${f.bridge}`).join('; ')}; then re-create the pods still using old addresses`,
  );
}

/**
 * IPv6 only: cni0's IPv6 addresses against our IPv6 subnet, and any IPv4 address on it, which an
 * earlier IPv4 run left (the CNI plugin gives the bridge none with IPv4 off).
 */
function bridgeSubnet6(f: DoctorFacts, bridge: LinkFact, env: SubnetEnv | undefined): CheckResult {
  const v = verdicts('cni0-subnet');
  const subnet6 = (env ? env.subnet6 : ownLeases(f).find((l) => l.subnet6)?.subnet6) ?? undefined;
  const stale4 = [...bridge.addresses];
  if (!subnet6 && stale4.length === 0)
    return v.warn('skipped: no subnet.env and no lease to compare with');
  const { old } = bridgeAddresses6(f, subnet6);
  const found = [
    ...(old.length > 0 && subnet6
      ? [`${old.join(', ')} from an old subnet (the node's subnet is now ${formatCidr6(subnet6)})`]
      : []),
    ...(stale4.length > 0
      ? [`${stale4.join(', ')} from an earlier IPv4 run (IPv4 is off now)`]
      : []),
  ];
  if (found.length === 0)
    return v.ok(`${f.bridge} carries no address outside ${subnet6 ? formatCidr6(subnet6) : '?'}`);
  return v.fail(
    `${f.bridge} carries ${found.join('; ')}: the bridge keeps routing those addresses to pods that are gone`,
    `${[...old, ...stale4].map((a) => `ip addr del ${a} dev ${f.bridge}`).join('; ')}; then re-create the pods still using old addresses`,
  );
}

/**
 * The routes a peer's lease explains, for the families the node runs: its IPv4 subnet unless IPv4
 * is off (then each of twill's IPv4 routes is a leftover), its IPv6 one when IPv6 routes were read.
 */
function explainedBy(lease: Lease, o: { ipv4: boolean; ipv6: boolean }): string[] {
  return [
    ...(o.ipv4 && lease.subnet ? [formatCidr(lease.subnet)] : []),
    ...(o.ipv6 && lease.subnet6 ? [formatCidr6(lease.subnet6)] : []),
  ];
}

export function checkStaleRoutes(f: DoctorFacts): CheckResult {
  const v = verdicts('stale-routes');
  if (!f.ownedRoutes.ok) return v.warn(`could not list routes: ${f.ownedRoutes.error}`);
  if (!f.store.ok) return v.warn(`skipped: ${f.store.error}`, STORE_FIX);
  const ipv4 = families(f).ipv4;
  const own = ownAddress(f);
  // a dual-stack or IPv6-only node's IPv6 routes too, each explained by a peer lease's IPv6 subnet
  const routes6 = f.ownedRoutes6;
  const explained = new Set(
    f.store.value.leases.flatMap((r) =>
      r.ok && !isOwnLease(r.lease, own)
        ? explainedBy(r.lease, { ipv4, ipv6: routes6 !== undefined })
        : [],
    ),
  );
  const routes = routes6?.ok ? [...f.ownedRoutes.value, ...routes6.value] : f.ownedRoutes.value;
  const stale = routes.filter((r) => !explained.has(r.dst));
  const n = routes.length;
  const fix6 = "run twill doctor as root, in the node's network namespace, on a kernel with IPv6";
  if (stale.length === 0 && routes6 && !routes6.ok)
    return v.warn(
      ipv4
        ? `${n} IPv4 route${n === 1 ? '' : 's'} with protocol 151, each explained by a peer's lease; could not list the IPv6 ones: ${routes6.error}`
        : `no IPv4 route with protocol 151 (IPv4 is off); could not list the IPv6 ones: ${routes6.error}`,
      fix6,
    );
  if (stale.length === 0)
    return v.ok(
      `${n} route${n === 1 ? '' : 's'} with protocol 151, each explained by a peer's lease`,
    );
  const shown = stale.slice(0, 5).map((r) => `${r.dst} via ${r.via} dev ${r.dev}`);
  // IPv6 only: twill's IPv4 routes are what an earlier IPv4 run left
  const left4 = !ipv4 && stale.some((r) => !r.dst.includes(':'));
  return v.fail(
    `${stale.length} route${stale.length === 1 ? '' : 's'} with twill's protocol 151 that no lease explains: ${shown.join(', ')}${stale.length > 5 ? ', …' : ''}${left4 ? ' (IPv4 is off: its IPv4 routes are leftovers of an earlier IPv4 run)' : ''}`,
    `start twill run (its first pass removes them), or by hand: ${stale
      .slice(0, 3)
      .map((r) => `ip route del ${r.dst} proto 151`)
      .join('; ')}`,
  );
}

export function checkForeignOverlay(f: DoctorFacts): CheckResult {
  const v = verdicts('foreign-overlay');
  const v6only = ipv6Only(f);
  const found: string[] = [];
  const fixes: string[] = [];
  // IPv6 only: flannel's IPv6 device (flannel-v6.<VNI>) holds the VNI and port twill-v6.<VNI> needs
  const foreign = (name: string): boolean =>
    name.startsWith('flannel.') || (v6only && name.startsWith('flannel-v6.'));
  const devs = f.links.ok ? f.links.value.filter((l) => foreign(l.name)) : [];
  for (const d of devs) {
    found.push(
      `device ${d.name}${d.kind === 'vxlan' ? ` (vxlan VNI ${d.vni ?? '?'} port ${d.port ?? '?'}: while it holds a VNI and port, twill cannot create its device with the same ones)` : ''}`,
    );
    fixes.push(`ip link del ${d.name}`);
  }
  for (const c of f.foreignChains.ok ? f.foreignChains.value : []) {
    const tool = c.ipv6 ? 'ip6tables' : 'iptables';
    found.push(
      `chain ${c.chain} in ${c.ipv6 ? 'ip6tables ' : ''}${c.table} (${c.rules} rules, ${c.jumps} jumps to it)`,
    );
    fixes.push(
      `delete the jumps to ${c.chain} (${tool} -t ${c.table} -S | grep ${c.chain}), then ${tool} -t ${c.table} -F ${c.chain} && ${tool} -t ${c.table} -X ${c.chain}`,
    );
  }
  const { outside } = bridgeAddresses(f, undefined);
  const net = network(f);
  for (const a of outside) {
    found.push(`${f.bridge} address ${a} outside our network ${net ? formatCidr(net) : '?'}`);
    fixes.push(`ip addr del ${a} dev ${f.bridge}`);
  }
  if (v6only) {
    const net6 = network6(f);
    for (const a of bridgeAddresses6(f, undefined).outside) {
      found.push(
        `${f.bridge} address ${a} outside our IPv6 network ${net6 ? formatCidr6(net6) : '?'}`,
      );
      fixes.push(`ip addr del ${a} dev ${f.bridge}`);
    }
  }
  const unread = [f.links, f.foreignChains].flatMap((r) => (r.ok ? [] : [r.error]));
  if (found.length > 0) {
    return v.fail(
      `another overlay daemon's leftovers: ${found.join('; ')}`,
      `stop the other daemon (e.g. flannel's DaemonSet) on this node, then ${fixes.join('; ')}`,
    );
  }
  if (unread.length > 0) return v.warn(`could not look everywhere: ${unread.join('; ')}`);
  if (v6only)
    return v.ok(
      `no flannel.* or flannel-v6.* device, no FLANNEL-POSTRTG/FLANNEL-FWD chain in iptables or ip6tables, no ${f.bridge} address outside the network`,
    );
  return v.ok(
    `no flannel.* device, no FLANNEL-POSTRTG/FLANNEL-FWD chain, no ${f.bridge} address outside the network`,
  );
}

/**
 * IPv6 only: what an earlier IPv4 or dual-stack run left of twill's IPv4 side, the twill.<VNI>
 * device and the chains in iptables (its IPv4 routes are stale-routes', cni0's IPv4 addresses
 * cni0-subnet's). The daemon's first pass removes them; left, they carry no IPv6 traffic, so this
 * warns.
 */
export function checkIpv4Leftovers(f: DoctorFacts): CheckResult {
  const v = verdicts('ipv4-leftovers');
  const found: string[] = [];
  const fixes: string[] = [];
  for (const d of f.links.ok ? twillDevices(f.links.value) : []) {
    found.push(`device ${d.name} (vxlan VNI ${d.vni ?? '?'})`);
    fixes.push(`ip link del ${d.name}`);
  }
  const chains = f.ip4Chains ?? failed<ChainsFact>('not read');
  if (chains.ok) {
    const l = chainLeftovers('iptables', chains.value, { named: false });
    found.push(...l.found);
    fixes.push(...l.fixes);
  }
  const unread = [f.links, chains].flatMap((r) => (r.ok ? [] : [r.error]));
  if (found.length > 0)
    return v.warn(
      `IPv4 is off (IPv6 only), but an earlier IPv4 run left ${found.join('; ')}`,
      `start twill run (its first pass removes them), or by hand: ${fixes.join('; ')}`,
    );
  if (unread.length > 0)
    return v.warn(
      `could not look everywhere: ${unread.join('; ')}`,
      'run twill doctor as root with iptables installed',
    );
  return v.ok('IPv4 is off (IPv6 only): no twill.* device, no TWILL-POSTRTG/TWILL-FWD in iptables');
}
