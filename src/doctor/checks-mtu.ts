// The doctor's MTU check (pure): the underlay MTU, FLANNEL_MTU in
// subnet.env, the vxlan device (underlay − 50, or Backend.MTU − 50), on a
// dual-stack node the IPv6 vxlan device (− 70: IPv6's header is 20 bytes
// longer), cni0 and the pods' host veths on it must agree, or large packets
// are dropped (a pod MTU above the path) or fragmented. An IPv6-only node has
// only the IPv6 device (an IPv4 one left behind is the ipv4-leftovers check's).
import { VXLAN6_OVERHEAD, VXLAN_OVERHEAD } from '../dataplane/model.ts';
import { verdicts, type CheckResult, type DoctorFacts, type LinkFact } from './facts.ts';
import { families, overlayView } from './overlay.ts';

interface Problem {
  readonly verdict: 'warn' | 'fail';
  readonly text: string;
  readonly fix: string;
}

function deviceProblems(
  f: DoctorFacts,
  underlayMtu: number,
  links: readonly LinkFact[],
): Problem[] {
  const view = overlayView(f);
  if (view.backend === 'host-gw' || view.device === undefined) return [];
  const out: Problem[] = [];
  const underlay = f.underlay.ok ? f.underlay.value.name : 'the underlay';
  if (view.backendMtu !== undefined && view.backendMtu > underlayMtu) {
    out.push({
      verdict: 'fail',
      text: `Backend.MTU ${view.backendMtu} is above ${underlay}'s MTU ${underlayMtu}`,
      fix: `set Backend.MTU to at most ${underlayMtu} in the network config`,
    });
  }
  const base =
    view.backendMtu !== undefined
      ? `Backend.MTU ${view.backendMtu}`
      : `${underlay} MTU ${underlayMtu}`;
  const fam = families(f);
  const devices = [
    ...(fam.ipv4 ? [{ name: view.device, overhead: VXLAN_OVERHEAD }] : []),
    ...(fam.ipv6 ? [{ name: view.device6, overhead: VXLAN6_OVERHEAD }] : []),
  ];
  for (const { name, overhead } of devices) {
    const dev = links.find((l) => l.name === name);
    const want = (view.backendMtu ?? underlayMtu) - overhead;
    if (dev && dev.mtu !== want) {
      out.push({
        verdict: 'fail',
        text: `${dev.name} has MTU ${dev.mtu}, expected ${want} (${base} − ${overhead})`,
        fix: `ip link set dev ${dev.name} mtu ${want} (twill run keeps it so when running)`,
      });
    }
  }
  return out;
}

/** FLANNEL_MTU as it should be, when the backend is known. */
function expectedPodMtu(f: DoctorFacts, underlayMtu: number): number | undefined {
  const view = overlayView(f);
  // dual-stack or IPv6 only: the IPv6 tunnel's smaller figure (podMtu in desired.ts)
  const overhead = families(f).ipv6 ? VXLAN6_OVERHEAD : VXLAN_OVERHEAD;
  if (view.backend === 'vxlan') return (view.backendMtu ?? underlayMtu) - overhead;
  return view.backend === 'host-gw' ? underlayMtu : undefined;
}

function podSideProblems(f: DoctorFacts, podMtu: number, links: readonly LinkFact[]): Problem[] {
  const out: Problem[] = [];
  const bridge = links.find((l) => l.name === f.bridge);
  const ports = links.filter((l) => l.master === f.bridge);
  for (const l of bridge ? [bridge, ...ports] : ports) {
    if (l.mtu > podMtu) {
      out.push({
        verdict: 'fail',
        text: `${l.name} has MTU ${l.mtu}, above FLANNEL_MTU ${podMtu}: large packets from pods are dropped on the overlay`,
        fix: `ip link set dev ${l.name} mtu ${podMtu} (pods wired with the wrong MTU need re-creating)`,
      });
    } else if (l.mtu < podMtu) {
      out.push({
        verdict: 'warn',
        text: `${l.name} has MTU ${l.mtu}, below FLANNEL_MTU ${podMtu} (works, with smaller packets; set on purpose by the CNI config's "mtu"?)`,
        fix: `ip link set dev ${l.name} mtu ${podMtu}`,
      });
    }
  }
  return out;
}

export function checkMtu(f: DoctorFacts): CheckResult {
  const v = verdicts('mtu');
  if (!f.underlay.ok)
    return v.warn(
      `skipped: no underlay interface (${f.underlay.error})`,
      'pass the --iface twill run uses',
    );
  if (!f.links.ok) return v.warn(`skipped: could not list links (${f.links.error})`);
  const u = f.underlay.value.mtu;
  const links = f.links.value;
  const problems = deviceProblems(f, u, links);
  const expected = expectedPodMtu(f, u);
  const env = f.subnetEnv.ok ? f.subnetEnv.value : undefined;
  if (env && expected !== undefined && env.mtu !== expected) {
    problems.push({
      verdict: 'fail',
      text: `FLANNEL_MTU is ${env.mtu} in ${f.subnetFile}, expected ${expected}`,
      fix: 'restart twill run (it rewrites subnet.env), then re-create the pods wired with the old MTU',
    });
  }
  const podMtu = env?.mtu ?? expected;
  if (podMtu !== undefined) problems.push(...podSideProblems(f, podMtu, links));
  const worst = problems.find((p) => p.verdict === 'fail') ?? problems[0];
  if (!worst && podMtu === undefined)
    return v.ok(
      `${f.underlay.value.name} MTU ${u}; nothing to compare it with (no subnet.env, backend unknown)`,
    );
  if (!worst) {
    const parts = [
      `${f.underlay.value.name} ${u}`,
      env ? `FLANNEL_MTU ${env.mtu}` : 'no subnet.env',
      `${f.bridge} and pods ${podMtu}`,
    ];
    const view = overlayView(f);
    const dev6 = families(f).ipv6 ? links.find((l) => l.name === view.device6) : undefined;
    if (dev6) parts.splice(1, 0, `${dev6.name} ${dev6.mtu}`);
    return v.ok(`consistent: ${parts.join(', ')}`);
  }
  return v[worst.verdict](problems.map((p) => p.text).join('; '), worst.fix);
}
