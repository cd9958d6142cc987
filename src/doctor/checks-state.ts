// Doctor checks over twill's state (pure): subnet.env against our lease in
// the store, cni0 carrying an address from an old subnet, owned routes no
// lease explains, and what another overlay daemon (flannel) left behind.
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
import type { CheckResult, DoctorFacts } from './facts.ts';

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
  const check = 'subnet-env';
  const file = f.subnetFile;
  if (!f.subnetEnv.ok)
    return {
      check,
      verdict: 'fail',
      detail: `${file} is unreadable: ${f.subnetEnv.error}`,
      fix: `delete ${file} and restart twill run (it writes it again)`,
    };
  const env = f.subnetEnv.value;
  if (env === undefined) {
    return {
      check,
      verdict: 'fail',
      detail: `${file} does not exist: twill run has no lease yet (or uses another --subnet-file); the CNI plugin cannot wire pods`,
      fix: 'start twill run and look for "lease acquired" in its log, or pass the --subnet-file it uses',
    };
  }
  const head = `${file}: FLANNEL_NETWORK=${formatCidr(env.network)} FLANNEL_SUBNET=${formatIpv4(firstHost(env.subnet))}/${env.subnet.prefix}`;
  if (!f.store.ok)
    return {
      check,
      verdict: 'warn',
      detail: `${head}; comparison with the lease skipped: ${f.store.error}`,
      fix: 'check that the lease store is up and reachable: --etcd-endpoints and etcd, or with --kube-subnet-mgr the kubeconfig, the API server and RBAC',
    };
  if (!f.underlay.ok)
    return {
      check,
      verdict: 'warn',
      detail: `${head}; skipped: cannot tell our PublicIP (${f.underlay.error})`,
      fix: 'pass the --iface or --public-ip twill run uses',
    };
  const net = f.store.value.config.network;
  const restart =
    'restart twill run (it rewrites subnet.env at start), then re-create pods wired from the old file';
  if (!sameCidr(net, env.network))
    return {
      check,
      verdict: 'fail',
      detail: `${head}, but the network config says Network ${formatCidr(net)}`,
      fix: restart,
    };
  const ip = f.underlay.value.publicIp;
  const mine = ownLeases(f);
  if (mine.length === 0)
    return {
      check,
      verdict: 'fail',
      detail: `${head}, but no lease in the store has PublicIP ${ip}`,
      fix: 'start twill run (it acquires a lease), or pass the --public-ip/--iface it uses',
    };
  if (!mine.some((l) => sameCidr(l.subnet, env.subnet))) {
    return {
      check,
      verdict: 'fail',
      detail: `${head}, but our lease (PublicIP ${ip}) is ${mine.map((l) => formatCidr(l.subnet)).join(', ')}`,
      fix: restart,
    };
  }
  if (mine.length > 1)
    return {
      check,
      verdict: 'warn',
      detail: `${head}; ${mine.length} leases name PublicIP ${ip}: ${mine.map((l) => l.key).join(', ')}`,
      fix: 'delete the leases that are not in subnet.env (etcdctl del <prefix>/subnets/<key>)',
    };
  return {
    check,
    verdict: 'ok',
    detail: `${head} matches our lease ${mine[0]?.key ?? ''} (PublicIP ${ip})`,
    fix: '',
  };
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
  const check = 'cni0-subnet';
  if (!f.links.ok)
    return {
      check,
      verdict: 'warn',
      detail: `skipped: could not list links (${f.links.error})`,
      fix: '',
    };
  if (!f.links.value.some((l) => l.name === f.bridge))
    return {
      check,
      verdict: 'ok',
      detail: `no ${f.bridge} (no pod wired on this node yet)`,
      fix: '',
    };
  const subnet =
    f.subnetEnv.ok && f.subnetEnv.value ? f.subnetEnv.value.subnet : ownLeases(f)[0]?.subnet;
  if (!subnet)
    return {
      check,
      verdict: 'warn',
      detail: 'skipped: no subnet.env and no lease to compare with',
      fix: '',
    };
  const { old } = bridgeAddresses(f, subnet);
  if (old.length === 0)
    return {
      check,
      verdict: 'ok',
      detail: `${f.bridge} carries no address outside ${formatCidr(subnet)}`,
      fix: '',
    };
  return {
    check,
    verdict: 'fail',
    detail: `${f.bridge} carries ${old.join(', ')} from an old subnet (the node's subnet is now ${formatCidr(subnet)}): the bridge keeps routing the old subnet to pods that are gone`,
    fix: `${old.map((a) => `ip addr del ${a} dev ${f.bridge}`).join('; ')}; then re-create the pods still using old addresses`,
  };
}

export function checkStaleRoutes(f: DoctorFacts): CheckResult {
  const check = 'stale-routes';
  if (!f.ownedRoutes.ok)
    return {
      check,
      verdict: 'warn',
      detail: `could not list routes: ${f.ownedRoutes.error}`,
      fix: '',
    };
  if (!f.store.ok)
    return {
      check,
      verdict: 'warn',
      detail: `skipped: ${f.store.error}`,
      fix: 'check that the lease store is up and reachable: --etcd-endpoints and etcd, or with --kube-subnet-mgr the kubeconfig, the API server and RBAC',
    };
  const ip = f.underlay.ok ? f.underlay.value.publicIp : undefined;
  const explained = new Set(
    f.store.value.leases.flatMap((r) =>
      r.ok && r.lease.attrs.publicIp !== ip ? [formatCidr(r.lease.subnet)] : [],
    ),
  );
  const stale = f.ownedRoutes.value.filter((r) => !explained.has(r.dst));
  const n = f.ownedRoutes.value.length;
  if (stale.length === 0)
    return {
      check,
      verdict: 'ok',
      detail: `${n} route${n === 1 ? '' : 's'} with protocol 151, each explained by a peer's lease`,
      fix: '',
    };
  const shown = stale.slice(0, 5).map((r) => `${r.dst} via ${r.via} dev ${r.dev}`);
  return {
    check,
    verdict: 'fail',
    detail: `${stale.length} route${stale.length === 1 ? '' : 's'} with twill's protocol 151 that no lease explains: ${shown.join(', ')}${stale.length > 5 ? ', …' : ''}`,
    fix: `start twill run (its first pass removes them), or by hand: ${stale
      .slice(0, 3)
      .map((r) => `ip route del ${r.dst} proto 151`)
      .join('; ')}`,
  };
}

export function checkForeignOverlay(f: DoctorFacts): CheckResult {
  const check = 'foreign-overlay';
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
    return {
      check,
      verdict: 'fail',
      detail: `another overlay daemon's leftovers: ${found.join('; ')}`,
      fix: `stop the other daemon (e.g. flannel's DaemonSet) on this node, then ${fixes.join('; ')}`,
    };
  }
  if (unread.length > 0)
    return {
      check,
      verdict: 'warn',
      detail: `could not look everywhere: ${unread.join('; ')}`,
      fix: '',
    };
  return {
    check,
    verdict: 'ok',
    detail: `no flannel.* device, no FLANNEL-POSTRTG/FLANNEL-FWD chain, no ${f.bridge} address outside the network`,
    fix: '',
  };
}
