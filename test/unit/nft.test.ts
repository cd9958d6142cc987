// nftables mode's pure core: the tables twill wants per family (IPv4, IPv6,
// --ip-masq off, random-fully), the `nft -f -` transaction that replaces them
// whole (one batch for both families), reading `nft -j list table` back (real
// nft 1.0.6 output in test/fixtures) into rules that compare as values, what
// differs, the ops of a pass in either mode (the other mode's leftovers
// removed), nft's error lines mapped back, and the monitor's filter: twill's
// tables' lines ask for a look, every other table's are dropped.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { applyOps } from '../../src/dataplane/apply.ts';
import { chainSpecs, chainSpecs6, diffChain } from '../../src/dataplane/masq.ts';
import { runMonitors } from '../../src/dataplane/monitor.ts';
import type { Touch } from '../../src/dataplane/kernel-event.ts';
import type { MasqSpec, MasqSpec6, ObservedChain } from '../../src/dataplane/model.ts';
import {
  diffNftTables,
  NFT_TABLE4,
  NFT_TABLE6,
  nftRemoveText,
  nftTable4,
  nftTable6,
  nftTableDiffers,
  nftTableLabel,
  nftTableLines,
  nftTableMatches,
  wantedNftTables,
  type NftTableSeen,
} from '../../src/dataplane/nft.ts';
import {
  nftTableEventMatters,
  nftTableNeedles,
  nftTableTouch,
} from '../../src/dataplane/nft-monitor.ts';
import { listingParts } from '../../src/dataplane/nft-listing.ts';
import { nftMasqOps, observeNft } from '../../src/dataplane/nft-observe.ts';
import {
  describeNftFailures,
  nftRuleText,
  parseNftListing,
  parseNftTable,
  parseNftTableNames,
} from '../../src/dataplane/nft-parse.ts';
import { renderBatches } from '../../src/dataplane/render.ts';
import { CommandError, type LineWatcher, type Runner } from '../../src/exec/runner.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { captureLog } from '../helpers/log.ts';
import { parseCidr } from '../../src/net/ipv4.ts';
import { parseCidr6 } from '../../src/net/ipv6.ts';

const cidr = (t: string) => parseCidr(t, { strict: true }) ?? expect.fail(t);
const cidr6 = (t: string) => parseCidr6(t, { strict: true }) ?? expect.fail(t);
// what test/fixtures/nft-twill-ipv4.json and nft-twill-ipv6.json were written from
const MASQ: MasqSpec = {
  ipMasq: true,
  network: cidr('10.244.0.0/16'),
  subnet: cidr('10.244.3.0/24'),
  randomFully: true,
};
const MASQ6: MasqSpec6 = {
  ipMasq: true,
  network: cidr6('fd00:10:244::/56'),
  subnet: cidr6('fd00:10:244:3::/64'),
  randomFully: false,
};
const fixture = (name: string): string =>
  readFileSync(new URL(`../fixtures/${name}`, import.meta.url), 'utf8');
const T4 = { family: 'ip', name: NFT_TABLE4 } as const;
const T6 = { family: 'ip6', name: NFT_TABLE6 } as const;

describe('the tables twill wants', () => {
  it("IPv4: postrtg with masq.ts's rules in order, then forward", () => {
    const t = nftTable4(MASQ);
    expect(nftTableLabel(t)).toBe('table ip twill-ipv4');
    expect(t.chains.map((c) => [c.name, c.type, c.hook, c.prio, c.policy])).toEqual([
      ['postrtg', 'nat', 'postrouting', 100, 'accept'],
      ['forward', 'filter', 'forward', 0, 'accept'],
    ]);
    expect(t.chains[0]?.rules).toEqual([
      'meta mark & 0x4000 == 0x4000 return',
      'ip saddr 10.244.3.0/24 ip daddr 10.244.0.0/16 return',
      'ip saddr 10.244.0.0/16 ip daddr 10.244.3.0/24 return',
      'ip saddr != 10.244.0.0/16 ip daddr 10.244.3.0/24 return',
      'ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random',
      'ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random',
    ]);
    expect(t.chains[1]?.rules).toEqual([
      'ip saddr 10.244.0.0/16 accept',
      'ip daddr 10.244.0.0/16 accept',
    ]);
  });

  it('IPv6: the ip6 table over the IPv6 network, ff00::/8 as multicast; no fully-random when off', () => {
    const t = nftTable6(MASQ6);
    expect(nftTableLabel(t)).toBe('table ip6 twill-ipv6');
    expect(t.chains[0]?.rules.slice(3)).toEqual([
      'ip6 saddr != fd00:10:244::/56 ip6 daddr fd00:10:244:3::/64 return',
      'ip6 saddr fd00:10:244::/56 ip6 daddr != ff00::/8 masquerade',
      'ip6 saddr != fd00:10:244::/56 ip6 daddr fd00:10:244::/56 masquerade',
    ]);
    expect(t.chains[1]?.rules).toEqual([
      'ip6 saddr fd00:10:244::/56 accept',
      'ip6 daddr fd00:10:244::/56 accept',
    ]);
  });

  it('--ip-masq off: no postrtg chain, forward kept', () => {
    expect(nftTable4({ ...MASQ, ipMasq: false }).chains.map((c) => c.name)).toEqual(['forward']);
    expect(nftTable6({ ...MASQ6, ipMasq: false }).chains.map((c) => c.name)).toEqual(['forward']);
  });

  it('one table per family that is on, IPv4 first', () => {
    expect(wantedNftTables(MASQ, MASQ6).map(nftTableLabel)).toEqual([
      'table ip twill-ipv4',
      'table ip6 twill-ipv6',
    ]);
    expect(wantedNftTables(null, MASQ6).map(nftTableLabel)).toEqual(['table ip6 twill-ipv6']);
    expect(wantedNftTables(MASQ, null).map(nftTableLabel)).toEqual(['table ip twill-ipv4']);
  });
});

describe('the transaction', () => {
  it('creates if missing, deletes and declares the table whole', () => {
    expect(nftTableLines(T4, nftTable4({ ...MASQ, ipMasq: false }))).toEqual([
      'add table ip twill-ipv4',
      'delete table ip twill-ipv4',
      'table ip twill-ipv4 {',
      '\tchain forward {',
      '\t\ttype filter hook forward priority filter; policy accept;',
      '\t\tip saddr 10.244.0.0/16 accept',
      '\t\tip daddr 10.244.0.0/16 accept',
      '\t}',
      '}',
    ]);
    expect(nftTableLines(T4, nftTable4(MASQ))[4]).toBe(
      '\t\ttype nat hook postrouting priority srcnat; policy accept;',
    );
  });

  it('removes both tables, present or not', () => {
    expect(nftRemoveText()).toBe(
      'add table ip twill-ipv4\ndelete table ip twill-ipv4\nadd table ip6 twill-ipv6\ndelete table ip6 twill-ipv6\n',
    );
  });

  it('is one `nft -f -` per table written, before iptables-restore', () => {
    const ops = [
      ...diffNftTables(wantedNftTables(MASQ, MASQ6), new Map([[nftTableLabel(T4), null]])),
      ...diffNftTables(wantedNftTables(null, MASQ6), new Map([[nftTableLabel(T6), null]])),
      ...nftMasqOps(
        { masq: null, masq6: null },
        { tables: new Map(), iptables: LEFT },
        {
          nftables: true,
        },
      ),
    ];
    const batches = renderBatches(ops);
    expect(batches.map((b) => [b.file, ...b.args].join(' '))).toEqual([
      'nft -f -',
      'nft -f -',
      'iptables-restore --noflush -w 5',
      'ip6tables-restore --noflush -w 5',
    ]);
    expect(batches.slice(0, 2).map((b) => b.lines.filter((l) => l.startsWith('table ')))).toEqual([
      ['table ip twill-ipv4 {'],
      ['table ip6 twill-ipv6 {'],
    ]);
    for (const b of batches) expect(b.input).toBe(`${b.lines.join('\n')}\n`);
  });

  it('deletes a table after the restores, which put the chains back first (back to iptables mode)', () => {
    const seen = new Map([
      [nftTableLabel(T4), { ...T4, chains: [], others: 0 }],
      [nftTableLabel(T6), { ...T6, chains: [], others: 0 }],
    ]);
    const absent = { jumps: [], rules: null };
    const [specs, specs6] = [chainSpecs(MASQ), chainSpecs6(MASQ6)];
    const chains = [specs.postrouting, specs.forward, specs6.postrouting, specs6.forward].flatMap(
      (spec) => diffChain(spec, absent),
    );
    const ops = nftMasqOps({ masq: MASQ, masq6: MASQ6 }, { tables: seen }, { nftables: false });
    // the plan's order (the table deletes first) is not the run order
    const batches = renderBatches([...ops, ...chains]);
    expect(batches.map((b) => `${b.file} ${b.lines.at(-1) ?? ''}`)).toEqual([
      'iptables-restore COMMIT',
      'ip6tables-restore COMMIT',
      'nft delete table ip twill-ipv4',
      'nft delete table ip6 twill-ipv6',
    ]);
  });

  it("one table's failure is that table's: the ip6 table refused, the ip table applied", async () => {
    const ran: string[] = [];
    const runner: Runner = (file, args, opts) => {
      const input = opts?.input ?? '';
      ran.push(input.split('\n')[0] ?? '');
      // a kernel without ip6 nat: nft refuses the IPv6 table's nat chain
      if (input.includes('table ip6 twill-ipv6 {'))
        return Promise.reject(
          new CommandError({
            command: [file, ...args],
            exitCode: 1,
            stderr: '/dev/stdin:4:3-62: Error: Could not process rule: No such file or directory\n',
            reason: 'exit code 1',
          }),
        );
      return Promise.resolve({ stdout: '', stderr: '' });
    };
    const ops = diffNftTables(
      wantedNftTables(MASQ, MASQ6),
      new Map([
        [nftTableLabel(T4), null],
        [nftTableLabel(T6), null],
      ]),
    );
    const r = await applyOps(ops, { runner, signal: new AbortController().signal });
    expect(ran).toEqual(['add table ip twill-ipv4', 'add table ip6 twill-ipv6']);
    expect(r.batches).toBe(2);
    expect(r.failures).toEqual([
      'nft: chain postrtg {: Error: Could not process rule: No such file or directory',
    ]);
  });
});

describe('reading `nft -j list table`', () => {
  it("reads nft's own output back into the rules as twill writes them: both families match", () => {
    const t4 = nftTable4(MASQ);
    const seen4 = parseNftListing(fixture('nft-twill-ipv4.json'), T4);
    expect(seen4?.chains.map((c) => c.rules)).toEqual(t4.chains.map((c) => c.rules));
    expect(nftTableDiffers(t4, seen4)).toEqual([]);
    expect(nftTableMatches(t4, seen4)).toBe(true);
    const seen6 = parseNftListing(fixture('nft-twill-ipv6.json'), T6);
    expect(nftTableDiffers(nftTable6(MASQ6), seen6)).toEqual([]);
  });

  it('sees what random-fully and the subnet change', () => {
    const seen4 = parseNftListing(fixture('nft-twill-ipv4.json'), T4);
    expect(nftTableMatches(nftTable4({ ...MASQ, randomFully: false }), seen4)).toBe(false);
    const moved = nftTable4({ ...MASQ, subnet: cidr('10.244.4.0/24') });
    expect(nftTableDiffers(moved, seen4)).toContain(
      'chain postrtg: missing rule "ip saddr 10.244.4.0/24 ip daddr 10.244.0.0/16 return"',
    );
  });

  it('names what a hand-edited table holds that twill does not write', () => {
    const seen = parseNftListing(fixture('nft-twill-ipv4-tampered.json'), T4);
    expect(nftTableDiffers(nftTable4(MASQ), seen)).toEqual([
      'holds 1 object(s) other than chains',
      "chain sneaky is not twill's",
      expect.stringMatching(/^chain forward: extra rule "\?\{"counter".*ip saddr 1\.2\.3\.4 \?/),
    ]);
  });

  it('a flag spelled as a list, handles and counters compare the same', () => {
    expect(
      nftRuleText([
        { counter: { packets: 3, bytes: 9 } },
        { masquerade: { flags: ['fully-random'] } },
      ]),
    ).toBe('?{"counter":{"packets":3,"bytes":9}} masquerade fully-random');
    expect(
      nftRuleText([
        {
          match: {
            op: '==',
            left: { payload: { protocol: 'ip6', field: 'saddr' } },
            right: { prefix: { addr: 'FD00:10:244:0::', len: 56 } },
          },
        },
        { accept: null },
      ]),
    ).toBe('ip6 saddr fd00:10:244::/56 accept');
  });

  it('a listing without the table, or of another table, is absent', () => {
    expect(parseNftTable({ nftables: [] }, T4)).toBeNull();
    expect(parseNftListing(fixture('nft-twill-ipv6.json'), T4)).toBeNull();
    expect(nftTableDiffers(nftTable4(MASQ), null)).toEqual(['table ip twill-ipv4 is missing']);
  });

  it("finds twill's tables in `nft list tables`", () => {
    const text =
      'table ip nat\ntable ip twill-ipv4\ntable ip6 twill-ipv6x\ntable inet kube-proxy\n';
    expect(parseNftTableNames(text)).toEqual([T4]);
  });
});

describe('what differs', () => {
  const want = nftTable4(MASQ);
  interface Chain {
    name: string;
    type?: string;
    hook?: string;
    prio?: number;
    policy?: string;
    rules: string[];
  }
  /** The wanted table as read, changed by `f`. */
  const seenOf = (f: (c: Chain[]) => void): NftTableSeen => {
    const chains: Chain[] = want.chains.map((c) => ({ ...c, rules: [...c.rules] }));
    f(chains);
    return { ...T4, chains, others: 0 };
  };

  it('a deleted rule, a flushed chain, a deleted chain, a changed policy, rules out of order', () => {
    expect(
      nftTableDiffers(
        want,
        seenOf((c) => c[1]?.rules.pop()),
      ),
    ).toEqual(['chain forward: missing rule "ip daddr 10.244.0.0/16 accept"']);
    expect(
      nftTableDiffers(
        want,
        seenOf((c) => c[0]?.rules.splice(0)),
      ),
    ).toHaveLength(6);
    expect(
      nftTableDiffers(
        want,
        seenOf((c) => c.pop()),
      ),
    ).toEqual(['chain forward is missing']);
    const dropped = seenOf((c) => {
      const f = c[1];
      if (f) c[1] = { ...f, policy: 'drop' };
    });
    expect(nftTableDiffers(want, dropped)).toEqual([
      'chain forward is "type filter hook forward priority filter; policy drop", want "type filter hook forward priority filter; policy accept"',
    ]);
    expect(
      nftTableDiffers(
        want,
        seenOf((c) => c[1]?.rules.reverse()),
      ),
    ).toEqual(['chain forward: rules out of order']);
  });

  it('ops: replace what is missing or differs, delete what is read and not wanted, leave what was not read', () => {
    const seen = new Map<string, NftTableSeen | null>([
      [nftTableLabel(T4), seenOf((c) => c[1]?.rules.pop())],
      [nftTableLabel(T6), { ...T6, chains: [], others: 0 }],
    ]);
    const ops = diffNftTables([want], seen);
    expect(ops.map((o) => [o.action, nftTableLabel(o.table), o.differs.length])).toEqual([
      ['delete', 'table ip6 twill-ipv6', 0],
      ['change', 'table ip twill-ipv4', 1],
    ]);
    expect(diffNftTables([want], new Map([[nftTableLabel(T4), null]]))[0]?.action).toBe('add');
    expect(diffNftTables([want], new Map())).toEqual([]);
    expect(diffNftTables([want], new Map([[nftTableLabel(T4), seenOf(() => {})]]))).toEqual([]);
  });
});

const LEFT = {
  postrouting: { jumps: ['-m comment --comment "twill masq" -j TWILL-POSTRTG'], rules: ['-A x'] },
  forward: { jumps: [], rules: null },
  postrouting6: undefined,
  forward6: { jumps: [], rules: ['-A y'] },
} satisfies Record<string, ObservedChain | undefined>;

describe('a pass in either mode', () => {
  it("nftables mode: twill's iptables chains and jumps read are removed, the tables written", () => {
    const ops = nftMasqOps(
      { masq: MASQ, masq6: null },
      { tables: new Map([[nftTableLabel(T4), null]]), iptables: LEFT },
      { nftables: true },
    );
    expect(ops.map((o) => `${o.kind} ${o.action}${'ipv6' in o ? ' v6' : ''}`)).toEqual([
      'nft add',
      'jump delete',
      'chain delete',
      'chain delete v6',
    ]);
  });

  it("iptables mode: twill's tables found are deleted", () => {
    const found = new Map([[nftTableLabel(T6), { ...T6, chains: [], others: 0 }]]);
    const ops = nftMasqOps({ masq: MASQ, masq6: null }, { tables: found }, { nftables: false });
    expect(ops.map((o) => [o.kind, o.action])).toEqual([['nft', 'delete']]);
  });

  it('reads: nftables mode one table per family on, the leftovers tolerantly; iptables mode one `nft list tables` on the first pass only', async () => {
    const calls: string[] = [];
    const runner: Runner = (file, args) => {
      const cmd = [file, ...args].join(' ');
      calls.push(cmd);
      if (cmd === 'nft -j list table ip twill-ipv4')
        return Promise.resolve({ stdout: fixture('nft-twill-ipv4.json'), stderr: '' });
      if (cmd === 'nft list tables')
        return Promise.resolve({ stdout: 'table ip twill-ipv4\n', stderr: '' });
      return Promise.reject(
        new CommandError({
          command: [file, ...args],
          exitCode: 1,
          stderr: 'Error: No such file or directory',
          reason: 'exit code 1',
        }),
      );
    };
    const signal = new AbortController().signal;
    const want = { masq: MASQ, masq6: null };
    const steady = await observeNft(runner, want, { nftables: true, leftovers: false }, signal);
    expect(calls).toEqual(['nft -j list table ip twill-ipv4']);
    expect(nftMasqOps(want, steady, { nftables: true })).toEqual([]);
    calls.length = 0;
    const first = await observeNft(runner, want, { nftables: true, leftovers: true }, signal);
    expect(calls.filter((c) => c.startsWith('nft'))).toEqual([
      'nft -j list table ip twill-ipv4',
      'nft -j list table ip6 twill-ipv6',
    ]);
    expect(calls.filter((c) => !c.startsWith('nft'))).toHaveLength(8);
    expect(first.tables.get(nftTableLabel(T6))).toBeNull();
    calls.length = 0;
    const ipt = { nftables: false, nftCommand: true };
    expect((await observeNft(runner, want, { ...ipt, leftovers: false }, signal)).tables.size).toBe(
      0,
    );
    const left = await observeNft(runner, want, { ...ipt, leftovers: true }, signal);
    expect(calls).toEqual(['nft list tables']);
    expect(nftMasqOps(want, left, { nftables: false }).map((o) => o.action)).toEqual(['delete']);
    calls.length = 0;
    await observeNft(runner, want, { nftables: false, nftCommand: false, leftovers: true }, signal);
    expect(calls).toEqual([]);
  });

  it("maps nft's error lines back to the transaction's lines", async () => {
    const stderr =
      '/dev/stdin:3:17-20: Error: Could not process rule: No such file or directory\ndelete table ip nope\n                ^^^^\n';
    const lines = ['add table ip a', 'delete table ip a', 'delete table ip nope'];
    expect(describeNftFailures(stderr, lines)).toEqual([
      'delete table ip nope: Error: Could not process rule: No such file or directory',
    ]);
    expect(describeNftFailures('nft: command not found\n', lines)).toEqual([
      'nft: command not found',
    ]);
    const runner: Runner = (file, args) =>
      Promise.reject(
        new CommandError({ command: [file, ...args], exitCode: 1, stderr, reason: 'exit code 1' }),
      );
    const ops = diffNftTables(wantedNftTables(MASQ, null), new Map([[nftTableLabel(T4), null]]));
    const r = await applyOps(ops, { runner, signal: new AbortController().signal });
    expect(r.failures).toEqual([
      'nft: table ip twill-ipv4 {: Error: Could not process rule: No such file or directory',
    ]);
  });
});

describe("nft monitor in nftables mode: twill's tables only", () => {
  const dual = { ipv6: true };
  const ours = [
    'add table ip twill-ipv4',
    'delete table ip twill-ipv4',
    'add chain ip twill-ipv4 x',
    'delete chain ip twill-ipv4 forward',
    'add chain ip twill-ipv4 forward { type filter hook forward priority filter; policy drop; }',
    'delete rule ip twill-ipv4 postrtg handle 3',
    'add rule ip twill-ipv4 forward ip saddr 10.244.0.0/16 accept',
    'flush table ip twill-ipv4',
    '# ERROR: We lost some netlink events!',
  ];
  const others = [
    'add rule ip nat KUBE-SVC-ABC counter jump KUBE-SEP-XYZ',
    'delete rule ip nat TWILL-POSTRTG handle 2',
    'add element inet kube-proxy cluster-ips { 10.96.0.1 }',
    'delete table ip twill-ipv4x',
    'add rule ip other-table x comment "table ip twill-ipv4"',
    '# new generation 17 by process 19708 (nft)',
  ];

  it('own table events (incl. deleted, flushed) touch the tables; other tables nothing', () => {
    for (const line of ours) {
      expect(nftTableEventMatters(line), line).toBe(true);
      expect(
        nftTableNeedles().some((n) => line.includes(n)),
        line,
      ).toBe(true);
    }
    for (const line of others) expect(nftTableEventMatters(line, dual), line).toBe(false);
    expect(nftTableTouch()).toEqual({ kind: 'chains', tables: ['nat', 'filter'] });
  });

  it('the IPv6 table matters where IPv6 is on, the IPv4 one where IPv4 is', () => {
    const line = 'delete rule ip6 twill-ipv6 postrtg handle 3';
    expect(nftTableEventMatters(line)).toBe(false);
    expect(nftTableEventMatters(line, dual)).toBe(true);
    expect(nftTableEventMatters('delete table ip twill-ipv4', { ipv4: false, ipv6: true })).toBe(
      false,
    );
    expect(nftTableNeedles({ ipv4: false, ipv6: true })).toEqual(['ip6 twill-ipv6', '# ERROR']);
  });

  it("the listing that stands in for a flooded monitor lists twill's tables, chain by chain", () => {
    expect(listingParts({ nftables: true, ipv6: true })).toEqual([
      {
        table: 'ip',
        commands: ['list chain ip twill-ipv4 postrtg', 'list chain ip twill-ipv4 forward'],
      },
      {
        table: 'ip6',
        commands: ['list chain ip6 twill-ipv6 postrtg', 'list chain ip6 twill-ipv6 forward'],
      },
    ]);
  });

  it('runs `nft monitor` for every object kind, its own lines becoming touches', async () => {
    const seen: { file: string; args: string[]; needles: readonly string[] | undefined }[] = [];
    const watch: LineWatcher = async (file, args, opts) => {
      seen.push({ file, args: [...args], needles: opts.needles });
      if (file === 'nft')
        for (const l of [...others, 'delete table ip twill-ipv4', 'flush table ip6 twill-ipv6'])
          opts.onLine(l);
      await new Promise((r) => opts.signal.addEventListener('abort', r, { once: true }));
    };
    const events: { source: string; touch?: Touch }[] = [];
    const ctl = new AbortController();
    const running = runMonitors(
      {
        watch,
        logger: captureLog().logger,
        ctx: { underlay: 'eth0', ipv6: true, nftables: true },
        nft: true,
        onEvent: (source, touch) => events.push({ source, ...(touch ? { touch } : {}) }),
      },
      ctl.signal,
    );
    await waitFor(() => events.filter((e) => e.touch).length >= 2, {
      timeoutMs: 5_000,
      what: 'the touches',
    });
    ctl.abort();
    await running;
    expect(seen.find((w) => w.file === 'nft')).toEqual({
      file: 'nft',
      args: ['monitor'],
      needles: ['ip twill-ipv4', 'ip6 twill-ipv6', '# ERROR'],
    });
    expect(events.filter((e) => e.source === 'nft monitor')).toEqual([
      { source: 'nft monitor', touch: nftTableTouch() },
      { source: 'nft monitor', touch: nftTableTouch() },
    ]);
  });
});
