// One entry the kernel refuses never stops the rest (issue 14: isolation):
// in a network namespace, a plan whose batches each hold a line the kernel
// refuses (a route through a device that does not exist, a neighbour with a
// broadcast MAC, an FDB entry on a missing device) still programs every
// other route, neighbour and FDB entry, and reports exactly the refused
// lines, each with the kernel's reason.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { applyOps } from '../../src/dataplane/apply.ts';
import type { Op } from '../../src/dataplane/model.ts';
import { NetnsLab, nsRunner } from '../../lab/kit/netns.ts';

const lab = new NetnsLab();
let ns: string;

beforeAll(async () => {
  ns = await lab.add('iso');
  const sh = nsRunner(ns);
  await sh('ip', [
    'link',
    'add',
    'twill.1',
    'type',
    'vxlan',
    'id',
    '1',
    'dstport',
    '8472',
    'nolearning',
  ]);
  await sh('ip', ['addr', 'add', '10.244.3.0/32', 'dev', 'twill.1']);
  await sh('ip', ['link', 'set', 'twill.1', 'up']);
});
afterAll(() => lab.destroy());

/** Peer n's entries on `dev` (n = 4, 5, 6), as a pass would add them. */
function peerOps(n: number, dev: string): Op[] {
  const mac = `7e:00:00:00:00:0${n}`;
  const gw = `10.244.${n}.0`;
  return [
    { kind: 'neigh', action: 'add', phase: 'ip-pre', neigh: { ip: gw, mac, dev } },
    { kind: 'fdb', action: 'add', phase: 'bridge', fdb: { mac, dev, dst: `192.0.2.${n}` } },
    {
      kind: 'route',
      action: 'change',
      phase: 'ip-post',
      route: { dst: `${gw}/24`, via: gw, dev, onlink: true },
    },
  ];
}

describe('applying a plan with entries the kernel refuses', () => {
  it('programs every other entry and reports only the refused lines', async () => {
    const ops: Op[] = [4, 5, 6].flatMap((n) => peerOps(n, n === 5 ? 'no-such-dev' : 'twill.1'));
    const r = await applyOps(ops, { runner: nsRunner(ns), signal: AbortSignal.timeout(30_000) });
    expect(r.batches).toBe(3);
    expect(r.failures).toHaveLength(3);
    for (const f of r.failures) expect(f).toContain('no-such-dev');
    const sh = nsRunner(ns);
    const routes = (await sh('ip', ['route', 'show', 'proto', '151'])).stdout;
    expect(routes).toContain('10.244.4.0/24');
    expect(routes).toContain('10.244.6.0/24');
    const neighs = (await sh('ip', ['neigh', 'show', 'dev', 'twill.1', 'nud', 'permanent'])).stdout;
    expect(neighs).toMatch(/10\.244\.4\.0 .*7e:00:00:00:00:04/);
    expect(neighs).toMatch(/10\.244\.6\.0 .*7e:00:00:00:00:06/);
    const fdb = (await sh('bridge', ['fdb', 'show', 'dev', 'twill.1'])).stdout;
    expect(fdb).toContain('7e:00:00:00:00:04 dst 192.0.2.4');
    expect(fdb).toContain('7e:00:00:00:00:06 dst 192.0.2.6');
  });
});
