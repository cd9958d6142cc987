// Unit tests of `twill run --cleanup`'s pure part and of its read-then-delete order over a fake
// runner: only twill's tables, chains, jumps, routes and devices are named; the deletes are one
// process per tool and family; a missing tool holds nothing of ours; nothing there runs nothing
// but the reads; a failed line is a failure, the others are removed; a failed read is reported
// and the other reads' objects are removed all the same.
import { setImmediate } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { cleanup } from '../../src/dataplane/cleanup.ts';
import {
  cleanupPlan,
  parseOwnedRoutes,
  routeDeleteLine,
  type OwnedState,
} from '../../src/dataplane/cleanup-plan.ts';
import { parseNftTableNames } from '../../src/dataplane/nft-parse.ts';
import {
  CommandError,
  isMissingTool,
  type RunOptions,
  type Runner,
} from '../../src/exec/runner.ts';
import { captureLog } from '../helpers/log.ts';

const MASQ_JUMP = '-m comment --comment "twill masq" -j TWILL-POSTRTG';
const FWD_JUMP = '-m comment --comment "twill forward" -j TWILL-FWD';

const nothing: OwnedState = { links: [], routes: [], chains: [], nftTables: [] };

describe('parseNftTableNames (what the cleanup deletes of nft)', () => {
  it("finds twill's two tables, and not a table of the same name in another family", () => {
    const listing = [
      'table ip filter',
      'table ip twill-ipv4',
      'table inet twill-ipv4',
      'table ip twill-ipv4x',
      'table ip6 twill-ipv6',
      'table ip twill-ipv6',
      '',
    ].join('\n');
    expect(parseNftTableNames(listing)).toStrictEqual([
      { family: 'ip', name: 'twill-ipv4' },
      { family: 'ip6', name: 'twill-ipv6' },
    ]);
    expect(parseNftTableNames('table ip nat\ntable inet twill-ipv4\n')).toStrictEqual([]);
    expect(parseNftTableNames('')).toStrictEqual([]);
  });
});

describe('owned routes', () => {
  it('reads dst, gateway, device and metric, and names each in its delete line with proto 151', () => {
    const routes = parseOwnedRoutes(
      [
        { dst: '10.244.1.0/24', gateway: '10.0.0.2', dev: 'eth0', protocol: '151', flags: [] },
        { dst: 'default', gateway: '10.0.0.9', dev: 'eth0', metric: 7, flags: [] },
        { dst: '10.244.2.0/24', nexthops: [{ gateway: '10.0.0.3', dev: 'eth0' }] },
        { gateway: '10.0.0.4' },
      ],
      4,
    );
    expect(routes.map(routeDeleteLine)).toStrictEqual([
      'route del 10.244.1.0/24 via 10.0.0.2 dev eth0 proto 151 table main',
      'route del 0.0.0.0/0 via 10.0.0.9 dev eth0 proto 151 metric 7 table main',
      'route del 10.244.2.0/24 proto 151 table main',
    ]);
    const v6 = parseOwnedRoutes([{ dst: 'default', dev: 'twill-v6.1' }], 6);
    expect(v6.map(routeDeleteLine)).toStrictEqual([
      'route del ::/0 dev twill-v6.1 proto 151 table main',
    ]);
    expect(parseOwnedRoutes({ not: 'a list' }, 4)).toStrictEqual([]);
  });
});

describe('cleanupPlan', () => {
  it('runs nothing when nothing of twill is there (chains absent, no jumps)', () => {
    const absent = { jumps: [], rules: null };
    expect(cleanupPlan(nothing)).toStrictEqual([]);
    expect(
      cleanupPlan({
        ...nothing,
        chains: [
          { ipv6: false, postrouting: absent, forward: absent },
          { ipv6: true, postrouting: absent, forward: absent },
        ],
      }),
    ).toStrictEqual([]);
  });

  it('removes the jumps, then the chains, per tool; the nft tables in one transaction; routes, then devices, in one ip batch', () => {
    const state: OwnedState = {
      links: ['twill.1', 'twill-v6.1'],
      routes: [
        { family: 4, dst: '10.244.1.0/24', via: '10.0.0.2', dev: 'eth0' },
        { family: 6, dst: 'fd00:0:0:1::/64', via: 'fd00:0:0:1::', dev: 'twill-v6.1' },
      ],
      chains: [
        {
          ipv6: false,
          postrouting: { jumps: [MASQ_JUMP, MASQ_JUMP], rules: ['-A TWILL-POSTRTG -j RETURN'] },
          forward: { jumps: [], rules: [] },
        },
        {
          ipv6: true,
          postrouting: { jumps: [], rules: null },
          forward: { jumps: [FWD_JUMP], rules: null },
        },
      ],
      nftTables: [{ family: 'ip6', name: 'twill-ipv6' }],
    };
    const steps = cleanupPlan(state);
    expect(steps.map((s) => [s.file, ...s.args].join(' '))).toStrictEqual([
      'iptables-restore --noflush -w 5',
      'ip6tables-restore --noflush -w 5',
      'nft -f -',
      'ip -force -batch -',
    ]);
    expect(steps[0]?.input).toBe(
      [
        '*nat',
        `-D POSTROUTING ${MASQ_JUMP}`,
        `-D POSTROUTING ${MASQ_JUMP}`,
        ':TWILL-POSTRTG - [0:0]',
        '-X TWILL-POSTRTG',
        'COMMIT',
        '*filter',
        ':TWILL-FWD - [0:0]',
        '-X TWILL-FWD',
        'COMMIT',
        '',
      ].join('\n'),
    );
    expect(steps[0]?.removes).toStrictEqual([
      `iptables -t nat: jump -A POSTROUTING ${MASQ_JUMP}`,
      `iptables -t nat: jump -A POSTROUTING ${MASQ_JUMP}`,
      'iptables -t nat: chain TWILL-POSTRTG',
      'iptables -t filter: chain TWILL-FWD',
    ]);
    expect(steps[1]?.input).toBe(`*filter\n-D FORWARD ${FWD_JUMP}\nCOMMIT\n`);
    expect(steps[2]?.input).toBe('add table ip6 twill-ipv6\ndelete table ip6 twill-ipv6\n');
    expect(steps[2]?.removes).toStrictEqual(['nft table ip6 twill-ipv6']);
    expect(steps[3]?.input).toBe(
      [
        'route del 10.244.1.0/24 via 10.0.0.2 dev eth0 proto 151 table main',
        'route del fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 proto 151 table main',
        'link del twill.1',
        'link del twill-v6.1',
        '',
      ].join('\n'),
    );
    expect(steps[3]?.removes).toStrictEqual([
      'route 10.244.1.0/24 via 10.0.0.2 dev eth0 proto 151',
      'route fd00:0:0:1::/64 via fd00:0:0:1:: dev twill-v6.1 proto 151',
      'device twill.1',
      'device twill-v6.1',
    ]);
  });
});

describe('isMissingTool', () => {
  it('is a spawn ENOENT or exit 127, nothing else', () => {
    const err = (exitCode: number | undefined, reason: string): CommandError =>
      new CommandError({ command: ['nft'], exitCode, stderr: '', reason });
    expect(isMissingTool(err(undefined, 'spawn nft ENOENT'))).toBe(true);
    expect(isMissingTool(err(127, 'exit code 127'))).toBe(true);
    expect(isMissingTool(err(1, 'exit code 1'))).toBe(false);
    expect(isMissingTool(err(undefined, 'timed out'))).toBe(false);
    expect(isMissingTool(new Error('spawn nft ENOENT'))).toBe(false);
  });
});

/**
 * A node's kernel as the reads see it, and the writes it took. `missing` tools fail to spawn;
 * `ipFails` maps an ip batch line (1-based) to the reason it fails.
 */
function fakeNode(o: {
  ipv4Routes?: unknown[];
  links?: unknown[];
  postrouting?: string;
  ownChain?: string | null;
  nftTables?: string;
  missing?: readonly string[];
  ipFails?: ReadonlyMap<number, string>;
}): { runner: Runner; writes: { command: string; input: string }[] } {
  const writes: { command: string; input: string }[] = [];
  const runner: Runner = async (file, args, opts: RunOptions = {}) => {
    const command = [file, ...args];
    const ok = (stdout: string) => ({ stdout, stderr: '' });
    if (o.missing?.includes(file))
      throw new CommandError({ command, exitCode: undefined, stderr: '', reason: 'spawn ENOENT' });
    const line = args.join(' ');
    if (file === 'ip' && line === '-d -json link show') return ok(JSON.stringify(o.links ?? []));
    if (file === 'ip' && line === '-json route show table main proto 151')
      return ok(JSON.stringify(o.ipv4Routes ?? []));
    if (file === 'ip' && line === '-6 -json route show table main proto 151') return ok('[]');
    if ((file === 'iptables' || file === 'ip6tables') && args[5] === 'POSTROUTING')
      return ok(file === 'iptables' ? (o.postrouting ?? '-P POSTROUTING ACCEPT\n') : '');
    if (file === 'iptables' && args[5] === 'TWILL-POSTRTG' && o.ownChain != null)
      return ok(o.ownChain);
    if (file === 'iptables' || file === 'ip6tables') {
      if (args[5] === 'FORWARD') return ok('-P FORWARD ACCEPT\n');
      throw new CommandError({ command, exitCode: 1, stderr: 'No chain', reason: 'exit code 1' });
    }
    if (file === 'nft' && line === 'list tables') return ok(o.nftTables ?? '');
    writes.push({ command: line === '' ? file : `${file} ${line}`, input: opts.input ?? '' });
    if (file === 'ip' && o.ipFails && o.ipFails.size > 0) {
      const stderr = [...o.ipFails].map(([n, why]) => `${why}\nCommand failed -:${n}`).join('\n');
      throw new CommandError({ command, exitCode: 1, stderr, reason: 'exit code 1' });
    }
    return ok('');
  };
  return { runner, writes };
}

const VXLAN = (name: string) => ({ ifname: name, linkinfo: { info_kind: 'vxlan' } });

describe('cleanup', () => {
  it('reads, then deletes exactly what it read, and logs each removal', async () => {
    const node = fakeNode({
      links: [VXLAN('twill.1'), VXLAN('flannel.1'), { ifname: 'twill.9', linkinfo: {} }],
      ipv4Routes: [{ dst: '10.244.1.0/24', gateway: '10.0.0.2', dev: 'eth0' }],
      postrouting: `-P POSTROUTING ACCEPT\n-A POSTROUTING -j KUBE-POSTROUTING\n-A POSTROUTING ${MASQ_JUMP}\n`,
      ownChain: '-N TWILL-POSTRTG\n-A TWILL-POSTRTG -j RETURN\n',
      nftTables: 'table ip nat\ntable ip twill-ipv4\n',
    });
    const log = captureLog();
    const r = await cleanup(node.runner, log.logger, AbortSignal.timeout(5_000));
    expect(node.writes).toStrictEqual([
      {
        command: 'iptables-restore --noflush -w 5',
        input: `*nat\n-D POSTROUTING ${MASQ_JUMP}\n:TWILL-POSTRTG - [0:0]\n-X TWILL-POSTRTG\nCOMMIT\n`,
      },
      {
        command: 'nft -f -',
        input: 'add table ip twill-ipv4\ndelete table ip twill-ipv4\n',
      },
      {
        command: 'ip -force -batch -',
        input:
          'route del 10.244.1.0/24 via 10.0.0.2 dev eth0 proto 151 table main\nlink del twill.1\n',
      },
    ]);
    expect(r.failures).toStrictEqual([]);
    expect(r.removed).toHaveLength(5);
    await setImmediate();
    expect(log.lines.filter((l) => l.msg.startsWith('removed ')).map((l) => l.msg)).toStrictEqual(
      r.removed.map((w) => `removed ${w}`),
    );
  });

  it('runs only the reads when nothing is there, and skips tools that are not installed', async () => {
    const node = fakeNode({ missing: ['nft', 'ip6tables'] });
    const r = await cleanup(node.runner, captureLog().logger, AbortSignal.timeout(5_000));
    expect(node.writes).toStrictEqual([]);
    expect(r).toStrictEqual({ removed: [], failures: [], unread: [] });
  });

  it('reports the lines of an ip batch that failed, and counts the others removed', async () => {
    const node = fakeNode({
      links: [VXLAN('twill.1')],
      ipv4Routes: [{ dst: '10.244.1.0/24', gateway: '10.0.0.2', dev: 'eth0' }],
      ipFails: new Map([[2, 'Error: Operation not permitted']]),
    });
    const log = captureLog();
    const r = await cleanup(node.runner, log.logger, AbortSignal.timeout(5_000));
    expect(r.removed).toStrictEqual(['route 10.244.1.0/24 via 10.0.0.2 dev eth0 proto 151']);
    expect(r.failures).toStrictEqual(['device twill.1: Error: Operation not permitted']);
    await setImmediate();
    expect(
      log.lines.some(
        (l) => l.msg === 'could not remove device twill.1: Error: Operation not permitted',
      ),
    ).toBe(true);
  });

  it('reports a read that fails for another reason than a missing tool, and removes what the other reads found', async () => {
    const node = fakeNode({
      links: [VXLAN('twill.1')],
      nftTables: 'table ip twill-ipv4\n',
    });
    const fail = (file: string, args: readonly string[], stderr: string, code: number) =>
      Promise.reject(
        new CommandError({
          command: [file, ...args],
          exitCode: code,
          stderr,
          reason: `exit code ${code}`,
        }),
      );
    // iptables held by another program's lock, a kernel without IPv6
    const broken: Runner = (file, args, opts) =>
      file === 'iptables'
        ? fail(file, args, 'Another app is currently holding the xtables lock', 4)
        : file === 'ip' && args[0] === '-6'
          ? fail(file, args, 'RTNETLINK answers: Address family not supported by protocol', 2)
          : node.runner(file, args, opts);
    const log = captureLog();
    const r = await cleanup(broken, log.logger, AbortSignal.timeout(5_000));
    expect(r.unread).toHaveLength(2);
    expect(r.unread[0]).toMatch(/^IPv6 routes: .*Address family not supported/);
    expect(r.unread[1]).toMatch(/^iptables chains: .*xtables lock/);
    expect(r.failures).toStrictEqual([]);
    expect(node.writes.map((w) => w.command)).toStrictEqual(['nft -f -', 'ip -force -batch -']);
    expect(r.removed).toStrictEqual(['nft table ip twill-ipv4', 'device twill.1']);
    await setImmediate();
    expect(log.lines.filter((l) => l.msg.startsWith('could not read ')).map((l) => l.msg)).toEqual(
      r.unread.map((u) => `could not read ${u}`),
    );
  });

  it('nft installed but no nf_tables in the kernel: reported, and the chains still removed', async () => {
    const node = fakeNode({
      postrouting: `-P POSTROUTING ACCEPT\n-A POSTROUTING ${MASQ_JUMP}\n`,
    });
    const noNfTables: Runner = (file, args, opts) =>
      file === 'nft'
        ? Promise.reject(
            new CommandError({
              command: [file, ...args],
              exitCode: 1,
              stderr: 'Error: Could not process rule: Protocol not supported',
              reason: 'exit code 1',
            }),
          )
        : node.runner(file, args, opts);
    const r = await cleanup(noNfTables, captureLog().logger, AbortSignal.timeout(5_000));
    expect(r.unread).toHaveLength(1);
    expect(r.unread[0]).toMatch(/^nftables tables: .*Protocol not supported/);
    expect(node.writes.map((w) => w.command)).toStrictEqual(['iptables-restore --noflush -w 5']);
    expect(r.removed).toStrictEqual([`iptables -t nat: jump -A POSTROUTING ${MASQ_JUMP}`]);
  });
});
