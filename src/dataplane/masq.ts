// The masquerade and forward chains: flannel's rule set in twill's own
// chains (TWILL-POSTRTG in nat, TWILL-FWD in filter), rendered exactly as
// `iptables -S` prints them so observed and desired compare as text, and
// the iptables-restore --noflush lines that make a chain match: the chain is
// re-declared (which empties it) and refilled, so order and duplicates are
// repaired together; the jump from the built-in chain is kept single and
// appended, like flannel's, so policy chains earlier in FORWARD still apply.
import { formatCidr } from '../net/ipv4.ts';
import type { MasqSpec, ObservedChain, Op } from './model.ts';

export const MASQ_CHAIN = 'TWILL-POSTRTG';
export const FWD_CHAIN = 'TWILL-FWD';
const MASQ_COMMENT = '-m comment --comment "twill masq"';
const FWD_COMMENT = '-m comment --comment "twill forward"';

export interface ChainSpec {
  readonly table: 'nat' | 'filter';
  readonly parent: 'POSTROUTING' | 'FORWARD';
  readonly chain: string;
  /** the jump rule without the leading "-A <parent>" */
  readonly jump: string;
  /** `iptables -S <chain>` lines, "-A …", in order; null when the chain must not exist */
  readonly rules: readonly string[] | null;
}

export function masqRules(spec: MasqSpec): string[] {
  const net = formatCidr(spec.network);
  const sub = formatCidr(spec.subnet);
  const masq = `-j MASQUERADE${spec.randomFully ? ' --random-fully' : ''}`;
  const a = `-A ${MASQ_CHAIN}`;
  return [
    `${a} -m mark --mark 0x4000/0x4000 ${MASQ_COMMENT} -j RETURN`,
    `${a} -s ${sub} -d ${net} ${MASQ_COMMENT} -j RETURN`,
    `${a} -s ${net} -d ${sub} ${MASQ_COMMENT} -j RETURN`,
    `${a} ! -s ${net} -d ${sub} ${MASQ_COMMENT} -j RETURN`,
    `${a} -s ${net} ! -d 224.0.0.0/4 ${MASQ_COMMENT} ${masq}`,
    `${a} ! -s ${net} -d ${net} ${MASQ_COMMENT} ${masq}`,
  ];
}

export function forwardRules(spec: MasqSpec): string[] {
  const net = formatCidr(spec.network);
  return [
    `-A ${FWD_CHAIN} -s ${net} ${FWD_COMMENT} -j ACCEPT`,
    `-A ${FWD_CHAIN} -d ${net} ${FWD_COMMENT} -j ACCEPT`,
  ];
}

/**
 * Both chains as they should be. The forward chain is kept whatever --ip-masq says, like flannel's.
 */
export function chainSpecs(spec: MasqSpec): { postrouting: ChainSpec; forward: ChainSpec } {
  return {
    postrouting: {
      table: 'nat',
      parent: 'POSTROUTING',
      chain: MASQ_CHAIN,
      jump: `${MASQ_COMMENT} -j ${MASQ_CHAIN}`,
      rules: spec.ipMasq ? masqRules(spec) : null,
    },
    forward: {
      table: 'filter',
      parent: 'FORWARD',
      chain: FWD_CHAIN,
      jump: `${FWD_COMMENT} -j ${FWD_CHAIN}`,
      rules: forwardRules(spec),
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

function chainOp(want: ChainSpec, action: Op['action'], line: string): Op {
  return { kind: 'masquerade', action, phase: 'iptables', line, table: want.table };
}

/** The restore lines (without the *table / COMMIT frame) that make one chain right. */
export function diffChain(want: ChainSpec, seen: ObservedChain): Op[] {
  const ops: Op[] = [];
  const op = (action: Op['action'], line: string): Op => chainOp(want, action, line);
  if (want.rules === null) {
    for (const jump of seen.jumps) ops.push(op('delete', `-D ${want.parent} ${jump}`));
    if (seen.rules !== null)
      ops.push(op('delete', `:${want.chain} - [0:0]`), op('delete', `-X ${want.chain}`));
    return ops;
  }
  const same =
    seen.rules !== null &&
    seen.rules.length === want.rules.length &&
    seen.rules.every((r, i) => r === want.rules?.[i]);
  if (!same) {
    ops.push(op(seen.rules === null ? 'add' : 'change', `:${want.chain} - [0:0]`));
    for (const rule of want.rules) ops.push(op(seen.rules === null ? 'add' : 'change', rule));
  }
  // exactly one jump, ours: extra or foreign-shaped jumps go (deleted as listed, so the delete
  // matches)
  const keep = seen.jumps.indexOf(want.jump);
  seen.jumps.forEach(
    (jump, i) => i !== keep && ops.push(op('delete', `-D ${want.parent} ${jump}`)),
  );
  if (keep < 0) ops.push(op('add', `-A ${want.parent} ${want.jump}`));
  return ops;
}

/** Frames the iptables ops into one iptables-restore --noflush payload ('' when none). */
export function renderRestore(ops: readonly Op[]): string {
  const parts: string[] = [];
  for (const table of ['nat', 'filter'] as const) {
    const lines = ops.filter((o) => o.phase === 'iptables' && o.table === table).map((o) => o.line);
    if (lines.length > 0) parts.push(`*${table}`, ...lines, 'COMMIT');
  }
  return parts.length === 0 ? '' : `${parts.join('\n')}\n`;
}
