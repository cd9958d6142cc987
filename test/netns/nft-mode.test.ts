// nftables mode ("EnableNFTables") on a real kernel, dual-stack: the first
// pass after an iptables-mode run writes both families' tables, one `nft -f -`
// transaction each, before it removes twill's iptables and ip6tables chains
// and jumps; with the reconciler running and `nft monitor` watching
// twill's tables, a deleted table, a flushed table, a deleted rule and a
// changed chain policy are each put back whole (within 3 s here; how fast is
// the bench's business), while another table's churn asks for nothing; and
// back in iptables mode the first pass puts the chains back, then removes the
// tables. Everything
// runs in namespaces this file makes and removes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { desiredState, type BackendInput } from '../../src/dataplane/desired.ts';
import { runMonitors } from '../../src/dataplane/monitor.ts';
import type { Touch } from '../../src/dataplane/kernel-event.ts';
import { pollNftTables } from '../../src/dataplane/nft-monitor.ts';
import type { NftTableSpec } from '../../src/dataplane/model.ts';
import { nftTableMatches, wantedNftTables } from '../../src/dataplane/nft.ts';
import { observeNftTable } from '../../src/dataplane/nft-observe.ts';
import { Reconciler } from '../../src/dataplane/reconciler.ts';
import type { PassReport } from '../../src/dataplane/pass-report.ts';
import type { RunOptions, Runner } from '../../src/exec/runner.ts';
import { NetnsLab, nsForwarding, nsRunner, nsWatch, sweepStaleNetns } from '../../lab/kit/netns.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { backendInput, peerLease } from '../helpers/dataplane.ts';
import { captureLog } from '../helpers/log.ts';

/** A repair must be seen within this (the target is 1 s; a loaded machine gets slack). */
const REPAIR_BOUND_MS = 3_000;

let lab: NetnsLab;
let runner: Runner;
let ns: string;
let input: BackendInput;
let want: NftTableSpec[];
/** every command run through `runner`, with its input */
const calls: { argv: string; input: string | undefined }[] = [];
const signal = new AbortController().signal;

const sh = (argv: string[]): Promise<unknown> => runner(argv[0] as string, argv.slice(1));
const exists = (argv: string[]): Promise<boolean> =>
  sh(argv).then(
    () => true,
    () => false,
  );
/** Whether both of twill's tables are exactly as wanted. */
const tablesRight = async (): Promise<boolean> => {
  const seen = await Promise.all(want.map((t) => observeNftTable(runner, t, signal)));
  return want.every((t, i) => nftTableMatches(t, seen[i] ?? null));
};
/** The handle of the first rule of twill's IPv4 forward chain. */
const ruleHandle = async (): Promise<string> => {
  const out = await runner('nft', ['-a', 'list', 'chain', 'ip', 'twill-ipv4', 'forward']);
  const handle = /accept # handle (\d+)/.exec(out.stdout)?.[1];
  if (!handle) throw new Error(`no rule in twill-ipv4 forward: ${out.stdout}`);
  return handle;
};
const twillChains = async (): Promise<boolean[]> =>
  Promise.all(
    [
      ['iptables', '-t', 'nat', '-S', 'TWILL-POSTRTG'],
      ['iptables', '-t', 'filter', '-S', 'TWILL-FWD'],
      ['ip6tables', '-t', 'nat', '-S', 'TWILL-POSTRTG'],
      ['ip6tables', '-t', 'filter', '-S', 'TWILL-FWD'],
    ].map(exists),
  );
const jumps = async (): Promise<string> =>
  (
    await Promise.all(
      [
        ['iptables', '-t', 'nat', '-S', 'POSTROUTING'],
        ['iptables', '-t', 'filter', '-S', 'FORWARD'],
        ['ip6tables', '-t', 'nat', '-S', 'POSTROUTING'],
        ['ip6tables', '-t', 'filter', '-S', 'FORWARD'],
      ].map((a) => runner(a[0] as string, a.slice(1)).then((r) => r.stdout)),
    )
  )
    .join('\n')
    .split('\n')
    .filter((l) => l.includes('TWILL-'))
    .join('\n');
/** A write of the masquerade: an `nft -f -` or a restore. */
const isMasqWrite = (c: { argv: string }): boolean =>
  c.argv === 'nft -f -' || /^ip6?tables-restore /.test(c.argv);
const ownTables = async (): Promise<string[]> =>
  (await runner('nft', ['list', 'tables'])).stdout
    .split('\n')
    .filter((l) => l.includes('twill-'))
    .sort();

function reconciler(o: { nftables: boolean }): Reconciler {
  const log = captureLog();
  return new Reconciler({
    runner,
    logger: log.logger,
    desired: () => desiredState(input),
    ensureForwarding: nsForwarding(ns),
    resyncMs: 600_000,
    settleMs: 5,
    nftables: o.nftables,
    nftCommand: true,
  });
}

beforeAll(async () => {
  await sweepStaleNetns();
  lab = new NetnsLab();
  ns = await lab.add('nftmode');
  const other = await lab.add('nftmode-peer');
  await lab.link(
    { ns, dev: 'eth0', cidr: '10.123.0.2/24' },
    { ns: other, dev: 'eth0', cidr: '10.123.0.1/24' },
  );
  const inner = nsRunner(ns);
  runner = (file: string, args: readonly string[], opts?: RunOptions) => {
    calls.push({ argv: [file, ...args].join(' '), input: opts?.input });
    return inner(file, args, opts);
  };
  input = backendInput({
    backend: 'vxlan',
    ipv6: true,
    peers: [1, 2].map((n) => peerLease(n, { vxlan: true, ipv6: true })),
  });
  want = wantedNftTables(desiredState(input).masq, desiredState(input).masq6);
  expect(want).toHaveLength(2);
});
afterAll(() => lab.destroy());

describe('switching from iptables mode to nftables mode', () => {
  it("writes each table in its own transaction, then removes twill's iptables chains and jumps", async () => {
    expect((await reconciler({ nftables: false }).pass(signal)).failures).toEqual([]);
    expect(await twillChains()).toEqual([true, true, true, true]);
    expect(await jumps()).not.toBe('');
    calls.length = 0;
    const r = reconciler({ nftables: true });
    const first = await r.pass(signal);
    expect(first.failures).toEqual([]);
    const writes = calls.filter(isMasqWrite);
    expect(writes.map((c) => c.argv)).toEqual([
      'nft -f -',
      'nft -f -',
      'iptables-restore --noflush -w 5',
      'ip6tables-restore --noflush -w 5',
    ]);
    expect(writes[0]?.input).toContain('table ip twill-ipv4 {');
    expect(writes[0]?.input).not.toContain('twill-ipv6');
    expect(writes[1]?.input).toContain('table ip6 twill-ipv6 {');
    expect(await twillChains()).toEqual([false, false, false, false]);
    expect(await jumps()).toBe('');
    expect(await tablesRight()).toBe(true);
    // later passes read the tables, not the iptables chains, and find nothing to do
    calls.length = 0;
    const second = await r.pass(signal);
    expect(second.ops).toEqual([]);
    expect(calls.filter((c) => /tables/.test(c.argv.split(' ')[0] ?? ''))).toEqual([]);
    expect(calls.filter((c) => c.argv.startsWith('nft -j list table')).map((c) => c.argv)).toEqual([
      'nft -j list table ip twill-ipv4',
      'nft -j list table ip6 twill-ipv6',
    ]);
  });
});

describe('drift in nftables mode, repaired by the running reconciler', () => {
  const ctl = new AbortController();
  let loops: Promise<unknown>;
  let r: Reconciler;
  let passes: PassReport[];

  beforeAll(async () => {
    passes = [];
    const log = captureLog();
    r = new Reconciler({
      runner,
      logger: log.logger,
      desired: () => desiredState(input),
      ensureForwarding: nsForwarding(ns),
      resyncMs: 600_000,
      settleMs: 5,
      nftables: true,
      onPass: (p) => passes.push(p),
    });
    loops = Promise.all([
      r.run(ctl.signal),
      runMonitors(
        {
          watch: nsWatch(ns),
          logger: log.logger,
          ctx: { underlay: 'eth0', ipv6: true, nftables: true },
          nft: true,
          onEvent: (s: string, t?: Touch) => (t ? r.touch(s, t) : r.trigger(s)),
        },
        ctl.signal,
      ),
    ]);
    await waitFor(() => r.lastPass()?.converged === true, {
      timeoutMs: 10_000,
      what: 'first converged pass',
    });
    // the monitors' start-up passes settle
    await new Promise((res) => setTimeout(res, 500));
  });
  afterAll(async () => {
    ctl.abort();
    await loops;
  });

  /** The handle of the first rule of the table whose line holds every one of `parts`. */
  const handleOf = async (family: string, table: string, ...parts: string[]): Promise<string> => {
    const text = (await runner('nft', ['-a', 'list', 'table', family, table])).stdout;
    const line = text.split('\n').find((l) => parts.every((p) => l.includes(p)));
    const handle = /# handle (\d+)/.exec(line ?? '')?.[1];
    if (handle === undefined) throw new Error(`no rule with ${parts.join(', ')} in ${text}`);
    return handle;
  };

  const DAMAGE: [string, () => Promise<string[]>][] = [
    ['the IPv4 table deleted', async () => ['nft', 'delete', 'table', 'ip', 'twill-ipv4']],
    ['the IPv4 table flushed', async () => ['nft', 'flush', 'table', 'ip', 'twill-ipv4']],
    ['the IPv6 table flushed', async () => ['nft', 'flush', 'table', 'ip6', 'twill-ipv6']],
    [
      'one masquerade rule deleted',
      async () => [
        'nft',
        'delete',
        'rule',
        'ip',
        'twill-ipv4',
        'postrtg',
        'handle',
        await handleOf('ip', 'twill-ipv4', 'daddr != 224.0.0.0/4'),
      ],
    ],
    [
      'one IPv6 forward rule deleted',
      async () => [
        'nft',
        'delete',
        'rule',
        'ip6',
        'twill-ipv6',
        'forward',
        'handle',
        await handleOf('ip6', 'twill-ipv6', 'ip6 daddr', 'accept'),
      ],
    ],
    [
      "the forward chain's policy turned to drop",
      async () => [
        'nft',
        'add',
        'chain',
        'ip',
        'twill-ipv4',
        'forward',
        '{ type filter hook forward priority filter; policy drop; }',
      ],
    ],
  ];

  it.each(DAMAGE)('%s: the table is put back whole', async (_what, damage) => {
    expect(await tablesRight()).toBe(true);
    const before = passes.length;
    await sh(await damage());
    const broken = performance.now();
    // (no read of the broken table here: the repair may beat it)
    await waitFor(tablesRight, { timeoutMs: 10_000, what: 'the table put back', everyMs: 10 });
    expect(performance.now() - broken).toBeLessThanOrEqual(REPAIR_BOUND_MS);
    // the pass that wrote it reports once its `nft -f -` has been reaped, maybe after our read
    const repaired = () => passes.slice(before).find((p) => p.ops.length > 0);
    await waitFor(() => repaired() !== undefined, { timeoutMs: 5_000, what: 'the repair pass' });
    const repair = repaired();
    expect(repair?.kind).toBe('chains');
    expect(repair?.ops.every((op) => op.kind === 'nft')).toBe(true);
    // its own echo settles with nothing more to do
    await waitFor(() => passes.at(-1)?.ops.length === 0, {
      timeoutMs: 5_000,
      what: 'a pass with nothing to do',
    });
  });

  it("another table's churn asks for no pass", async () => {
    await new Promise((res) => setTimeout(res, 300));
    const before = passes.length;
    const lines = ['table ip churn {', '\tchain c {'];
    for (let i = 0; i < 200; i++) lines.push(`\t\tip saddr 10.9.${i}.1 counter accept`);
    for (let round = 0; round < 3; round++)
      await runner('nft', ['-f', '-'], {
        input: `${['add table ip churn', 'delete table ip churn', ...lines, '\t}', '}'].join('\n')}\n`,
      });
    await new Promise((res) => setTimeout(res, 500));
    expect(passes.length).toBe(before);
    await sh(['nft', 'delete', 'table', 'ip', 'churn']);
  });
});

describe('a flooded nft monitor in nftables mode', () => {
  it("gives way to the listing of twill's tables, which still sees a deleted table", async () => {
    const log = captureLog();
    const r = new Reconciler({
      runner,
      logger: log.logger,
      desired: () => desiredState(input),
      ensureForwarding: nsForwarding(ns),
      resyncMs: 600_000,
      settleMs: 5,
      nftables: true,
    });
    const ctl = new AbortController();
    const onEvent = (s: string, t?: Touch): void => (t ? r.touch(s, t) : r.trigger(s));
    const poll = (sig: AbortSignal): Promise<void> =>
      pollNftTables(
        {
          runner,
          logger: log.logger,
          masq: () => desiredState(input).masq,
          masq6: () => desiredState(input).masq6,
          intervalMs: 1_000,
          onDrift: onEvent,
        },
        sig,
      );
    const loops = Promise.all([
      r.run(ctl.signal),
      runMonitors(
        {
          watch: nsWatch(ns),
          logger: log.logger,
          ctx: { underlay: 'eth0', ipv6: true, nftables: true },
          nft: true,
          onEvent,
          poll,
          flood: { bytes: 20_000, windowMs: 5_000, cooldownMs: 600_000 },
        },
        ctl.signal,
      ),
    ]);
    try {
      await waitFor(() => r.lastPass()?.converged === true, {
        timeoutMs: 10_000,
        what: 'first converged pass',
      });
      const lines = ['table ip churn {', '\tchain c {'];
      for (let i = 0; i < 500; i++) lines.push(`\t\tip saddr 10.9.${i % 250}.${i >> 1} accept`);
      for (let round = 0; round < 2; round++)
        await runner('nft', ['-f', '-'], {
          input: `${['add table ip churn', 'delete table ip churn', ...lines, '\t}', '}'].join('\n')}\n`,
        });
      await waitFor(() => log.lines.some((l) => l.msg.startsWith('nft monitor flooded')), {
        timeoutMs: 10_000,
        what: 'flood noticed',
      });
      // the listing's first full round is in
      await new Promise((res) => setTimeout(res, 1_500));
      await sh(['nft', 'delete', 'table', 'ip', 'twill-ipv4']);
      const broken = performance.now();
      await waitFor(tablesRight, { timeoutMs: 10_000, what: 'the table put back', everyMs: 10 });
      expect(performance.now() - broken).toBeLessThanOrEqual(REPAIR_BOUND_MS);
      // the listing reads twill's chains one by one: a flushed one (IPv6's, the second part) and
      // one rule deleted are changes too
      for (const cut of [
        ['nft', 'flush', 'chain', 'ip6', 'twill-ipv6', 'postrtg'],
        ['nft', 'delete', 'rule', 'ip', 'twill-ipv4', 'forward', 'handle', await ruleHandle()],
      ]) {
        // (the verification pass after a repair, which reads every table, is over by then)
        await new Promise((res) => setTimeout(res, 1_000));
        await sh(cut);
        const cutAt = performance.now();
        expect(await tablesRight(), cut.join(' ')).toBe(false);
        await waitFor(tablesRight, { timeoutMs: 10_000, what: cut.join(' '), everyMs: 10 });
        expect(performance.now() - cutAt, cut.join(' ')).toBeLessThanOrEqual(REPAIR_BOUND_MS);
      }
    } finally {
      ctl.abort();
      await loops;
      await sh(['nft', 'delete', 'table', 'ip', 'churn']).catch(() => undefined);
    }
  });
});

describe('switching back to iptables mode', () => {
  it('removes the tables and puts the chains back', async () => {
    expect(await ownTables()).toEqual(['table ip twill-ipv4', 'table ip6 twill-ipv6']);
    const r = reconciler({ nftables: false });
    calls.length = 0;
    expect((await r.pass(signal)).failures).toEqual([]);
    // the chains are back before the tables go: no moment without masquerade
    const writes = calls.filter(isMasqWrite);
    expect(writes.map((c) => `${c.argv} ${c.input?.split('\n').at(-2) ?? ''}`)).toEqual([
      'iptables-restore --noflush -w 5 COMMIT',
      'ip6tables-restore --noflush -w 5 COMMIT',
      'nft -f - delete table ip twill-ipv4',
      'nft -f - delete table ip6 twill-ipv6',
    ]);
    expect(await ownTables()).toEqual([]);
    expect(await twillChains()).toEqual([true, true, true, true]);
    // once removed, later passes do not look for them again
    calls.length = 0;
    expect((await r.pass(signal)).ops).toEqual([]);
    expect(calls.filter((c) => c.argv.startsWith('nft'))).toEqual([]);
  });
});
