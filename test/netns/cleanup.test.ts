// `twill run --cleanup` against a real kernel, in a network namespace that holds twill's state
// next to other programs' look-alikes: twill's chains and jumps in iptables and ip6tables next to a
// foreign chain, a foreign jump and a foreign rule; twill's nftables tables next to a foreign table
// and an `inet twill-ipv4` (same name, another family: not twill's); twill.1 and twill-v6.1 next to
// flannel.2 and a bridge named twill.9 (not vxlan: not twill's); routes of protocol 151 next to
// foreign routes, one of them to the same destination. The cleanup removes twill's objects and
// nothing else, exits 0, and a second run changes nothing and exits 0 too. A read that fails (an
// nft that cannot list, as on a kernel without nf_tables) makes it exit 1, naming the read, and
// what the other reads found is removed all the same.
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NetnsLab, nsRun, sweepStaleNetns } from '../../lab/kit/netns.ts';
import { CommandError } from '../../src/exec/runner.ts';

const MAIN = resolve(import.meta.dirname, '../../src/cli/main.ts');
const lab = new NetnsLab();
let ns: string;

const MASQ_JUMP = '-m comment --comment "twill masq" -j TWILL-POSTRTG';
const FWD_JUMP = '-m comment --comment "twill forward" -j TWILL-FWD';

function restore(net: string): string {
  return [
    '*nat',
    ':TWILL-POSTRTG - [0:0]',
    ':KUBE-POSTROUTING - [0:0]',
    `-A POSTROUTING ${MASQ_JUMP}`,
    '-A POSTROUTING -j KUBE-POSTROUTING',
    `-A POSTROUTING -s ${net} -j MASQUERADE`,
    `-A TWILL-POSTRTG -s ${net} -d ${net} -m comment --comment "twill masq" -j RETURN`,
    '-A KUBE-POSTROUTING -j RETURN',
    'COMMIT',
    '*filter',
    ':TWILL-FWD - [0:0]',
    ':FOREIGN-FWD - [0:0]',
    `-A FORWARD ${FWD_JUMP}`,
    '-A FORWARD -j FOREIGN-FWD',
    `-A TWILL-FWD -s ${net} -m comment --comment "twill forward" -j ACCEPT`,
    '-A FOREIGN-FWD -j RETURN',
    'COMMIT',
    '',
  ].join('\n');
}

const NFT = `
table ip twill-ipv4 {
  chain postrtg {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return
  }
}
table ip6 twill-ipv6 {
  chain forward {
    type filter hook forward priority filter; policy accept;
    ip6 saddr fd00::/48 accept
  }
}
table ip foreign {
  chain forward {
    type filter hook forward priority filter; policy accept;
  }
}
table inet twill-ipv4 {
}
`;

async function sh(file: string, args: readonly string[], input?: string): Promise<string> {
  const opts = input === undefined ? {} : { input };
  return (await nsRun(ns, [file, ...args], opts)).stdout;
}

const lines = (text: string): string[] =>
  text
    .split('\n')
    .map((l) => l.trimEnd())
    .filter((l) => l !== '');

/** What the namespace holds, per view, one line each. */
async function snapshot(): Promise<Record<string, string[]>> {
  const views: Record<string, [string, string[]]> = {
    nat4: ['iptables', ['-w', '5', '-t', 'nat', '-S']],
    filter4: ['iptables', ['-w', '5', '-t', 'filter', '-S']],
    nat6: ['ip6tables', ['-w', '5', '-t', 'nat', '-S']],
    filter6: ['ip6tables', ['-w', '5', '-t', 'filter', '-S']],
    nft: ['nft', ['list', 'tables']],
    links: ['ip', ['-br', 'link', 'show']],
    routes4: ['ip', ['route', 'show', 'table', 'main']],
    routes6: ['ip', ['-6', 'route', 'show', 'table', 'main']],
  };
  const out: Record<string, string[]> = {};
  for (const [view, [file, args]] of Object.entries(views)) {
    const text = await sh(file, args);
    // a device is named by its first word (ip -br prints its state, which may change, after it)
    out[view] = view === 'links' ? lines(text).map((l) => l.split(/\s+/)[0] ?? '') : lines(text);
  }
  return out;
}

/** Whether a line of a view names one of twill's objects (or one that goes with its device). */
function twills(view: string, line: string): boolean {
  if (view.startsWith('nat') || view.startsWith('filter')) return line.includes('TWILL-');
  if (view === 'nft') return line === 'table ip twill-ipv4' || line === 'table ip6 twill-ipv6';
  if (view === 'links')
    return (
      line.startsWith('twill.1@') ||
      line.startsWith('twill-v6.1@') ||
      line === 'twill.1' ||
      line === 'twill-v6.1'
    );
  return / proto 151\b/.test(line) || /\bdev (twill\.1|twill-v6\.1)\b/.test(line);
}

/** What a cleanup's log says it removed, one entry per log line. */
function removals(log: string): string[] {
  return lines(log).flatMap((l) => {
    const removed = (JSON.parse(l) as { removed?: unknown }).removed;
    return typeof removed === 'string' ? [removed] : [];
  });
}

/** Runs `twill run --cleanup` in the namespace; `path` first in its PATH (a fake tool). */
async function twillCleanup(o: { path?: string } = {}): Promise<{ code: number; log: string }> {
  const env = o.path === undefined ? [] : ['env', `PATH=${o.path}:${process.env.PATH ?? ''}`];
  try {
    const argv = [...env, process.execPath, MAIN, 'run', '--cleanup', '--node-name', 'n1'];
    const r = await nsRun(ns, argv, { timeoutMs: 60_000 });
    return { code: 0, log: r.stderr };
  } catch (err) {
    if (err instanceof CommandError) return { code: err.exitCode ?? -1, log: err.stderr };
    throw err;
  }
}

beforeAll(async () => {
  await sweepStaleNetns();
  ns = await lab.add('cleanup');
  await sh('ip', ['link', 'add', 'dummy0', 'type', 'veth', 'peer', 'name', 'dummy0p']);
  await sh('ip', ['addr', 'add', '10.0.0.1/24', 'dev', 'dummy0']);
  await sh('ip', ['-6', 'addr', 'add', 'fd7b::1/64', 'dev', 'dummy0', 'nodad']);
  await sh('ip', ['link', 'set', 'dummy0', 'up']);
  const vxlan = (name: string, vni: string, local: string): string[] => [
    'link',
    'add',
    name,
    'type',
    'vxlan',
    'id',
    vni,
    'local',
    local,
    'dev',
    'dummy0',
    'dstport',
    '8472',
  ];
  await sh('ip', vxlan('twill.1', '1', '10.0.0.1'));
  await sh('ip', vxlan('twill-v6.1', '1', 'fd7b::1'));
  await sh('ip', vxlan('flannel.2', '2', '10.0.0.1'));
  await sh('ip', ['link', 'add', 'twill.9', 'type', 'bridge']);
  for (const dev of ['dummy0p', 'twill.1', 'twill-v6.1', 'flannel.2', 'twill.9'])
    await sh('ip', ['link', 'set', dev, 'up']);
  await sh('ip', ['-6', 'addr', 'add', 'fd00::/128', 'dev', 'twill-v6.1', 'nodad']);
  await sh(
    'ip',
    ['-force', '-batch', '-'],
    [
      'route add 10.244.1.0/24 via 10.0.0.2 dev dummy0 proto 151',
      'route add 10.244.2.0/24 via 10.244.2.0 dev twill.1 onlink proto 151',
      'route add 10.244.1.0/24 via 10.0.0.3 dev dummy0 proto static metric 50',
      'route add 10.244.5.0/24 via 10.0.0.5 dev dummy0',
      'route add fd00:0:0:1::/64 via fd7b::2 dev dummy0 proto 151',
      'route add fd00:0:0:2::/64 via fd00:0:0:2:: dev twill-v6.1 onlink proto 151',
      'route add fd00:0:0:5::/64 via fd7b::5 dev dummy0',
      '',
    ].join('\n'),
  );
  await sh('iptables-restore', ['--noflush', '-w', '5'], restore('10.244.0.0/16'));
  await sh('ip6tables-restore', ['--noflush', '-w', '5'], restore('fd00::/48'));
  await sh('nft', ['-f', '-'], NFT);
});

afterAll(async () => {
  await lab.destroy();
});

describe('twill run --cleanup', () => {
  it("removes twill's chains, jumps, tables, devices and routes, and nothing else", async () => {
    const before = await snapshot();
    // the fixture holds what the test is about, in every view
    for (const [view, got] of Object.entries(before)) {
      expect(
        got.filter((l) => twills(view, l)),
        `twill's objects in ${view}`,
      ).not.toHaveLength(0);
      expect(
        got.filter((l) => !twills(view, l)),
        `others' objects in ${view}`,
      ).not.toHaveLength(0);
    }
    expect(before.nft).toContain('table inet twill-ipv4');
    expect(before.links).toContain('twill.9');

    const first = await twillCleanup();
    expect(first.code, first.log).toBe(0);
    const after = await snapshot();
    const expected = Object.fromEntries(
      Object.entries(before).map(([view, got]) => [view, got.filter((l) => !twills(view, l))]),
    );
    expect(after).toStrictEqual(expected);
    // the foreign look-alikes, spelled out
    expect(after.nat4).toStrictEqual([
      '-P PREROUTING ACCEPT',
      '-P INPUT ACCEPT',
      '-P OUTPUT ACCEPT',
      '-P POSTROUTING ACCEPT',
      '-N KUBE-POSTROUTING',
      '-A POSTROUTING -j KUBE-POSTROUTING',
      '-A POSTROUTING -s 10.244.0.0/16 -j MASQUERADE',
      '-A KUBE-POSTROUTING -j RETURN',
    ]);
    expect(after.routes4).toContain('10.244.1.0/24 via 10.0.0.3 dev dummy0 proto static metric 50');
    for (const what of [
      'iptables -t nat: chain TWILL-POSTRTG',
      'iptables -t filter: chain TWILL-FWD',
      `iptables -t nat: jump -A POSTROUTING ${MASQ_JUMP}`,
      `ip6tables -t filter: jump -A FORWARD ${FWD_JUMP}`,
      'nft table ip twill-ipv4',
      'nft table ip6 twill-ipv6',
      'device twill.1',
      'device twill-v6.1',
      'route 10.244.1.0/24 via 10.0.0.2 dev dummy0 proto 151',
      'route fd00:0:0:1::/64 via fd7b::2 dev dummy0 proto 151',
    ])
      expect(removals(first.log), first.log).toContain(what);

    const second = await twillCleanup();
    expect(second.code, second.log).toBe(0);
    expect(second.log).toContain('nothing of twill was left');
    expect(removals(second.log)).toStrictEqual([]);
    expect(await snapshot()).toStrictEqual(after);
  });
});

describe('twill run --cleanup with a read that fails', () => {
  it('exits 1 naming the read, and removes what the other reads found', async () => {
    await sh('iptables-restore', ['--noflush', '-w', '5'], restore('10.244.0.0/16'));
    await sh('nft', ['-f', '-'], NFT);
    // an nft that runs but cannot list, as on a kernel without nf_tables
    const dir = await mkdtemp(join(tmpdir(), 'twill-cleanup-nft-'));
    try {
      await writeFile(
        join(dir, 'nft'),
        '#!/bin/sh\necho "Error: Could not process rule: Protocol not supported" >&2\nexit 1\n',
      );
      await chmod(join(dir, 'nft'), 0o755);
      const broken = await twillCleanup({ path: dir });
      expect(broken.code, broken.log).toBe(1);
      expect(broken.log).toContain('could not read nftables tables');
      expect(broken.log).toContain('Protocol not supported');
      expect(removals(broken.log)).toContain('iptables -t nat: chain TWILL-POSTRTG');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    const left = await snapshot();
    expect(left.nat4?.filter((l) => l.includes('TWILL-'))).toStrictEqual([]);
    expect(left.filter4?.filter((l) => l.includes('TWILL-'))).toStrictEqual([]);
    expect(left.nft).toContain('table ip twill-ipv4');
    // with a working nft the tables go too
    const fixed = await twillCleanup();
    expect(fixed.code, fixed.log).toBe(0);
    expect(removals(fixed.log)).toStrictEqual([
      'nft table ip twill-ipv4',
      'nft table ip6 twill-ipv6',
    ]);
  });
});
