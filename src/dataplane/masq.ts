// The masquerade and forward chains: flannel's rule set in twill's own
// chains (TWILL-POSTRTG in nat, TWILL-FWD in filter), each rule written
// exactly as `iptables -S` prints it so observed and desired rules compare
// as values, and the typed ops that make a chain match (render.ts turns them
// into iptables-restore --noflush lines). The jump from the built-in chain
// is kept single and appended, like flannel's, so policy chains earlier in
// FORWARD still apply. With IPv6 the same chains, rules and order live in
// ip6tables (as flannel's v6 rules do), over the IPv6 network and our IPv6
// subnet, multicast being ff00::/8 there; with IPv4 off (IPv6 only) only
// there, the iptables chains having no spec (they must not exist).
import { formatCidr } from '../net/ipv4.ts';
import { formatCidr6 } from '../net/ipv6.ts';
import type { MasqSpec, MasqSpec6, ObservedChain, Op } from './model.ts';

export const MASQ_CHAIN = 'TWILL-POSTRTG';
export const FWD_CHAIN = 'TWILL-FWD';
const MASQ_COMMENT = '-m comment --comment "twill masq"';
const FWD_COMMENT = '-m comment --comment "twill forward"';

export interface ChainSpec {
  /** an ip6tables chain (absent: iptables) */
  readonly ipv6?: true;
  readonly table: 'nat' | 'filter';
  readonly parent: 'POSTROUTING' | 'FORWARD';
  readonly chain: string;
  /** the jump rule without the leading "-A <parent>" */
  readonly jump: string;
  /** `iptables -S <chain>` lines, "-A …", in order; null when the chain must not exist */
  readonly rules: readonly string[] | null;
}

/** One family's chain inputs as `-S` prints them: network, subnet, multicast block. */
interface ChainText {
  readonly net: string;
  readonly sub: string;
  readonly multicast: string;
  readonly randomFully: boolean;
}

const text4 = (spec: MasqSpec): ChainText => ({
  net: formatCidr(spec.network),
  sub: formatCidr(spec.subnet),
  multicast: '224.0.0.0/4',
  randomFully: spec.randomFully,
});

const text6 = (spec: MasqSpec6): ChainText => ({
  net: formatCidr6(spec.network),
  sub: formatCidr6(spec.subnet),
  multicast: 'ff00::/8',
  randomFully: spec.randomFully,
});

export function masqRules(spec: MasqSpec): string[] {
  return masqText(text4(spec));
}

/** The IPv6 masquerade rules, for ip6tables. */
export function masqRules6(spec: MasqSpec6): string[] {
  return masqText(text6(spec));
}

function masqText({ net, sub, multicast, randomFully }: ChainText): string[] {
  const masq = `-j MASQUERADE${randomFully ? ' --random-fully' : ''}`;
  const a = `-A ${MASQ_CHAIN}`;
  return [
    `${a} -m mark --mark 0x4000/0x4000 ${MASQ_COMMENT} -j RETURN`,
    `${a} -s ${sub} -d ${net} ${MASQ_COMMENT} -j RETURN`,
    `${a} -s ${net} -d ${sub} ${MASQ_COMMENT} -j RETURN`,
    `${a} ! -s ${net} -d ${sub} ${MASQ_COMMENT} -j RETURN`,
    `${a} -s ${net} ! -d ${multicast} ${MASQ_COMMENT} ${masq}`,
    `${a} ! -s ${net} -d ${net} ${MASQ_COMMENT} ${masq}`,
  ];
}

export function forwardRules(spec: MasqSpec): string[] {
  return forwardText(text4(spec).net);
}

/** The IPv6 forward rules, for ip6tables. */
export function forwardRules6(spec: MasqSpec6): string[] {
  return forwardText(text6(spec).net);
}

function forwardText(net: string): string[] {
  return [
    `-A ${FWD_CHAIN} -s ${net} ${FWD_COMMENT} -j ACCEPT`,
    `-A ${FWD_CHAIN} -d ${net} ${FWD_COMMENT} -j ACCEPT`,
  ];
}

/**
 * Both chains as they should be. The forward chain is kept whatever --ip-masq says, like flannel's.
 */
export function chainSpecs(spec: MasqSpec): { postrouting: ChainSpec; forward: ChainSpec } {
  return specsOf(spec.ipMasq ? masqRules(spec) : null, forwardRules(spec));
}

/** Both ip6tables chains as they should be, with the same names and rule order. */
export function chainSpecs6(spec: MasqSpec6): { postrouting: ChainSpec; forward: ChainSpec } {
  return inIp6tables(specsOf(spec.ipMasq ? masqRules6(spec) : null, forwardRules6(spec)));
}

/**
 * The iptables chains when IPv4 is off (IPv6 only): neither may exist, nor any jump to them (the
 * first pass after a start with IPv4 off removes what an IPv4 or dual-stack run left).
 */
export function noChainSpecs(): { postrouting: ChainSpec; forward: ChainSpec } {
  return specsOf(null, null);
}

/**
 * The ip6tables chains when IPv6 is off: neither may exist, nor any jump to them (the first pass
 * after a start without IPv6 removes what a dual-stack run left).
 */
export function noChainSpecs6(): { postrouting: ChainSpec; forward: ChainSpec } {
  return inIp6tables(specsOf(null, null));
}

function inIp6tables(s: { postrouting: ChainSpec; forward: ChainSpec }): {
  postrouting: ChainSpec;
  forward: ChainSpec;
} {
  return { postrouting: { ipv6: true, ...s.postrouting }, forward: { ipv6: true, ...s.forward } };
}

function specsOf(
  masq: readonly string[] | null,
  forward: readonly string[] | null,
): { postrouting: ChainSpec; forward: ChainSpec } {
  return {
    postrouting: {
      table: 'nat',
      parent: 'POSTROUTING',
      chain: MASQ_CHAIN,
      jump: `${MASQ_COMMENT} -j ${MASQ_CHAIN}`,
      rules: masq,
    },
    forward: {
      table: 'filter',
      parent: 'FORWARD',
      chain: FWD_CHAIN,
      jump: `${FWD_COMMENT} -j ${FWD_CHAIN}`,
      rules: forward,
    },
  };
}

/**
 * Reads `iptables -S <parent>` output: the rules that jump to `chain`, without their "-A <parent> "
 * head.
 */
export function jumpRules(parentListing: string, parent: string, chain: string): string[] {
  const head = `-A ${parent} `;
  return parentListing
    .split('\n')
    .filter((l) => l.startsWith(head) && l.endsWith(`-j ${chain}`))
    .map((l) => l.slice(head.length));
}

/** Reads `iptables -S <chain>` output: the rules, in order. */
export function chainRules(listing: string): string[] {
  return listing.split('\n').filter((l) => l.startsWith('-A '));
}

/**
 * The ops that make one chain right: the chain itself (declared and refilled whenever its rules
 * differ in any way, so order and duplicates are repaired together, or removed when it must not
 * exist), and exactly one jump to it, ours: extra or foreign-shaped jumps go, deleted as listed so
 * the delete matches.
 */
export function diffChain(want: ChainSpec, seen: ObservedChain): Op[] {
  const ops: Op[] = [];
  const { table, parent, chain } = want;
  // the family marker only on IPv6 ops, so IPv4 ops stay exactly what they were
  const v6 = want.ipv6 ? { ipv6: true as const } : {};
  const jump = (action: 'add' | 'delete', rule: string): Op => ({
    kind: 'jump',
    action,
    phase: 'iptables',
    ...v6,
    table,
    parent,
    chain,
    rule,
  });
  if (want.rules === null) {
    for (const j of seen.jumps) ops.push(jump('delete', j));
    if (seen.rules !== null)
      ops.push({
        kind: 'chain',
        action: 'delete',
        phase: 'iptables',
        ...v6,
        table,
        chain,
        rules: [],
        missing: [],
        extra: seen.rules,
        reordered: false,
      });
    return ops;
  }
  const left = [...(seen.rules ?? [])];
  const missing: string[] = [];
  for (const r of want.rules) {
    const at = left.indexOf(r);
    if (at >= 0) left.splice(at, 1);
    else missing.push(r);
  }
  const reordered =
    missing.length === 0 &&
    left.length === 0 &&
    (seen.rules ?? []).some((r, i) => r !== want.rules?.[i]);
  if (seen.rules === null || missing.length > 0 || left.length > 0 || reordered)
    ops.push({
      kind: 'chain',
      action: seen.rules === null ? 'add' : 'change',
      phase: 'iptables',
      ...v6,
      table,
      chain,
      rules: want.rules,
      missing,
      extra: left,
      reordered,
    });
  const keep = seen.jumps.indexOf(want.jump);
  seen.jumps.forEach((j, i) => i !== keep && ops.push(jump('delete', j)));
  if (keep < 0) ops.push(jump('add', want.jump));
  return ops;
}
