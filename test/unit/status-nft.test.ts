// twill status and the masquerade's mode, pure: in nftables mode twill's tables are compared with
// what a pass writes (missing, differing), twill's iptables chains are leftovers (extra), and the
// text names the mode and the tables; in iptables mode twill's tables are leftovers, and the
// chains are what they always were.
import { describe, expect, it } from 'vitest';
import { chainSpecs } from '../../src/dataplane/masq.ts';
import type { NftTableSpec, ObservedState } from '../../src/dataplane/model.ts';
import { desiredState } from '../../src/dataplane/desired.ts';
import { nftTable4, nftTable6, type NftTableSeen } from '../../src/dataplane/nft.ts';
import type { IptablesLeftovers } from '../../src/dataplane/nft-observe.ts';
import { buildStatus, type StatusInput } from '../../src/status/report.ts';
import { renderStatus } from '../../src/status/text.ts';
import { backendInput, masq6Of, masqOf, peerLease } from '../helpers/dataplane.ts';

const PEERS = [peerLease(1, { vxlan: false })];
const input = backendInput({ backend: 'host-gw', peers: PEERS });
const want = desiredState(input);

/** A table as `nft -j list table` reads it back when it holds exactly `spec`. */
function seenAs(spec: NftTableSpec): NftTableSeen {
  return {
    family: spec.family,
    name: spec.name,
    chains: spec.chains.map((c) => ({ ...c, rules: [...c.rules] })),
    others: 0,
  };
}

const TABLE4 = seenAs(nftTable4(masqOf(want)));
const NONE = { jumps: [], rules: null };
const NO_LEFTOVERS: IptablesLeftovers = {
  postrouting: NONE,
  forward: NONE,
  postrouting6: NONE,
  forward6: NONE,
};

/** The kernel holding exactly the routes (host-gw: no device), chains not read (nftables mode). */
const entries: ObservedState = {
  links: [],
  routes: want.routes,
  neighs: [],
  fdb: [],
  postrouting: undefined,
  forward: undefined,
};

function status(o: {
  nftables: boolean;
  tables: Record<string, NftTableSeen | null>;
  leftovers?: IptablesLeftovers;
  observed?: ObservedState;
}): ReturnType<typeof buildStatus> {
  const i: StatusInput = {
    config: { ...input.config, nftables: o.nftables },
    self: input.self,
    records: PEERS.map((l) => ({ key: l.key, ok: true as const, lease: l })),
    choice: input.choice,
    ipMasq: true,
    randomFully: true,
    observed: o.observed ?? entries,
    nftTables: new Map(Object.entries(o.tables)),
    ...(o.leftovers ? { leftovers: o.leftovers } : {}),
    daemon: { running: true, detail: 'running' },
  };
  return buildStatus(i);
}

const healthy = {
  nftables: true,
  tables: { 'table ip twill-ipv4': TABLE4, 'table ip6 twill-ipv6': null },
  leftovers: NO_LEFTOVERS,
};

describe('twill status, nftables mode', () => {
  it('is in sync when the table is what twill writes and no chain of twill is left', () => {
    const r = status(healthy);
    expect(r.inSync).toBe(true);
    expect(r.mode).toBe('nftables');
    expect(r.nftables).toEqual({ ipv4: 'ok', ipv6: 'none' });
    expect(r.masquerade).toEqual({ postrouting: 'ok', forward: 'ok' });
    expect(r.diff).toEqual({ missing: [], extra: [], different: [] });
    const text = renderStatus(r);
    expect(text).toContain(
      'mode:       nftables (EnableNFTables: twill keeps the masquerade in its tables)\nmasquerade: table ip twill-ipv4 ok\n',
    );
    expect(text).not.toContain('iptables:');
    expect(text).not.toContain('TWILL-POSTRTG');
  });

  it('says a missing table, and is not in sync', () => {
    const r = status({ ...healthy, tables: { ...healthy.tables, 'table ip twill-ipv4': null } });
    expect(r.inSync).toBe(false);
    expect(r.nftables.ipv4).toBe('missing');
    expect(r.diff.missing).toEqual(['table ip twill-ipv4']);
    expect(renderStatus(r)).toContain('masquerade: table ip twill-ipv4 missing\n');
  });

  it('names a rule that differs', () => {
    const [postrtg, forward] = TABLE4.chains;
    if (!postrtg || !forward) throw new Error('fixture');
    const changed = { ...TABLE4, chains: [postrtg, { ...forward, rules: forward.rules.slice(1) }] };
    const r = status({ ...healthy, tables: { ...healthy.tables, 'table ip twill-ipv4': changed } });
    expect(r.inSync).toBe(false);
    expect(r.nftables.ipv4).toBe('1 difference(s)');
    expect(r.diff.different).toEqual([
      'table ip twill-ipv4: chain forward: missing rule "ip saddr 10.244.0.0/16 accept"',
    ]);
  });

  it("shows twill's iptables chains an iptables-mode run left as extra, and not in sync", () => {
    const specs = chainSpecs(masqOf(want));
    const r = status({
      ...healthy,
      leftovers: {
        ...NO_LEFTOVERS,
        postrouting: { jumps: [specs.postrouting.jump], rules: specs.postrouting.rules },
      },
    });
    expect(r.inSync).toBe(false);
    expect(r.masquerade).toEqual({ postrouting: '2 extra', forward: 'ok' });
    expect(r.diff.extra).toEqual([
      'chain nat TWILL-POSTRTG (nftables mode)',
      'nat: 1 jump(s) from POSTROUTING to TWILL-POSTRTG, want none',
    ]);
    expect(renderStatus(r)).toContain('iptables:   TWILL-POSTRTG 2 extra; TWILL-FWD ok\n');
  });

  it("a table that cannot be read is unknown, and the chains' state unknown when not read", () => {
    const r = status({ nftables: true, tables: {} });
    expect(r.nftables).toEqual({ ipv4: 'unknown', ipv6: 'unknown' });
    expect(r.masquerade).toEqual({ postrouting: 'unknown', forward: 'unknown' });
    expect(renderStatus(r)).toContain('masquerade: table ip twill-ipv4 unknown');
  });

  it('dual-stack: both tables', () => {
    const dual = backendInput({ backend: 'host-gw', peers: [], ipv6: true });
    const w = desiredState(dual);
    const r = buildStatus({
      config: { ...dual.config, nftables: true },
      self: dual.self,
      records: [],
      choice: dual.choice,
      ipMasq: true,
      randomFully: true,
      observed: { ...entries, routes: [] },
      nftTables: new Map([
        ['table ip twill-ipv4', seenAs(nftTable4(masqOf(w)))],
        ['table ip6 twill-ipv6', seenAs(nftTable6(masq6Of(w)))],
      ]),
      leftovers: NO_LEFTOVERS,
      daemon: { running: false, detail: 'not running' },
    });
    expect(r.inSync).toBe(true);
    expect(r.nftables).toEqual({ ipv4: 'ok', ipv6: 'ok' });
    expect(renderStatus(r)).toContain(
      'masquerade: table ip twill-ipv4 ok; table ip6 twill-ipv6 ok\n',
    );
  });
});

describe('twill status, iptables mode', () => {
  const specs = chainSpecs(masqOf(want));
  const withChains: ObservedState = {
    ...entries,
    postrouting: { jumps: [specs.postrouting.jump], rules: specs.postrouting.rules },
    forward: { jumps: [specs.forward.jump], rules: specs.forward.rules },
  };

  it('names the mode and the chains as ever; no table, no nftables line', () => {
    const r = status({
      nftables: false,
      tables: { 'table ip twill-ipv4': null, 'table ip6 twill-ipv6': null },
      observed: withChains,
    });
    expect(r.inSync).toBe(true);
    expect(r.mode).toBe('iptables');
    expect(r.nftables).toEqual({ ipv4: 'none', ipv6: 'none' });
    const text = renderStatus(r);
    expect(text).toContain(
      'mode:       iptables (twill keeps the masquerade in its chains)\nmasquerade: TWILL-POSTRTG ok; TWILL-FWD ok\n',
    );
    expect(text).not.toContain('nftables:');
  });

  it("shows twill's table an nftables-mode run left as extra, and not in sync", () => {
    const r = status({
      nftables: false,
      tables: { 'table ip twill-ipv4': TABLE4, 'table ip6 twill-ipv6': null },
      observed: withChains,
    });
    expect(r.inSync).toBe(false);
    expect(r.nftables.ipv4).toBe('extra');
    expect(r.diff.extra).toEqual(['table ip twill-ipv4 (iptables mode)']);
    expect(renderStatus(r)).toContain(
      "nftables:   table ip twill-ipv4 extra (an nftables-mode run's; twill run removes it)\n",
    );
  });

  it('without the nft command the tables are unknown, and do not count against sync', () => {
    const r = status({ nftables: false, tables: {}, observed: withChains });
    expect(r.inSync).toBe(true);
    expect(r.nftables).toEqual({ ipv4: 'unknown', ipv6: 'unknown' });
  });
});
