// Reading `iptables -S INPUT` cheaply enough to tell whether vxlan's UDP
// port is dropped: each rule is reduced to its protocol, destination ports,
// target and "other conditions" (source, interface, conntrack state …), and
// the chain is walked in order as the kernel would for a UDP packet to the
// port from an unknown peer. Jumps to other chains are not followed.

export interface InputRule {
  /** the rule as listed */
  readonly text: string;
  readonly target: string | undefined;
  /** protocol match; undefined: any protocol */
  readonly proto: { readonly neg: boolean; readonly value: string } | undefined;
  /** destination port match; undefined: any port */
  readonly dports:
    { readonly neg: boolean; readonly ranges: readonly (readonly [number, number])[] } | undefined;
  /** other matches, as listed ("-s 10.0.0.0/8", "-m conntrack --ctstate RELATED,ESTABLISHED") */
  readonly conditions: readonly string[];
}

/** Splits a rule into words, keeping "double quoted" words whole. */
export function ruleWords(text: string): string[] {
  return [...text.matchAll(/"((?:[^"\\]|\\.)*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? '');
}

function portRanges(text: string): [number, number][] {
  return text.split(',').map((p) => {
    const [lo, hi] = p.split(':').map(Number);
    return [lo ?? 0, hi ?? lo ?? 0];
  });
}

const PLAIN_MODULES = new Set(['udp', 'tcp', 'multiport', 'comment']);

/** Parses one `-A INPUT …` line. */
export function parseInputRule(text: string): InputRule {
  const words = ruleWords(text).slice(2);
  let target: string | undefined;
  let proto: InputRule['proto'];
  let dports: InputRule['dports'];
  const conditions: string[] = [];
  let neg = false;
  for (let i = 0; i < words.length && target === undefined; i++) {
    const w = words[i] ?? '';
    const value = words[i + 1] ?? '';
    if (w === '!') {
      neg = true;
      continue;
    }
    if (w === '-p' || w === '--protocol') proto = { neg, value };
    else if (
      w === '--dport' ||
      w === '--destination-port' ||
      w === '--dports' ||
      w === '--destination-ports'
    )
      dports = { neg, ranges: portRanges(value) };
    else if (w === '-j' || w === '--jump' || w === '-g' || w === '--goto') target = value;
    else if (w === '-m' || w === '--match') {
      if (!PLAIN_MODULES.has(value)) conditions.push(`-m ${value}`);
    } else if (w === '--comment') {
      // not a match
    } else if (w.startsWith('-')) {
      const last = conditions.length - 1;
      const piece = `${neg ? '! ' : ''}${w}${value.startsWith('-') || value === '!' ? '' : ` ${value}`}`;
      // a module's options belong to the module ("-m conntrack --ctstate …")
      if (w.startsWith('--') && last >= 0 && conditions[last]?.startsWith('-m '))
        conditions[last] += ` ${piece}`;
      else conditions.push(piece);
    } else continue;
    neg = false;
    if (words[i + 1] !== undefined && !(words[i + 1] ?? '').startsWith('-')) i++;
  }
  return { text, target, proto, dports, conditions };
}

/** True when the rule can match a UDP packet to `port`. */
export function hitsUdpPort(rule: InputRule, port: number): boolean {
  const p = rule.proto;
  const udp =
    p === undefined ||
    (p.neg ? p.value !== 'udp' && p.value !== '17' : ['udp', '17', 'all'].includes(p.value));
  if (!udp) return false;
  const d = rule.dports;
  if (d === undefined) return true;
  const inside = d.ranges.some(([lo, hi]) => port >= lo && port <= hi);
  return d.neg ? !inside : inside;
}

/**
 * An ACCEPT that cannot apply to a new vxlan packet from a peer (loopback only, or
 * established/related only).
 */
export function irrelevantAccept(rule: InputRule): boolean {
  return rule.conditions.some((c) => c === '-i lo' || (/--(ct)?state /.test(c) && !/NEW/.test(c)));
}

/** The rule names the UDP port itself (so a conditional ACCEPT was written for it). */
export function namesPort(rule: InputRule): boolean {
  return (
    rule.dports !== undefined && !rule.dports.neg && rule.proto?.value === 'udp' && !rule.proto.neg
  );
}

/** The chain policy from `-P INPUT <policy>`, undefined when absent. */
export function inputPolicy(listing: string): string | undefined {
  return /^-P INPUT (\S+)/m.exec(listing)?.[1];
}

export function inputRules(listing: string): InputRule[] {
  return listing
    .split('\n')
    .filter((l) => l.startsWith('-A INPUT '))
    .map(parseInputRule);
}
