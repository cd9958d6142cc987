// Kernel events judged against the last desired state: what each asks of
// the next pass (nothing for twill's own changes coming back, the touched
// entry for a drift, an observed pass for anything else).
import { describe, expect, it } from 'vitest';
import { desiredState } from '../../src/dataplane/desired.ts';
import { indexDesired, judge } from '../../src/dataplane/judge.ts';
import { ipTouch, nftTouch } from '../../src/dataplane/monitor.ts';
import { backendInput, peerLease } from '../helpers/dataplane.ts';

// peer 4: subnet 10.244.4.0/24, public IP 10.123.0.4, VtepMAC 02:00:00:00:00:04
const known = indexDesired(
  desiredState(
    backendInput({
      backend: 'vxlan',
      peers: [peerLease(1, { vxlan: true }), peerLease(4, { vxlan: true })],
    }),
  ),
  3,
);
const j = (line: string): unknown => judge(ipTouch(line), known);

describe('judging kernel events', () => {
  it('asks for nothing when the event shows what twill wants (its own changes coming back)', () => {
    expect(j('10.244.4.0/24 via 10.244.4.0 dev twill.1 proto 151 metric 717828 onlink ')).toEqual(
      [],
    );
    expect(j('10.244.4.0 dev twill.1 lladdr 02:00:00:00:00:04 PERMANENT ')).toEqual([]);
    expect(j('10.123.0.4 dev twill.1 lladdr 02:00:00:00:00:04 NOARP PERMANENT ')).toEqual([]);
  });

  it('asks to put back just the entry a drift touched', () => {
    expect(
      j('Deleted 10.244.4.0/24 via 10.244.4.0 dev twill.1 proto 151 metric 717828 onlink '),
    ).toEqual([{ kind: 'route', key: '10.244.4.0/24' }]);
    expect(j('Deleted 10.244.4.0 dev twill.1 FAILED ')).toEqual([
      { kind: 'neigh', key: '10.244.4.0' },
    ]);
    expect(j('10.244.4.0 dev twill.1 lladdr 02:00:00:00:00:99 PERMANENT ')).toEqual([
      { kind: 'neigh', key: '10.244.4.0' },
    ]);
    expect(j('Deleted 10.123.0.4 dev twill.1 lladdr 02:00:00:00:00:04 NOARP PERMANENT ')).toEqual([
      { kind: 'fdb', key: '10.123.0.4' },
    ]);
  });

  it("asks for nothing when something twill does not want goes away, or the kernel's own entries come and go", () => {
    expect(j('Deleted 10.244.9.0/24 via 10.244.9.0 dev twill.1 proto 151 onlink ')).toEqual([]);
    // an older twill's route (metric 0) going once the one of its own metric is in
    expect(j('Deleted 10.244.4.0/24 via 10.244.4.0 dev twill.1 proto 151 onlink ')).toEqual([]);
    expect(j('10.244.9.7 dev twill.1 FAILED ')).toEqual([]);
    expect(j('Deleted 10.123.0.4 dev twill.1 lladdr 02:00:00:00:00:77 NOARP PERMANENT ')).toEqual(
      [],
    );
  });

  it('asks for an observed pass over the entries for what it cannot put back by itself', () => {
    const entries = [{ kind: 'entries' }];
    // a route of twill's protocol that is not the wanted one, a stray permanent entry, a foreign
    // FDB entry towards a peer
    expect(j('10.244.4.0/24 via 10.123.0.1 dev eth0 proto 151 ')).toEqual(entries);
    expect(j('10.244.4.0/24 via 10.244.4.0 dev twill.1 proto 151 onlink metric 5')).toEqual(
      entries,
    );
    expect(j('10.244.4.0/24 via 10.244.4.0 dev twill.1 proto 151 onlink')).toEqual(entries);
    expect(j('10.244.9.7 dev twill.1 lladdr 02:00:00:00:00:09 PERMANENT ')).toEqual(entries);
    expect(j('10.123.0.4 dev twill.1 lladdr 02:00:00:00:00:77 NOARP PERMANENT ')).toEqual(entries);
    // links and addresses; another twill device; nothing known yet
    expect(j('7: twill.1: <BROADCAST,MULTICAST> mtu 1450 qdisc noop state DOWN')).toEqual(entries);
    expect(j('Deleted 10.244.4.0 dev twill.2 FAILED ')).toEqual(entries);
    expect(judge(ipTouch('Deleted 10.244.4.0 dev twill.1 FAILED '), undefined)).toEqual(entries);
  });

  it("judges a route another program's route holds the destination of against twill's at metric 0", () => {
    const foreign = new Set(['10.244.4.0/24']);
    const jf = (line: string): unknown => judge(ipTouch(line), known, foreign);
    expect(jf('10.244.4.0/24 via 10.244.4.0 dev twill.1 proto 151 onlink ')).toEqual([]);
    expect(jf('Deleted 10.244.4.0/24 via 10.244.4.0 dev twill.1 proto 151 onlink ')).toEqual([
      { kind: 'route', key: '10.244.4.0/24' },
    ]);
    // its route of its own metric, kept there, going: nothing to put back
    expect(
      jf('Deleted 10.244.4.0/24 via 10.244.4.0 dev twill.1 proto 151 metric 717828 onlink '),
    ).toEqual([]);
  });

  it("passes a rule event on as its tables' chains", () => {
    expect(judge(nftTouch('delete rule ip nat TWILL-POSTRTG handle 2'), known)).toEqual([
      { kind: 'chains', tables: ['nat'] },
    ]);
  });
});
