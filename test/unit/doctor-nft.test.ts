// The doctor in nftables mode ("EnableNFTables": true) and the other mode's leftovers, from facts:
// a healthy nftables-mode node passes nft-command and nft-tables; a missing nft command, a missing
// or changed table fail them; twill's iptables chains left by an iptables-mode run warn, as do
// twill's nftables tables in iptables mode; with the store unreachable the mode is unknown. And
// gather over a fake runner in nftables mode: the nft reads, and no iptables is no chain.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { chainSpecs, chainSpecs6 } from '../../src/dataplane/masq.ts';
import type { NftTableSpec } from '../../src/dataplane/model.ts';
import { nftTable4, nftTable6, nftTableLabel, type NftTableSeen } from '../../src/dataplane/nft.ts';
import { doctorExitCode, runChecks } from '../../src/doctor/checks.ts';
import { failed, got, type DoctorFacts, type NftFact } from '../../src/doctor/facts.ts';
import { gather } from '../../src/doctor/gather.ts';
import { CommandError, type Runner } from '../../src/exec/runner.ts';
import { parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
import {
  DUAL,
  healthyDualFacts,
  healthyFacts,
  healthyV6OnlyFacts,
  resultOf,
} from '../helpers/doctor.ts';

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`bad cidr ${text}`);
  return c;
}

function cidr6(text: string): Cidr6 {
  const c = parseCidr6(text, { strict: true });
  if (!c) throw new Error(`bad cidr ${text}`);
  return c;
}

/** A table as `nft -j list table` reads it back when it holds exactly `spec`. */
function seenAs(spec: NftTableSpec): NftTableSeen {
  return {
    family: spec.family,
    name: spec.name,
    chains: spec.chains.map((c) => ({ ...c, rules: [...c.rules] })),
    others: 0,
  };
}

const TABLE4 = nftTable4({
  ipMasq: true,
  network: cidr('10.244.0.0/16'),
  subnet: cidr('10.244.3.0/24'),
  randomFully: true,
});
const TABLE6 = nftTable6({
  ipMasq: true,
  network: cidr6(DUAL.network6),
  subnet: cidr6(DUAL.subnet6),
  randomFully: false,
});
const NO_CHAINS = { postrouting: { jumps: [], rules: null }, forward: { jumps: [], rules: null } };

function nftFact(tables: Record<string, NftTableSeen | null>): NftFact {
  return { version: 'nftables v1.0.6 (Lester Gooch #5)', tables: new Map(Object.entries(tables)) };
}

/** `f` with the store's config in nftables mode. */
function inNftMode(f: DoctorFacts): DoctorFacts {
  if (!f.store.ok) throw new Error('fixture');
  const config = { ...f.store.value.config, nftables: true };
  return { ...f, store: got({ ...f.store.value, config }) };
}

/** The healthy IPv4 node in nftables mode: its table as twill writes it, no iptables chain. */
function healthyNftFacts(): DoctorFacts {
  return {
    ...inNftMode(healthyFacts()),
    nft: got(nftFact({ 'table ip twill-ipv4': seenAs(TABLE4), 'table ip6 twill-ipv6': null })),
    ip4Chains: got(NO_CHAINS),
  };
}

function healthyNftDualFacts(): DoctorFacts {
  return {
    ...inNftMode(healthyDualFacts()),
    nft: got(
      nftFact({ 'table ip twill-ipv4': seenAs(TABLE4), 'table ip6 twill-ipv6': seenAs(TABLE6) }),
    ),
    ip4Chains: got(NO_CHAINS),
    ip6Chains: got(NO_CHAINS),
  };
}

/** Runs the checks on `f`; expects only `check` not ok, with `verdict`. */
function only(
  f: DoctorFacts,
  check: string,
  verdict: 'warn' | 'fail',
): { detail: string; fix: string } {
  const results = runChecks(f);
  expect(results.filter((r) => r.verdict !== 'ok').map((r) => r.check)).toEqual([check]);
  const r = resultOf(results, check);
  expect(r.verdict).toBe(verdict);
  expect(r.fix).not.toBe('');
  expect(doctorExitCode(results)).toBe(verdict === 'fail' ? 1 : 0);
  return r;
}

describe('doctor, nftables mode', () => {
  it('a healthy node: every check ok, the nft checks after the common ones', () => {
    const results = runChecks(healthyNftFacts());
    expect(results.filter((r) => r.verdict !== 'ok')).toEqual([]);
    expect(results.map((r) => r.check).slice(-4)).toEqual([
      'foreign-overlay',
      'nft-command',
      'nft-tables',
      'masq-leftovers',
    ]);
    expect(resultOf(results, 'nft-command').detail).toBe(
      'EnableNFTables is on; nftables v1.0.6 (Lester Gooch #5)',
    );
    expect(resultOf(results, 'nft-tables').detail).toBe(
      'table ip twill-ipv4 as twill writes them (postrtg and forward)',
    );
    expect(resultOf(results, 'masq-leftovers').detail).toBe(
      'nftables mode: no TWILL-POSTRTG/TWILL-FWD chain or jump in iptables',
    );
  });

  it('no iptables installed: iptables-backend and vxlan-port are n/a, and never ask to install it', () => {
    const missing = failed<never>('iptables --version: spawn iptables ENOENT');
    const f: DoctorFacts = {
      ...healthyNftFacts(),
      iptables: missing,
      inputChain: failed('iptables -w 5 -S INPUT: spawn iptables ENOENT'),
      noIptables: true,
    };
    const results = runChecks(f);
    expect(results.filter((r) => r.verdict !== 'ok')).toEqual([]);
    expect(resultOf(results, 'iptables-backend').detail).toMatch(
      /^n\/a: nftables mode, and no iptables command/,
    );
    expect(resultOf(results, 'vxlan-port').detail).toMatch(
      /^n\/a: nftables mode, and no iptables command/,
    );
    // the same node in iptables mode needs iptables
    const ipt = runChecks({ ...f, store: healthyFacts().store });
    expect(resultOf(ipt, 'iptables-backend')).toMatchObject({
      verdict: 'warn',
      fix: 'install iptables',
    });
    expect(resultOf(ipt, 'vxlan-port').fix).toContain('with iptables installed');
    // iptables there but not readable (not root): a warning, still no "install"
    const unread = runChecks({
      ...f,
      noIptables: undefined,
      iptables: failed('iptables --version: exit code 4: Permission denied'),
      inputChain: failed('iptables -w 5 -S INPUT: exit code 4: Permission denied'),
    });
    for (const check of ['iptables-backend', 'vxlan-port']) {
      const r = resultOf(unread, check);
      expect(r.verdict).toBe('warn');
      expect(r.fix).not.toContain('install');
    }
  });

  it('an iptables-mode node runs no nft check', () => {
    const checks = runChecks(healthyFacts()).map((r) => r.check);
    expect(checks).not.toContain('nft-command');
    expect(checks).not.toContain('nft-tables');
    expect(checks).toContain('masq-leftovers');
  });

  it('the nft command missing fails nft-command, and nft-tables is skipped', () => {
    const f = { ...healthyNftFacts(), nft: got({ version: undefined, tables: new Map() }) };
    const results = runChecks(f);
    expect(resultOf(results, 'nft-command')).toMatchObject({
      verdict: 'fail',
      fix: expect.stringContaining('install nftables'),
    });
    expect(resultOf(results, 'nft-tables')).toMatchObject({
      verdict: 'warn',
      detail: 'skipped: no nft command (see nft-command)',
    });
    expect(doctorExitCode(results)).toBe(1);
  });

  it('the table missing fails nft-tables', () => {
    const f = {
      ...healthyNftFacts(),
      nft: got(nftFact({ 'table ip twill-ipv4': null, 'table ip6 twill-ipv6': null })),
    };
    expect(only(f, 'nft-tables', 'fail').detail).toBe(
      'table ip twill-ipv4 is missing: pod traffic is not masqueraded or not forwarded as twill means',
    );
  });

  it('a rule deleted, a chain flushed or an extra chain fails nft-tables, naming it', () => {
    const seen = seenAs(TABLE4);
    const [postrtg, forward] = seen.chains;
    if (!postrtg || !forward) throw new Error('fixture');
    const withChains = (chains: NftTableSeen['chains']): DoctorFacts => ({
      ...healthyNftFacts(),
      nft: got(
        nftFact({ 'table ip twill-ipv4': { ...seen, chains }, 'table ip6 twill-ipv6': null }),
      ),
    });
    const gone = postrtg.rules[4] ?? '';
    expect(
      only(
        withChains([{ ...postrtg, rules: postrtg.rules.filter((r) => r !== gone) }, forward]),
        'nft-tables',
        'fail',
      ).detail,
    ).toContain(
      `table ip twill-ipv4: chain postrtg: missing rule "${gone.replace(' fully-random', '')}"`,
    );
    expect(
      only(withChains([postrtg, { ...forward, rules: [] }]), 'nft-tables', 'fail').detail,
    ).toContain('chain forward: missing rule "ip saddr 10.244.0.0/16 accept"');
    expect(
      only(withChains([...seen.chains, { name: 'other', rules: [] }]), 'nft-tables', 'fail').detail,
    ).toContain("table ip twill-ipv4: chain other is not twill's");
  });

  it('takes masquerade with or without fully-random alike (it depends on the node)', () => {
    const plain = nftTable4({
      ipMasq: true,
      network: cidr('10.244.0.0/16'),
      subnet: cidr('10.244.3.0/24'),
      randomFully: false,
    });
    const f = {
      ...healthyNftFacts(),
      nft: got(nftFact({ 'table ip twill-ipv4': seenAs(plain), 'table ip6 twill-ipv6': null })),
    };
    expect(runChecks(f).filter((r) => r.verdict !== 'ok')).toEqual([]);
  });

  it('with --ip-masq off only the forward chain is wanted: a postrtg chain fails', () => {
    const base = healthyNftFacts();
    if (!base.subnetEnv.ok || !base.subnetEnv.value) throw new Error('fixture');
    const f = { ...base, subnetEnv: got({ ...base.subnetEnv.value, ipMasq: false }) };
    expect(only(f, 'nft-tables', 'fail').detail).toContain("chain postrtg is not twill's");
    const forwardOnly = nftTable4({
      ipMasq: false,
      network: cidr('10.244.0.0/16'),
      subnet: cidr('10.244.3.0/24'),
      randomFully: false,
    });
    const ok = {
      ...f,
      nft: got(
        nftFact({ 'table ip twill-ipv4': seenAs(forwardOnly), 'table ip6 twill-ipv6': null }),
      ),
    };
    expect(resultOf(runChecks(ok), 'nft-tables')).toMatchObject({
      verdict: 'ok',
      detail: 'table ip twill-ipv4 as twill writes them (forward only: --ip-masq is off)',
    });
  });

  it("warns about twill's iptables chains and jumps an iptables-mode run left, with the commands", () => {
    const specs = chainSpecs({
      ipMasq: true,
      network: cidr('10.244.0.0/16'),
      subnet: cidr('10.244.3.0/24'),
      randomFully: true,
    });
    const f = {
      ...healthyNftFacts(),
      ip4Chains: got({
        postrouting: { jumps: [specs.postrouting.jump], rules: specs.postrouting.rules },
        forward: { jumps: [], rules: null },
      }),
    };
    const r = only(f, 'masq-leftovers', 'warn');
    expect(r.detail).toBe(
      'nftables mode, but an earlier run left 1 jump from POSTROUTING to TWILL-POSTRTG in iptables; chain TWILL-POSTRTG in iptables nat (6 rules)',
    );
    expect(r.fix).toContain(`iptables -t nat -D POSTROUTING ${specs.postrouting.jump}`);
    expect(r.fix).toContain('iptables -t nat -F TWILL-POSTRTG && iptables -t nat -X TWILL-POSTRTG');
  });

  it('warns when the chains could not be read', () => {
    const f = {
      ...healthyNftFacts(),
      ip4Chains: failed<never>('exit code 4: the xtables lock is held'),
    };
    expect(only(f, 'masq-leftovers', 'warn').detail).toBe(
      'could not look everywhere: iptables: exit code 4: the xtables lock is held',
    );
  });

  it('dual-stack: both tables checked, ip6tables-chains n/a, ip6tables leftovers warn', () => {
    const results = runChecks(healthyNftDualFacts());
    expect(results.filter((r) => r.verdict !== 'ok')).toEqual([]);
    expect(resultOf(results, 'nft-tables').detail).toBe(
      'table ip twill-ipv4 and table ip6 twill-ipv6 as twill writes them (postrtg and forward)',
    );
    expect(resultOf(results, 'ip6tables-chains').detail).toMatch(/^nftables mode: twill keeps no/);
    expect(resultOf(results, 'masq-leftovers').detail).toBe(
      'nftables mode: no TWILL-POSTRTG/TWILL-FWD chain or jump in iptables or ip6tables',
    );
    const specs = chainSpecs6({
      ipMasq: true,
      network: cidr6(DUAL.network6),
      subnet: cidr6(DUAL.subnet6),
      randomFully: true,
    });
    const left = {
      ...healthyNftDualFacts(),
      ip6Chains: got({
        postrouting: { jumps: [], rules: null },
        forward: { jumps: [specs.forward.jump, specs.forward.jump], rules: specs.forward.rules },
      }),
    };
    expect(only(left, 'masq-leftovers', 'warn').detail).toBe(
      'nftables mode, but an earlier run left 2 jumps from FORWARD to TWILL-FWD in ip6tables; chain TWILL-FWD in ip6tables filter (2 rules)',
    );
    const t6 = nftTableLabel(TABLE6);
    const missing6 = {
      ...healthyNftDualFacts(),
      nft: got(nftFact({ 'table ip twill-ipv4': seenAs(TABLE4), [t6]: null })),
    };
    expect(only(missing6, 'nft-tables', 'fail').detail).toContain(
      'table ip6 twill-ipv6 is missing',
    );
  });

  it("IPv6 only: twill's IPv4 table is a leftover", () => {
    const f = {
      ...inNftMode(healthyV6OnlyFacts()),
      nft: got(
        nftFact({ 'table ip twill-ipv4': seenAs(TABLE4), 'table ip6 twill-ipv6': seenAs(TABLE6) }),
      ),
      ip6Chains: got(NO_CHAINS),
    };
    const r = only(f, 'masq-leftovers', 'warn');
    expect(r.detail).toBe(
      'nftables mode, but an earlier run left table ip twill-ipv4 (IPv4 is off)',
    );
    expect(r.fix).toContain('nft delete table ip twill-ipv4');
    expect(resultOf(runChecks(f), 'nft-tables').detail).toBe(
      'table ip6 twill-ipv6 as twill writes them (postrtg and forward)',
    );
  });
});

describe('doctor, iptables mode: the nftables leftovers', () => {
  it("warns about twill's tables an nftables-mode run left", () => {
    const f = {
      ...healthyFacts(),
      nft: got(nftFact({ 'table ip twill-ipv4': seenAs(TABLE4), 'table ip6 twill-ipv6': null })),
    };
    const r = only(f, 'masq-leftovers', 'warn');
    expect(r.detail).toMatch(/^iptables mode, but an nftables-mode run left table ip twill-ipv4:/);
    expect(r.fix).toContain('nft delete table ip twill-ipv4');
  });

  it('is ok with no table of twill, or no nft command at all', () => {
    expect(resultOf(runChecks(healthyFacts()), 'masq-leftovers').detail).toBe(
      "iptables mode: no nftables table of twill's (table ip twill-ipv4, table ip6 twill-ipv6)",
    );
    const none = { ...healthyFacts(), nft: got({ version: undefined, tables: new Map() }) };
    expect(resultOf(runChecks(none), 'masq-leftovers')).toMatchObject({
      verdict: 'ok',
      detail: "iptables mode; no nft command, so no nftables table of twill's",
    });
  });

  it('with the store unreachable the mode is unknown: skipped, and no nft check', () => {
    const f = { ...healthyFacts(), store: failed<never>('lease store unreachable (etcd)') };
    const results = runChecks(f);
    expect(resultOf(results, 'masq-leftovers')).toMatchObject({
      verdict: 'warn',
      detail: expect.stringContaining('skipped: the network config (EnableNFTables'),
    });
    expect(results.map((r) => r.check)).not.toContain('nft-tables');
  });
});

describe('gather, nftables mode', () => {
  it('reads nft and twill’s tables; a node without iptables has no chain of twill', async () => {
    const config = parseNetConfig(
      '{"Network":"10.244.0.0/16","EnableNFTables":true,"Backend":{"Type":"vxlan"}}',
    );
    const calls: string[] = [];
    const runner: Runner = async (file, args) => {
      const line = [file, ...args].join(' ');
      calls.push(line);
      const out = (v: unknown): { stdout: string; stderr: string } => ({
        stdout: typeof v === 'string' ? v : JSON.stringify(v),
        stderr: '',
      });
      if (file === 'iptables' || file === 'iptables-legacy-save')
        throw new CommandError({
          command: [file],
          exitCode: undefined,
          stderr: '',
          reason: 'spawn iptables ENOENT',
        });
      if (line === 'nft --version') return out('nftables v1.0.6 (Lester Gooch #5)\n');
      if (line === 'nft -j list table ip twill-ipv4')
        return out({
          nftables: [
            { metainfo: { version: '1.0.6' } },
            { table: { family: 'ip', name: 'twill-ipv4', handle: 1 } },
            {
              chain: {
                family: 'ip',
                table: 'twill-ipv4',
                name: 'forward',
                handle: 1,
                type: 'filter',
                hook: 'forward',
                prio: 0,
                policy: 'accept',
              },
            },
          ],
        });
      if (line.startsWith('nft -j list table'))
        throw new CommandError({
          command: [file, ...args],
          exitCode: 1,
          stderr: 'Error: No such file or directory\n',
          reason: 'exit code 1',
        });
      if (line.startsWith('ip ')) return out([]);
      throw new CommandError({ command: [file], exitCode: 1, stderr: '', reason: 'exit code 1' });
    };
    const f = await gather(
      {
        runner,
        readText: async () => '1\n',
        readStore: async () => ({ config, leases: [] }),
      },
      {
        iface: { iface: [], ifaceRegex: [], publicIp: undefined },
        subnetFile: '/nonexistent/subnet.env',
        bridge: 'cni0',
        procSysNet: '/proc/sys/net',
      },
      AbortSignal.timeout(5000),
    );
    expect(f.ip4Chains).toEqual(got(NO_CHAINS));
    expect(f.nft?.ok).toBe(true);
    const nft = f.nft?.ok ? f.nft.value : undefined;
    expect(nft?.version).toBe('nftables v1.0.6 (Lester Gooch #5)');
    expect(nft?.tables.get('table ip6 twill-ipv6')).toBeNull();
    expect(nft?.tables.get('table ip twill-ipv4')?.chains.map((c) => c.name)).toEqual(['forward']);
    expect(calls).toContain('nft -j list table ip twill-ipv4');
    // the iptables chains were asked for, and the missing tool counted as none
    expect(calls.some((c) => c.startsWith('iptables -w 5 -t nat -S TWILL-POSTRTG'))).toBe(true);
    // and told apart from a failed read: the iptables checks are n/a in nftables mode
    expect(f.noIptables).toBe(true);
    const results = runChecks(f);
    for (const check of ['iptables-backend', 'vxlan-port'])
      expect(resultOf(results, check)).toMatchObject({
        verdict: 'ok',
        detail: expect.stringMatching(/^n\/a: nftables mode/),
      });
  });
});
