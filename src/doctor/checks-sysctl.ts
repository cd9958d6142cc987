// Doctor checks over kernel settings (pure): net.ipv4.ip_forward,
// br_netfilter and bridge-nf-call-iptables, and rp_filter in strict mode on
// the interfaces overlay traffic crosses. The values are read (gather.ts)
// under --proc-sys-net, where the daemon reads and writes them. On an
// IPv6-only node ip_forward and rp_filter (IPv4's) do not matter, and
// bridge-nf-call-ip6tables is the setting that does.
import { failed, verdicts, type CheckResult, type DoctorFacts } from './facts.ts';
import { ipv6Only, overlayView } from './overlay.ts';

/** A sysctl that cannot be read: not root, or --proc-sys-net not where twill run reads them. */
const READ_FIX =
  "run twill doctor as root, in the node's network namespace, with the --proc-sys-net twill run has";

export function checkIpForward(f: DoctorFacts): CheckResult {
  const v = verdicts('ip-forward');
  if (ipv6Only(f))
    return v.ok(
      'n/a: IPv4 is off (IPv6 only), so net.ipv4.ip_forward does not matter (ipv6-forward checks forwarding)',
    );
  if (!f.ipForward.ok)
    return v.warn(`could not read net.ipv4.ip_forward: ${f.ipForward.error}`, READ_FIX);
  if (f.ipForward.value === '1') return v.ok('net.ipv4.ip_forward is 1');
  return v.fail(
    `net.ipv4.ip_forward is ${f.ipForward.value}: the node does not forward pod traffic`,
    'sysctl -w net.ipv4.ip_forward=1 (twill run sets it; if it keeps going back to 0, find what resets it, e.g. a sysctl.d file)',
  );
}

export function checkBrNetfilter(f: DoctorFacts): CheckResult {
  const v = verdicts('br-netfilter');
  if (!f.bridgeNf.ok)
    return v.warn(`could not read /proc/sys/net/bridge: ${f.bridgeNf.error}`, READ_FIX);
  if (f.bridgeNf.value !== undefined)
    return v.ok('br_netfilter is loaded (/proc/sys/net/bridge exists)');
  return v.fail(
    'br_netfilter is not loaded (no /proc/sys/net/bridge): pod-to-service traffic between pods on cni0 bypasses iptables (kube-proxy)',
    'modprobe br_netfilter, and add br_netfilter to /etc/modules-load.d/ so it loads at boot',
  );
}

export function checkBridgeNfCall(f: DoctorFacts): CheckResult {
  // IPv6 only: bridged pod traffic is IPv6, which the ip6tables setting alone sends through
  // netfilter
  const tool = ipv6Only(f) ? 'ip6tables' : 'iptables';
  const v = verdicts(`bridge-nf-call-${tool}`);
  const read =
    tool === 'iptables' ? f.bridgeNf : (f.bridgeNf6 ?? failed<string | undefined>('not read'));
  if (!read.ok) return v.warn(`could not read it: ${read.error}`, READ_FIX);
  const value = read.value;
  if (value === undefined)
    return v.warn(
      'skipped: br_netfilter is not loaded (see br-netfilter)',
      'modprobe br_netfilter first',
    );
  if (value === '1') return v.ok(`net.bridge.bridge-nf-call-${tool} is 1`);
  return v.fail(
    `net.bridge.bridge-nf-call-${tool} is ${value}: bridged pod traffic bypasses ${tool} (service VIPs between pods on one node break)`,
    `sysctl -w net.bridge.bridge-nf-call-${tool}=1 (and persist it in /etc/sysctl.d/)`,
  );
}

/** The interfaces overlay traffic crosses, with why each matters. */
function overlayInterfaces(f: DoctorFacts): { dev: string; role: string }[] {
  const view = overlayView(f);
  const out: { dev: string; role: string }[] = [];
  if (f.underlay.ok) out.push({ dev: f.underlay.value.name, role: 'the underlay' });
  if (view.backend !== 'host-gw' && view.device !== undefined)
    out.push({ dev: view.device, role: 'the vxlan device' });
  out.push({ dev: f.bridge, role: 'the pod bridge' });
  return out.filter((i) => f.rpFilter.has(i.dev));
}

export function checkRpFilter(f: DoctorFacts): CheckResult {
  const v = verdicts('rp-filter');
  if (ipv6Only(f))
    return v.ok('n/a: rp_filter filters IPv4 packets only, and IPv4 is off (IPv6 only)');
  const all = f.rpFilter.get('all');
  const strict: string[] = [];
  const fixes: string[] = [];
  if (all === '1') {
    strict.push(
      "all=1 (the kernel uses the higher of conf.all and each interface's value, so every interface is strict)",
    );
    fixes.push('net.ipv4.conf.all.rp_filter=2');
  }
  for (const { dev, role } of overlayInterfaces(f)) {
    if (f.rpFilter.get(dev) !== '1') continue;
    strict.push(`${dev}=1 (${role})`);
    fixes.push(`net.ipv4.conf.${dev}.rp_filter=2`);
  }
  if (strict.length > 0) {
    return v.fail(
      `strict reverse-path filtering on ${strict.join(', ')}: packets whose source the kernel would route back out another interface (asymmetric overlay paths, DirectRouting, multi-homed nodes) are dropped silently`,
      `sysctl -w ${fixes.join(' ')} (loose mode; persist in /etc/sysctl.d/)`,
    );
  }
  if (f.rpFilter.get('default') === '1') {
    return v.warn(
      'net.ipv4.conf.default.rp_filter is 1: interfaces created from now on (a re-created twill device, cni0) start strict',
      'sysctl -w net.ipv4.conf.default.rp_filter=2',
    );
  }
  const seen = ['all', ...overlayInterfaces(f).map((i) => i.dev)].map(
    (d) => `${d}=${f.rpFilter.get(d) ?? '?'}`,
  );
  return v.ok(`no strict rp_filter (${seen.join(', ')})`);
}
