// Doctor checks of the masquerade's mode (pure). In nftables mode ("EnableNFTables": true): the nft
// command is there (twill writes its tables with it), and twill's tables `ip twill-ipv4` and `ip6
// twill-ipv6` (those of the families that are on) hold exactly what twill writes, compared as the
// daemon compares them (nft.ts). In either mode, what a run in the other mode left: twill's
// iptables and ip6tables chains and jumps in nftables mode, twill's nftables tables in iptables
// mode (and in nftables mode the table of a family that is off). The daemon's first full pass
// removes such leftovers, so they warn.
import { FWD_CHAIN, MASQ_CHAIN } from '../dataplane/masq.ts';
import type { NftTableSpec } from '../dataplane/model.ts';
import {
  NFT_TABLES,
  nftTable4,
  nftTable6,
  nftTableDiffers,
  nftTableLabel,
  type NftTableSeen,
} from '../dataplane/nft.ts';
import {
  verdicts,
  type ChainsFact,
  type CheckResult,
  type DoctorFacts,
  type NftFact,
  type Read,
} from './facts.ts';
import { families, masqMode, ownLeases } from './overlay.ts';

const STORE_FIX =
  'check that the lease store is up and reachable: --etcd-endpoints and etcd, or with --kube-subnet-mgr the kubeconfig, the API server and RBAC';
const ROOT_FIX = "run twill doctor as root, in the node's network namespace";
const FIRST_PASS = 'start twill run (its first full pass removes them), or by hand:';

/** The nft fact, or why it cannot be used. */
function nftRead(f: DoctorFacts): Read<NftFact> {
  return f.nft ?? { ok: false, error: 'not read' };
}

export function checkNftCommand(f: DoctorFacts): CheckResult {
  const v = verdicts('nft-command');
  const nft = nftRead(f);
  // the error names the call that failed: `nft --version`, or a table's `nft -j list table` (an
  // nft without JSON support, a kernel without nf_tables)
  if (!nft.ok) return v.warn(`could not run nft: ${nft.error}`, ROOT_FIX);
  if (nft.value.version === undefined)
    return v.fail(
      'EnableNFTables is on, but the nft command is not installed: twill run refuses to start (it writes its masquerade and forward tables with nft)',
      'install nftables where twill runs (Debian: apt-get install nftables), or set "EnableNFTables": false in the network config',
    );
  return v.ok(`EnableNFTables is on; ${nft.value.version}`);
}

/** The rules less `fully-random`, not compared (as ip6tables-chains leaves --random-fully). */
function plain<T extends { readonly rules: readonly string[] }>(c: T): T {
  return { ...c, rules: c.rules.map((r) => r.replace(' fully-random', '')) };
}

/**
 * The tables twill writes on this node, from the network config (the families that are on), our
 * lease's subnets (the store's word first, subnet.env's second) and --ip-masq (subnet.env); a
 * reason when one of them is not known.
 */
function wantedTables(f: DoctorFacts): { tables: NftTableSpec[] } | { skipped: string } {
  const config = f.store.ok ? f.store.value.config : undefined;
  const env = f.subnetEnv.ok ? f.subnetEnv.value : undefined;
  const skipped = {
    skipped:
      'skipped: needs the network (from the store), our subnet and --ip-masq (from subnet.env)',
  };
  if (!config || !env) return skipped;
  const own = ownLeases(f);
  const tables: NftTableSpec[] = [];
  const flags = { ipMasq: env.ipMasq, randomFully: false };
  if (config.ipv4) {
    const subnet = own.find((l) => l.subnet)?.subnet ?? env.subnet;
    if (!subnet) return skipped;
    tables.push(nftTable4({ ...flags, network: config.ipv4.network, subnet }));
  }
  if (config.ipv6) {
    const subnet = own.find((l) => l.subnet6)?.subnet6 ?? env.subnet6;
    if (!subnet) return skipped;
    tables.push(nftTable6({ ...flags, network: config.ipv6.network, subnet }));
  }
  return { tables };
}

/** What differs in one table, as the daemon's diff sees it, `fully-random` aside. */
function tableProblems(want: NftTableSpec, seen: NftTableSeen | null): string[] {
  const w = { ...want, chains: want.chains.map(plain) };
  const s = seen === null ? null : { ...seen, chains: seen.chains.map(plain) };
  return nftTableDiffers(w, s);
}

export function checkNftTables(f: DoctorFacts): CheckResult {
  const v = verdicts('nft-tables');
  const nft = nftRead(f);
  if (!nft.ok) return v.warn(`could not list twill's nftables tables: ${nft.error}`, ROOT_FIX);
  if (nft.value.version === undefined) return v.warn('skipped: no nft command (see nft-command)');
  const want = wantedTables(f);
  if ('skipped' in want)
    return v.warn(
      want.skipped,
      'check that the lease store is reachable and twill run has written subnet.env',
    );
  const problems: string[] = [];
  for (const t of want.tables) {
    const label = nftTableLabel(t);
    const seen = nft.value.tables.get(label);
    if (seen === undefined) problems.push(`${label} was not read`);
    else
      problems.push(
        ...tableProblems(t, seen).map((p) => (p.startsWith(label) ? p : `${label}: ${p}`)),
      );
  }
  const masq = want.tables.some((t) => t.chains.length > 1);
  if (problems.length > 0)
    return v.fail(
      `${problems.join('; ')}: pod traffic is ${masq ? 'not masqueraded or ' : ''}not forwarded as twill means`,
      'start twill run (it rewrites its tables within a second), and look for nft errors in its log',
    );
  const names = want.tables.map(nftTableLabel).join(' and ');
  return v.ok(
    `${names} as twill writes them (${masq ? 'postrtg and forward' : 'forward only: --ip-masq is off'})`,
  );
}

/** twill's chains, with where each hangs. */
const CHAINS = [
  { key: 'postrouting', table: 'nat', parent: 'POSTROUTING', chain: MASQ_CHAIN },
  { key: 'forward', table: 'filter', parent: 'FORWARD', chain: FWD_CHAIN },
] as const;

/**
 * What one tool holds of twill's chains and jumps, in words, and the commands that remove them;
 * with `named`, each finding names the tool (where the caller's sentence does not).
 */
export function chainLeftovers(
  tool: 'iptables' | 'ip6tables',
  seen: ChainsFact,
  o: { readonly named: boolean },
): { found: string[]; fixes: string[] } {
  const found: string[] = [];
  const fixes: string[] = [];
  const inTool = o.named ? ` in ${tool}` : '';
  const tablePrefix = o.named ? `${tool} ` : '';
  for (const c of CHAINS) {
    const { jumps, rules } = seen[c.key];
    if (jumps.length > 0)
      found.push(
        `${jumps.length} jump${jumps.length === 1 ? '' : 's'} from ${c.parent} to ${c.chain}${inTool}`,
      );
    fixes.push(...jumps.map((j) => `${tool} -t ${c.table} -D ${c.parent} ${j}`));
    if (rules !== null) {
      found.push(`chain ${c.chain} in ${tablePrefix}${c.table} (${rules.length} rules)`);
      fixes.push(`${tool} -t ${c.table} -F ${c.chain} && ${tool} -t ${c.table} -X ${c.chain}`);
    }
  }
  return { found, fixes };
}

/** iptables mode: twill's nftables tables an nftables-mode run left. */
function nftLeftovers(f: DoctorFacts): CheckResult {
  const v = verdicts('masq-leftovers');
  const nft = nftRead(f);
  if (!nft.ok) return v.warn(`could not look for twill's nftables tables: ${nft.error}`, ROOT_FIX);
  if (nft.value.version === undefined)
    return v.ok("iptables mode; no nft command, so no nftables table of twill's");
  const found = NFT_TABLES.filter((t) => (nft.value.tables.get(nftTableLabel(t)) ?? null) !== null);
  if (found.length > 0)
    return v.warn(
      `iptables mode, but an nftables-mode run left ${found.map(nftTableLabel).join(' and ')}: their rules masquerade and accept besides twill's chains`,
      `${FIRST_PASS} ${found.map((t) => `nft delete table ${t.family} ${t.name}`).join('; ')}`,
    );
  return v.ok(
    `iptables mode: no nftables table of twill's (${NFT_TABLES.map(nftTableLabel).join(', ')})`,
  );
}

/**
 * nftables mode: twill's chains an iptables-mode run left in the tools of the families that are on
 * (an IPv6-only node's iptables chains are ipv4-leftovers'), and twill's table of a family that is
 * off.
 */
function iptablesLeftovers(f: DoctorFacts): CheckResult {
  const v = verdicts('masq-leftovers');
  const fam = families(f);
  const found: string[] = [];
  const fixes: string[] = [];
  const unread: string[] = [];
  const tools = [
    ...(fam.ipv4 ? [{ tool: 'iptables' as const, read: f.ip4Chains }] : []),
    ...(fam.ipv6 ? [{ tool: 'ip6tables' as const, read: f.ip6Chains }] : []),
  ];
  for (const { tool, read } of tools) {
    if (read === undefined || !read.ok) {
      unread.push(`${tool}: ${read === undefined ? 'not read' : read.error}`);
      continue;
    }
    const l = chainLeftovers(tool, read.value, { named: true });
    found.push(...l.found);
    fixes.push(...l.fixes);
  }
  const nft = nftRead(f);
  if (nft.ok) {
    const off = NFT_TABLES.filter((t) => (t.family === 'ip' ? !fam.ipv4 : !fam.ipv6));
    for (const t of off)
      if ((nft.value.tables.get(nftTableLabel(t)) ?? null) !== null) {
        found.push(`${nftTableLabel(t)} (IPv${t.family === 'ip' ? 4 : 6} is off)`);
        fixes.push(`nft delete table ${t.family} ${t.name}`);
      }
  } else unread.push(`nft: ${nft.error}`);
  if (found.length > 0)
    return v.warn(
      `nftables mode, but an earlier run left ${found.join('; ')}`,
      `${FIRST_PASS} ${fixes.join('; ')}`,
    );
  if (unread.length > 0) return v.warn(`could not look everywhere: ${unread.join('; ')}`, ROOT_FIX);
  const where = tools.map((t) => t.tool).join(' or ');
  return v.ok(`nftables mode: no TWILL-POSTRTG/TWILL-FWD chain or jump in ${where}`);
}

export function checkMasqLeftovers(f: DoctorFacts): CheckResult {
  const mode = masqMode(f);
  if (mode === 'nftables') return iptablesLeftovers(f);
  if (mode === 'iptables') return nftLeftovers(f);
  return verdicts('masq-leftovers').warn(
    'skipped: the network config (EnableNFTables: iptables or nftables mode) was not read',
    STORE_FIX,
  );
}
