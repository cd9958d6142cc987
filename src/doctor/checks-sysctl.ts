// Doctor checks over kernel settings (pure): net.ipv4.ip_forward,
// br_netfilter and bridge-nf-call-iptables, and rp_filter in strict mode on
// the interfaces overlay traffic crosses. The values are read (gather.ts)
// under --proc-sys-net, where the daemon reads and writes them.
import type { CheckResult, DoctorFacts } from './facts.ts';
import { overlayView } from './overlay.ts';

/** A sysctl that cannot be read: not root, or --proc-sys-net not where twill run reads them. */
const READ_FIX =
  "run twill doctor as root, in the node's network namespace, with the --proc-sys-net twill run has";

export function checkIpForward(f: DoctorFacts): CheckResult {
  const check = 'ip-forward';
  if (!f.ipForward.ok)
    return {
      check,
      verdict: 'warn',
      detail: `could not read net.ipv4.ip_forward: ${f.ipForward.error}`,
      fix: READ_FIX,
    };
  if (f.ipForward.value === '1')
    return { check, verdict: 'ok', detail: 'net.ipv4.ip_forward is 1', fix: '' };
  return {
    check,
    verdict: 'fail',
    detail: `net.ipv4.ip_forward is ${f.ipForward.value}: the node does not forward pod traffic`,
    fix: 'sysctl -w net.ipv4.ip_forward=1 (twill run sets it; if it keeps going back to 0, find what resets it, e.g. a sysctl.d file)',
  };
}

export function checkBrNetfilter(f: DoctorFacts): CheckResult {
  const check = 'br-netfilter';
  if (!f.bridgeNf.ok)
    return {
      check,
      verdict: 'warn',
      detail: `could not read /proc/sys/net/bridge: ${f.bridgeNf.error}`,
      fix: READ_FIX,
    };
  if (f.bridgeNf.value !== undefined)
    return {
      check,
      verdict: 'ok',
      detail: 'br_netfilter is loaded (/proc/sys/net/bridge exists)',
      fix: '',
    };
  return {
    check,
    verdict: 'fail',
    detail:
      'br_netfilter is not loaded (no /proc/sys/net/bridge): pod-to-service traffic between pods on cni0 bypasses iptables (kube-proxy)',
    fix: 'modprobe br_netfilter, and add br_netfilter to /etc/modules-load.d/ so it loads at boot',
  };
}

export function checkBridgeNfCall(f: DoctorFacts): CheckResult {
  const check = 'bridge-nf-call-iptables';
  if (!f.bridgeNf.ok)
    return {
      check,
      verdict: 'warn',
      detail: `could not read it: ${f.bridgeNf.error}`,
      fix: READ_FIX,
    };
  const value = f.bridgeNf.value;
  if (value === undefined)
    return {
      check,
      verdict: 'warn',
      detail: 'skipped: br_netfilter is not loaded (see br-netfilter)',
      fix: 'modprobe br_netfilter first',
    };
  if (value === '1')
    return { check, verdict: 'ok', detail: 'net.bridge.bridge-nf-call-iptables is 1', fix: '' };
  return {
    check,
    verdict: 'fail',
    detail: `net.bridge.bridge-nf-call-iptables is ${value}: bridged pod traffic bypasses iptables (service VIPs between pods on one node break)`,
    fix: 'sysctl -w net.bridge.bridge-nf-call-iptables=1 (and persist it in /etc/sysctl.d/)',
  };
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
  const check = 'rp-filter';
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
    return {
      check,
      verdict: 'fail',
      detail: `strict reverse-path filtering on ${strict.join(', ')}: packets whose source the kernel would route back out another interface (asymmetric overlay paths, DirectRouting, multi-homed nodes) are dropped silently`,
      fix: `sysctl -w ${fixes.join(' ')} (loose mode; persist in /etc/sysctl.d/)`,
    };
  }
  if (f.rpFilter.get('default') === '1') {
    return {
      check,
      verdict: 'warn',
      detail:
        'net.ipv4.conf.default.rp_filter is 1: interfaces created from now on (a re-created twill device, cni0) start strict',
      fix: 'sysctl -w net.ipv4.conf.default.rp_filter=2',
    };
  }
  const seen = ['all', ...overlayInterfaces(f).map((i) => i.dev)].map(
    (d) => `${d}=${f.rpFilter.get(d) ?? '?'}`,
  );
  return { check, verdict: 'ok', detail: `no strict rp_filter (${seen.join(', ')})`, fix: '' };
}
