// Doctor checks over iptables (pure): rules left in the iptables backend
// the `iptables` command does not drive (legacy vs nf_tables), and an INPUT
// rule or policy that drops vxlan's UDP port. On an IPv6-only node the same
// over ip6tables, the only tool whose rules its packets meet (gather.ts reads
// ip6tables' facts there). In nftables mode twill uses no iptables: a node
// without the tool has no backend to mix up and no INPUT chain of iptables,
// so both checks are n/a there, and never ask to install it.
import { verdicts, type CheckResult, type DoctorFacts } from './facts.ts';
import {
  hitsUdpPort,
  inputPolicy,
  inputRules,
  irrelevantAccept,
  namesPort,
  type InputRule,
} from './input-rules.ts';
import { ipv6Only, masqMode, overlayView } from './overlay.ts';

const ROOT_FIX = "run twill doctor as root, in the node's network namespace";

/** nftables mode: twill uses no iptables, so the tool may rightly be missing. */
const nftablesMode = (f: DoctorFacts): boolean => masqMode(f) === 'nftables';

export function checkIptablesBackend(f: DoctorFacts): CheckResult {
  const v = verdicts('iptables-backend');
  const tool = ipv6Only(f) ? 'ip6tables' : 'iptables';
  if (f.noIptables === true && nftablesMode(f))
    return v.ok(
      `n/a: nftables mode, and no ${tool} command here, so no second iptables backend to hold rules`,
    );
  if (!f.iptables.ok)
    return v.warn(
      `could not run ${tool} --version: ${f.iptables.error}`,
      nftablesMode(f) ? ROOT_FIX : `install ${tool}`,
    );
  const { backend, otherRules } = f.iptables.value;
  const other = backend === 'nf_tables' ? 'legacy' : 'nf_tables';
  const save = `${tool}-${backend === 'nf_tables' ? 'legacy' : 'nft'}-save`;
  if (!otherRules.ok)
    return v.warn(
      `${tool} drives ${backend}; skipped the ${other} backend: ${otherRules.error}`,
      `install ${save} (Debian: iptables) so doctor can look`,
    );
  if (otherRules.value === 0)
    return v.ok(`${tool} drives ${backend}; the ${other} backend holds no rules`);
  return v.fail(
    `${tool} drives ${backend}, but the ${other} backend holds ${otherRules.value} rules (${save}): a program on this node (kube-proxy, docker, an old flannel) uses the other backend, and both rule sets apply to every packet`,
    `run every program with one backend (update-alternatives --set ${tool} /usr/sbin/${tool}-${backend === 'nf_tables' ? 'nft' : 'legacy'}, and the same inside their images), then flush the stale ${other} rules (${save} shows them)`,
  );
}

type Walk = { verdict: 'ok' | 'warn' | 'fail'; detail: string };

/** Walks INPUT in order for a new UDP packet to `port` from a peer. */
function walkInput(rules: readonly InputRule[], policy: string | undefined, port: number): Walk {
  const notes: string[] = [];
  let maybeDrop: InputRule | undefined;
  let conditionalAccept: InputRule | undefined;
  for (const r of rules) {
    if (!hitsUdpPort(r, port) || r.target === undefined) continue;
    const conditional = r.conditions.length > 0;
    if (r.target === 'ACCEPT') {
      if (!conditional)
        return {
          verdict: 'ok',
          detail: `accepted by \`${r.text}\`${notes.length ? ` (${notes.join('; ')})` : ''}`,
        };
      if (namesPort(r))
        return {
          verdict: 'ok',
          detail: `accepted by \`${r.text}\` (only for the traffic its conditions allow)`,
        };
      if (!irrelevantAccept(r)) conditionalAccept ??= r;
    } else if (r.target === 'DROP' || r.target === 'REJECT') {
      if (!conditional)
        return {
          verdict: 'fail',
          detail: `\`${r.text}\` drops UDP to port ${port} (vxlan): peers' overlay packets never arrive`,
        };
      maybeDrop ??= r;
    } else if (r.target === 'RETURN') {
      if (!conditional) break;
    } else {
      notes.push(`jumps to ${r.target}, not followed`);
    }
  }
  if (policy === 'DROP' || policy === 'REJECT') {
    if (conditionalAccept)
      return {
        verdict: 'warn',
        detail: `INPUT policy is ${policy}; only \`${conditionalAccept.text}\` may let UDP ${port} in: check that it covers every peer`,
      };
    return {
      verdict: 'fail',
      detail: `INPUT policy is ${policy} and no rule accepts UDP to port ${port} (vxlan): peers' overlay packets are dropped`,
    };
  }
  if (maybeDrop)
    return {
      verdict: 'warn',
      detail: `\`${maybeDrop.text}\` drops UDP to port ${port} for the traffic its conditions match`,
    };
  return {
    verdict: 'ok',
    detail: `INPUT lets UDP ${port} in (policy ${policy ?? 'ACCEPT'}${notes.length ? `; ${notes.join('; ')}` : ''})`,
  };
}

export function checkVxlanPort(f: DoctorFacts): CheckResult {
  const v = verdicts('vxlan-port');
  const view = overlayView(f);
  if (view.backend === 'host-gw') return v.ok('host-gw backend: no vxlan port to keep open');
  // IPv6 only: peers' vxlan packets come over IPv6, through ip6tables' INPUT
  const tool = ipv6Only(f) ? 'ip6tables' : 'iptables';
  if (f.noIptables === true && nftablesMode(f))
    return v.ok(
      `n/a: nftables mode, and no ${tool} command here, so no ${tool} INPUT rule can drop UDP port ${view.port} (vxlan); rules of other nftables tables are not read (nft list ruleset shows them)`,
    );
  if (!f.inputChain.ok)
    return v.warn(
      `could not list INPUT: ${f.inputChain.error}`,
      nftablesMode(f) ? ROOT_FIX : `run twill doctor as root with ${tool} installed`,
    );
  const port = view.port;
  const walk = walkInput(inputRules(f.inputChain.value), inputPolicy(f.inputChain.value), port);
  const fix =
    walk.verdict === 'ok'
      ? ''
      : `${tool} -I INPUT -p udp --dport ${port} -s <underlay network> -j ACCEPT (or remove the rule), on every node`;
  const where = tool === 'ip6tables' ? 'ip6tables: ' : '';
  return v[walk.verdict](`${where}UDP port ${port} (from ${view.source}): ${walk.detail}`, fix);
}
