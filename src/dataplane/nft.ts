// nftables mode ("EnableNFTables": true): the masquerade and forward rules
// of masq.ts kept in twill's own nftables table per family (`table ip
// twill-ipv4`, `table ip6 twill-ipv6`), pure. Each table has two base chains,
// postrtg (nat, postrouting, srcnat) with masqText's rules in the same order
// and forward (filter, forward, filter) with forwardText's; with --ip-masq
// off there is no postrtg chain, as TWILL-POSTRTG must not exist then. Rules
// are written in nft's syntax and read back from `nft -j list table` as the
// same text (nft-parse.ts), so wanted and seen compare as values. A table is
// always written whole, in one `nft -f -` transaction that creates it if
// missing, deletes it and declares it again: no reader ever sees half a
// table, and a flushed or partly deleted one is rebuilt whole.
import { formatCidr } from '../net/ipv4.ts';
import { formatCidr6 } from '../net/ipv6.ts';
import type {
  MasqSpec,
  MasqSpec6,
  NftChainSpec,
  NftFamily,
  NftOp,
  NftTableName,
  NftTableSpec,
} from './model.ts';

export const NFT_TABLE4 = 'twill-ipv4';
export const NFT_TABLE6 = 'twill-ipv6';

/** A table as read (nft-parse.ts): its chains, and how many objects of other kinds it holds. */
export interface NftTableSeen extends NftTableName {
  readonly chains: readonly {
    readonly name: string;
    /** absent for a regular (non-base) chain */
    readonly type?: string | undefined;
    readonly hook?: string | undefined;
    readonly prio?: number | undefined;
    readonly policy?: string | undefined;
    readonly rules: readonly string[];
  }[];
  /** sets, maps, counters, flowtables…: twill's tables hold none */
  readonly others: number;
}

export const POSTRTG_CHAIN = 'postrtg';
export const FORWARD_CHAIN = 'forward';
/** the priorities' names in nft's syntax, by number */
const PRIO_NAMES: Record<number, string> = { 100: 'srcnat', 0: 'filter' };

interface FamilyText {
  readonly family: NftFamily;
  readonly net: string;
  readonly sub: string;
  readonly multicast: string;
}

/** masq.ts's masquerade rules in nft's syntax, same order and meaning. */
function nftMasqRules(t: FamilyText, randomFully: boolean): string[] {
  const { family: f, net, sub, multicast } = t;
  const masq = `masquerade${randomFully ? ' fully-random' : ''}`;
  return [
    'meta mark & 0x4000 == 0x4000 return',
    `${f} saddr ${sub} ${f} daddr ${net} return`,
    `${f} saddr ${net} ${f} daddr ${sub} return`,
    `${f} saddr != ${net} ${f} daddr ${sub} return`,
    `${f} saddr ${net} ${f} daddr != ${multicast} ${masq}`,
    `${f} saddr != ${net} ${f} daddr ${net} ${masq}`,
  ];
}

/** masq.ts's forward rules in nft's syntax. */
function nftForwardRules(t: Pick<FamilyText, 'family' | 'net'>): string[] {
  return [`${t.family} saddr ${t.net} accept`, `${t.family} daddr ${t.net} accept`];
}

function tableOf(
  t: FamilyText & { readonly name: string },
  o: { ipMasq: boolean; randomFully: boolean },
): NftTableSpec {
  const postrtg: NftChainSpec = {
    name: POSTRTG_CHAIN,
    type: 'nat',
    hook: 'postrouting',
    prio: 100,
    policy: 'accept',
    rules: nftMasqRules(t, o.randomFully),
  };
  const forward: NftChainSpec = {
    name: FORWARD_CHAIN,
    type: 'filter',
    hook: 'forward',
    prio: 0,
    policy: 'accept',
    rules: nftForwardRules(t),
  };
  // the forward chain is kept whatever --ip-masq says, like TWILL-FWD
  return { family: t.family, name: t.name, chains: o.ipMasq ? [postrtg, forward] : [forward] };
}

/** The IPv4 table, `table ip twill-ipv4`, from the iptables chains' inputs. */
export function nftTable4(spec: MasqSpec): NftTableSpec {
  const t = {
    family: 'ip' as const,
    name: NFT_TABLE4,
    net: formatCidr(spec.network),
    sub: formatCidr(spec.subnet),
    multicast: '224.0.0.0/4',
  };
  return tableOf(t, spec);
}

/** The IPv6 table, `table ip6 twill-ipv6`, from the ip6tables chains' inputs. */
export function nftTable6(spec: MasqSpec6): NftTableSpec {
  const t = {
    family: 'ip6' as const,
    name: NFT_TABLE6,
    net: formatCidr6(spec.network),
    sub: formatCidr6(spec.subnet),
    multicast: 'ff00::/8',
  };
  return tableOf(t, spec);
}

/**
 * The tables twill wants, IPv4 first: one per family that is on (the desired state's masq, masq6;
 * null for a family that is off).
 */
export function wantedNftTables(masq: MasqSpec | null, masq6: MasqSpec6 | null): NftTableSpec[] {
  return [...(masq ? [nftTable4(masq)] : []), ...(masq6 ? [nftTable6(masq6)] : [])];
}

/** Both of twill's table names, whatever the node runs (what a cleanup or a switch removes). */
export const NFT_TABLES: readonly NftTableName[] = [
  { family: 'ip', name: NFT_TABLE4 },
  { family: 'ip6', name: NFT_TABLE6 },
];

/** The table's name as nft prints it: "table ip twill-ipv4". */
export const nftTableLabel = (t: NftTableName): string => `table ${t.family} ${t.name}`;

/** A chain's declaration as nft's syntax words it ("regular chain" for one without a hook). */
function chainHead(c: {
  readonly type?: string | undefined;
  readonly hook?: string | undefined;
  readonly prio?: number | undefined;
  readonly policy?: string | undefined;
}): string {
  if (c.hook === undefined) return 'regular chain';
  const prio = c.prio === undefined ? '?' : (PRIO_NAMES[c.prio] ?? String(c.prio));
  return `type ${c.type ?? '?'} hook ${c.hook} priority ${prio}; policy ${c.policy ?? '?'}`;
}

/**
 * What differs between the table twill wants and the one read (null: absent), for people (the
 * pass log, `twill doctor`, `twill status`); empty when it matches.
 */
export function nftTableDiffers(want: NftTableSpec, seen: NftTableSeen | null): string[] {
  if (seen === null) return [`${nftTableLabel(want)} is missing`];
  const out: string[] = [];
  if (seen.others > 0) out.push(`holds ${seen.others} object(s) other than chains`);
  for (const c of seen.chains)
    if (!want.chains.some((w) => w.name === c.name)) out.push(`chain ${c.name} is not twill's`);
  for (const w of want.chains) {
    const c = seen.chains.find((x) => x.name === w.name);
    if (c === undefined) {
      out.push(`chain ${w.name} is missing`);
      continue;
    }
    if (chainHead(c) !== chainHead(w))
      out.push(`chain ${w.name} is "${chainHead(c)}", want "${chainHead(w)}"`);
    const left = [...c.rules];
    let missing = 0;
    for (const r of w.rules) {
      const at = left.indexOf(r);
      if (at >= 0) left.splice(at, 1);
      else {
        missing++;
        out.push(`chain ${w.name}: missing rule "${r}"`);
      }
    }
    for (const r of left) out.push(`chain ${w.name}: extra rule "${r}"`);
    if (missing + left.length === 0 && c.rules.some((r, i) => r !== w.rules[i]))
      out.push(`chain ${w.name}: rules out of order`);
  }
  return out;
}

/** Whether the table read (null: absent) is exactly the one twill wants. */
export function nftTableMatches(want: NftTableSpec, seen: NftTableSeen | null): boolean {
  return nftTableDiffers(want, seen).length === 0;
}

/**
 * The ops that make twill's tables right: each wanted table that is missing or differs in any way
 * is replaced whole; each table read that is not wanted (a family turned off, or iptables mode
 * removing what an nftables-mode run left) is deleted. `seen` holds only the tables that were read
 * (a family not read is left as it is), null for one read and absent.
 */
export function diffNftTables(
  want: readonly NftTableSpec[],
  seen: ReadonlyMap<string, NftTableSeen | null>,
): NftOp[] {
  const ops: NftOp[] = [];
  for (const [key, s] of seen) {
    if (s !== null && !want.some((w) => nftTableLabel(w) === key))
      ops.push({
        kind: 'nft',
        action: 'delete',
        phase: 'nft',
        table: { family: s.family, name: s.name },
        want: null,
        differs: [],
      });
  }
  for (const w of want) {
    const s = seen.get(nftTableLabel(w));
    if (s === undefined) continue;
    const differs = nftTableDiffers(w, s);
    if (differs.length > 0)
      ops.push({
        kind: 'nft',
        action: s === null ? 'add' : 'change',
        phase: 'nft',
        table: { family: w.family, name: w.name },
        want: w,
        differs,
      });
  }
  return ops;
}

/**
 * One table's transaction lines: created if missing (so the delete cannot fail), deleted, and for
 * a replace declared again whole.
 */
export function nftTableLines(t: NftTableName, want: NftTableSpec | null): string[] {
  const label = nftTableLabel(t);
  const lines = [`add ${label}`, `delete ${label}`];
  if (want === null) return lines;
  lines.push(`${label} {`);
  for (const c of want.chains) {
    const prio = PRIO_NAMES[c.prio] ?? String(c.prio);
    lines.push(
      `\tchain ${c.name} {`,
      `\t\ttype ${c.type} hook ${c.hook} priority ${prio}; policy ${c.policy};`,
      ...c.rules.map((r) => `\t\t${r}`),
      '\t}',
    );
  }
  lines.push('}');
  return lines;
}

/** The `nft -f -` input that removes twill's tables (both families), whether they exist or not. */
export function nftRemoveText(tables: readonly NftTableName[] = NFT_TABLES): string {
  return `${tables.flatMap((t) => nftTableLines(t, null)).join('\n')}\n`;
}
