// Doctor checks over twill's state (pure): subnet.env against our lease in
// the store (on a dual-stack node FLANNEL_IPV6_* too), cni0 carrying an
// address from an old subnet, owned routes no lease explains (IPv6 ones too on
// a dual-stack node), and what another overlay daemon (flannel) left behind.
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
import { firstHost6, formatCidr6, formatIpv6, sameCidr6, type Cidr6 } from '../net/ipv6.ts';
import type { SubnetEnv } from '../subnetenv.ts';
import { verdicts, type CheckResult, type DoctorFacts } from './facts.ts';

/** Our leases: the store's valid records whose PublicIP is ours. */
function ownLeases(f: DoctorFacts): Lease[] {
  if (!f.store.ok || !f.underlay.ok) return [];
  const ip = f.underlay.value.publicIp;
  return f.store.value.leases.flatMap((r) =>
    r.ok && r.lease.attrs.publicIp === ip ? [r.lease] : [],
  );
}

/** The cluster network: from the config, else from subnet.env. */
function network(f: DoctorFacts): Cidr | undefined {
  if (f.store.ok) return f.store.value.config.network;
  return f.subnetEnv.ok ? f.subnetEnv.value?.network : undefined;
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
  const head = `${file}: FLANNEL_NETWORK=${formatCidr(env.network)} FLANNEL_SUBNET=${formatIpv4(firstHost(env.subnet))}/${env.subnet.prefix}${ipv6Head(env)}`;
  if (!f.store.ok)
    return v.warn(
      `${head}; comparison with the lease skipped: ${f.store.error}`,
      'check that the lease store is up and reachable: --etcd-endpoints and etcd, or with --kube-subnet-mgr the kubeconfig, the API server and RBAC',
    );
  if (!f.underlay.ok)
    return v.warn(
      `${head}; skipped: cannot tell our PublicIP (${f.underlay.error})`,
      'pass the --iface or --public-ip twill run uses',
    );
  const net = f.store.value.config.network;
  const restart =
    'restart twill run (it rewrites subnet.env at start), then re-create pods wired from the old file';
  if (!sameCidr(net, env.network))
    return v.fail(`${head}, but the network config says Network ${formatCidr(net)}`, restart);
  const ip = f.underlay.value.publicIp;
  const mine = ownLeases(f);
  if (mine.length === 0)
    return v.fail(
      `${head}, but no lease in the store has PublicIP ${ip}`,
      'start twill run (it acquires a lease), or pass the --public-ip/--iface it uses',
    );
  if (!mine.some((l) => sameCidr(l.subnet, env.subnet))) {
    return v.fail(
      `${head}, but our lease (PublicIP ${ip}) is ${mine.map((l) => formatCidr(l.subnet)).join(', ')}`,
      restart,
    );
  }
  const v6 = ipv6Problem(f.store.value.config.ipv6?.network ?? null, env, mine);
  if (v6 !== undefined) return v.fail(`${head}, but ${v6}`, restart);
  if (mine.length > 1)
    return v.warn(
      `${head}; ${mine.length} leases name PublicIP ${ip}: ${mine.map((l) => l.key).join(', ')}`,
      'delete the leases that are not in subnet.env (etcdctl del <prefix>/subnets/<key>)',
    );
  return v.ok(`${head} matches our lease ${mine[0]?.key ?? ''} (PublicIP ${ip})`);
}

/** FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET as the file has them (nothing when absent). */
function ipv6Head(env: SubnetEnv): string {
  if (!env.network6 || !env.subnet6) return '';
  const host = `${formatIpv6(firstHost6(env.subnet6))}/${env.subnet6.prefix}`;
  return ` FLANNEL_IPV6_NETWORK=${formatCidr6(env.network6)} FLANNEL_IPV6_SUBNET=${host}`;
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
  const lease = mine.find((l) => sameCidr(l.subnet, env.subnet));
  const subnet6 = env.subnet6;
  if (!lease?.subnet6)
    return `our lease ${lease?.key ?? ''} has no IPv6 subnet (a lease written before IPv6 was enabled?)`;
  if (!sameCidr6(lease.subnet6, subnet6))
    return `our lease's IPv6 subnet is ${formatCidr6(lease.subnet6)}, not ${formatCidr6(subnet6)}`;
  return undefined;
}

/**
 * cni0's addresses, split into those in the subnet, in the network but not the subnet (old), and
 * outside the network.
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

export function checkBridgeSubnet(f: DoctorFacts): CheckResult {
  const v = verdicts('cni0-subnet');
  if (!f.links.ok) return v.warn(`skipped: could not list links (${f.links.error})`);
  if (!f.links.value.some((l) => l.name === f.bridge))
    return v.ok(`no ${f.bridge} (no pod wired on this node yet)`);
  const subnet =
    f.subnetEnv.ok && f.subnetEnv.value ? f.subnetEnv.value.subnet : ownLeases(f)[0]?.subnet;
  if (!subnet) return v.warn('skipped: no subnet.env and no lease to compare with');
  const { old } = bridgeAddresses(f, subnet);
  if (old.length === 0) return v.ok(`${f.bridge} carries no address outside ${formatCidr(subnet)}`);
  return v.fail(
    `${f.bridge} carries ${old.join(', ')} from an old subnet (the node's subnet is now ${formatCidr(subnet)}): the bridge keeps routing the old subnet to pods that are gone`,
    `${old.map((a) => `ip addr del ${a} dev ${f.bridge}`).join('; ')}; then re-create the pods still using old addresses`,
  );
}

export function checkStaleRoutes(f: DoctorFacts): CheckResult {
  const v = verdicts('stale-routes');
  if (!f.ownedRoutes.ok) return v.warn(`could not list routes: ${f.ownedRoutes.error}`);
  if (!f.store.ok)
    return v.warn(
      `skipped: ${f.store.error}`,
      'check that the lease store is up and reachable: --etcd-endpoints and etcd, or with --kube-subnet-mgr the kubeconfig, the API server and RBAC',
    );
  const ip = f.underlay.ok ? f.underlay.value.publicIp : undefined;
  // a dual-stack node's IPv6 routes too, each explained by a peer lease's IPv6 subnet
  const routes6 = f.ownedRoutes6;
  const explained = new Set(
    f.store.value.leases.flatMap((r) =>
      r.ok && r.lease.attrs.publicIp !== ip
        ? [
            formatCidr(r.lease.subnet),
            ...(routes6 && r.lease.subnet6 ? [formatCidr6(r.lease.subnet6)] : []),
          ]
        : [],
    ),
  );
  const routes = routes6?.ok ? [...f.ownedRoutes.value, ...routes6.value] : f.ownedRoutes.value;
  const stale = routes.filter((r) => !explained.has(r.dst));
  const n = routes.length;
  if (stale.length === 0 && routes6 && !routes6.ok)
    return v.warn(
      `${n} IPv4 route${n === 1 ? '' : 's'} with protocol 151, each explained by a peer's lease; could not list the IPv6 ones: ${routes6.error}`,
      "run twill doctor as root, in the node's network namespace, on a kernel with IPv6",
    );
  if (stale.length === 0)
    return v.ok(
      `${n} route${n === 1 ? '' : 's'} with protocol 151, each explained by a peer's lease`,
    );
  const shown = stale.slice(0, 5).map((r) => `${r.dst} via ${r.via} dev ${r.dev}`);
  return v.fail(
    `${stale.length} route${stale.length === 1 ? '' : 's'} with twill's protocol 151 that no lease explains: ${shown.join(', ')}${stale.length > 5 ? ', …' : ''}`,
    `start twill run (its first pass removes them), or by hand: ${stale
      .slice(0, 3)
      .map((r) => `ip route del ${r.dst} proto 151`)
      .join('; ')}`,
  );
}

export function checkForeignOverlay(f: DoctorFacts): CheckResult {
  const v = verdicts('foreign-overlay');
  const found: string[] = [];
  const fixes: string[] = [];
  const devs = f.links.ok ? f.links.value.filter((l) => l.name.startsWith('flannel.')) : [];
  for (const d of devs) {
    found.push(
      `device ${d.name}${d.kind === 'vxlan' ? ` (vxlan VNI ${d.vni ?? '?'} port ${d.port ?? '?'}: while it holds a VNI and port, twill cannot create its device with the same ones)` : ''}`,
    );
    fixes.push(`ip link del ${d.name}`);
  }
  for (const c of f.foreignChains.ok ? f.foreignChains.value : []) {
    found.push(`chain ${c.chain} in ${c.table} (${c.rules} rules, ${c.jumps} jumps to it)`);
    fixes.push(
      `delete the jumps to ${c.chain} (iptables -t ${c.table} -S | grep ${c.chain}), then iptables -t ${c.table} -F ${c.chain} && iptables -t ${c.table} -X ${c.chain}`,
    );
  }
  const { outside } = bridgeAddresses(f, undefined);
  const net = network(f);
  for (const a of outside) {
    found.push(`${f.bridge} address ${a} outside our network ${net ? formatCidr(net) : '?'}`);
    fixes.push(`ip addr del ${a} dev ${f.bridge}`);
  }
  const unread = [f.links, f.foreignChains].flatMap((r) => (r.ok ? [] : [r.error]));
  if (found.length > 0) {
    return v.fail(
      `another overlay daemon's leftovers: ${found.join('; ')}`,
      `stop the other daemon (e.g. flannel's DaemonSet) on this node, then ${fixes.join('; ')}`,
    );
  }
  if (unread.length > 0) return v.warn(`could not look everywhere: ${unread.join('; ')}`);
  return v.ok(
    `no flannel.* device, no FLANNEL-POSTRTG/FLANNEL-FWD chain, no ${f.bridge} address outside the network`,
  );
}
