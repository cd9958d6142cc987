// A kube-proxy-sized nat table for the idle benchmark: `services` services
// with 3 endpoints each, in kube-proxy's iptables-mode shape (KUBE-SERVICES
// → KUBE-SVC-* → KUBE-SEP-*, 10 rules a service), as iptables-restore
// input. `generation` moves every endpoint, so each rewrite really changes
// the rules, as a kube-proxy sync after endpoint churn does.

const ENDPOINTS = 3;

const hex = (n: number): string => n.toString(16).toUpperCase().padStart(16, '0');
const svcChain = (s: number): string => `KUBE-SVC-${hex(s * 7919 + 1)}`;
const sepChain = (s: number, e: number): string => `KUBE-SEP-${hex(s * 104_729 + e * 13 + 2)}`;
const clusterIp = (s: number): string => `10.96.${(s >> 8) & 255}.${s & 255}`;
const endpointIp = (s: number, e: number, generation: number): string => {
  const n = s * ENDPOINTS + e + generation * 7;
  return `10.250.${(n >> 8) & 255}.${n & 255}`;
};

function serviceRules(s: number, generation: number): string[] {
  const name = `bench/svc-${s}:http`;
  const out = [
    `-A KUBE-SERVICES -d ${clusterIp(s)}/32 -p tcp -m comment --comment "${name} cluster IP" -m tcp --dport 80 -j ${svcChain(s)}`,
  ];
  for (let e = 0; e < ENDPOINTS; e++) {
    const left = ENDPOINTS - e;
    const pick =
      left > 1 ? ` -m statistic --mode random --probability ${(1 / left).toFixed(11)}` : '';
    out.push(
      `-A ${svcChain(s)} -m comment --comment "${name} -> ${endpointIp(s, e, generation)}:8080"${pick} -j ${sepChain(s, e)}`,
    );
  }
  for (let e = 0; e < ENDPOINTS; e++) {
    const ip = endpointIp(s, e, generation);
    out.push(`-A ${sepChain(s, e)} -s ${ip}/32 -m comment --comment "${name}" -j KUBE-MARK-MASQ`);
    out.push(
      `-A ${sepChain(s, e)} -p tcp -m comment --comment "${name}" -m tcp -j DNAT --to-destination ${ip}:8080`,
    );
  }
  return out;
}

/** Rules a call to `kubeNatRules` writes: 10 per service and 4 more. */
export const kubeRuleCount = (services: number): number => services * (1 + 3 * ENDPOINTS) + 4;

/**
 * iptables-restore --noflush input that (re)declares every KUBE-* chain and
 * fills it; with `jumps`, also the jumps from the built-in chains (once).
 */
export function kubeNatRules(o: { services: number; generation: number; jumps: boolean }): string {
  const chains = ['KUBE-SERVICES', 'KUBE-MARK-MASQ', 'KUBE-POSTROUTING'];
  for (let s = 0; s < o.services; s++)
    chains.push(svcChain(s), ...Array.from({ length: ENDPOINTS }, (_, e) => sepChain(s, e)));
  const lines = ['*nat', ...chains.map((c) => `:${c} - [0:0]`)];
  if (o.jumps) {
    lines.push('-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES');
    lines.push('-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES');
    lines.push(
      '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    );
  }
  lines.push('-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000');
  lines.push('-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN');
  lines.push('-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000');
  lines.push(
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
  );
  for (let s = 0; s < o.services; s++) lines.push(...serviceRules(s, o.generation));
  lines.push('COMMIT', '');
  return lines.join('\n');
}
