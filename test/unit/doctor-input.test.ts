// The doctor's reading of `iptables -S INPUT` for vxlan's UDP port (rule
// parsing, the walk in order, policy), the pure parts of gather (link facts,
// rule counting), gather over a fake runner (failed reads become facts, not
// exceptions; an IPv6-only node's reads), and the table and JSON output.
import { describe, expect, it } from 'vitest';
import { doctorExitCode, runChecks } from '../../src/doctor/checks.ts';
import { got } from '../../src/doctor/facts.ts';
import { countSavedRules, gather, parseLinkFacts } from '../../src/doctor/gather.ts';
import { parseInputRule, hitsUdpPort, ruleWords } from '../../src/doctor/input-rules.ts';
import { renderJson, renderTable, wrap } from '../../src/doctor/print.ts';
import { CommandError, type Runner } from '../../src/exec/runner.ts';
import { TwillError } from '../../src/errors.ts';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { healthyFacts, resultOf, storeFact, V6ONLY_CONFIG } from '../helpers/doctor.ts';

function portVerdict(listing: string, extra = ''): { verdict: string; detail: string } {
  const f = {
    ...healthyFacts(),
    inputChain: got(listing),
    ...(extra ? { store: storeFact({ backendExtra: extra }) } : {}),
  };
  return resultOf(runChecks(f), 'vxlan-port');
}

describe('INPUT rules and the vxlan port', () => {
  it('parses protocol, ports (single, range, multiport, negated), target and other conditions', () => {
    expect(ruleWords('-A INPUT -m comment --comment "a b" -j DROP')).toEqual([
      '-A',
      'INPUT',
      '-m',
      'comment',
      '--comment',
      'a b',
      '-j',
      'DROP',
    ]);
    const r = parseInputRule(
      '-A INPUT -s 10.0.0.0/8 -p udp -m udp --dport 8000:9000 -m comment --comment "x y" -j REJECT --reject-with icmp-port-unreachable',
    );
    expect(r).toMatchObject({
      target: 'REJECT',
      proto: { neg: false, value: 'udp' },
      dports: { neg: false, ranges: [[8000, 9000]] },
      conditions: ['-s 10.0.0.0/8'],
    });
    const m = parseInputRule(
      '-A INPUT -p udp -m multiport --dports 4789,8472 -m conntrack --ctstate NEW -j DROP',
    );
    expect(m.conditions).toEqual(['-m conntrack --ctstate NEW']);
    expect(hitsUdpPort(m, 8472)).toBe(true);
    expect(hitsUdpPort(parseInputRule('-A INPUT -p udp -m udp ! --dport 8472 -j DROP'), 8472)).toBe(
      false,
    );
    expect(hitsUdpPort(parseInputRule('-A INPUT ! -p tcp -j DROP'), 8472)).toBe(true);
    expect(hitsUdpPort(parseInputRule('-A INPUT -p tcp -m tcp --dport 8472 -j DROP'), 8472)).toBe(
      false,
    );
  });

  it('an unconditional DROP or REJECT of the port (or of all UDP, or everything) fails', () => {
    for (const rule of [
      '-A INPUT -p udp -m udp --dport 8472 -j DROP',
      '-A INPUT -p udp -j REJECT --reject-with icmp-port-unreachable',
      '-A INPUT -j DROP',
    ]) {
      expect(portVerdict(`-P INPUT ACCEPT\n${rule}\n`)).toMatchObject({
        verdict: 'fail',
        detail: expect.stringContaining(rule),
      });
    }
  });

  it('an ACCEPT before the DROP, a DROP of another port, or a RETURN before it: ok', () => {
    expect(
      portVerdict(
        '-P INPUT ACCEPT\n-A INPUT -p udp -m udp --dport 8472 -j ACCEPT\n-A INPUT -j DROP\n',
      ).verdict,
    ).toBe('ok');
    expect(
      portVerdict('-P INPUT ACCEPT\n-A INPUT -p udp -m udp --dport 53 -j DROP\n').verdict,
    ).toBe('ok');
    expect(portVerdict('-P INPUT ACCEPT\n-A INPUT -j RETURN\n-A INPUT -j DROP\n').verdict).toBe(
      'ok',
    );
  });

  it('Backend.Port is the port checked', () => {
    expect(
      portVerdict('-P INPUT ACCEPT\n-A INPUT -p udp -m udp --dport 4789 -j DROP\n', ',"Port":4789')
        .verdict,
    ).toBe('fail');
    expect(
      portVerdict('-P INPUT ACCEPT\n-A INPUT -p udp -m udp --dport 8472 -j DROP\n', ',"Port":4789')
        .verdict,
    ).toBe('ok');
  });

  it('policy DROP fails unless something accepts the port; loopback/established accepts do not count; other conditional accepts warn', () => {
    expect(
      portVerdict(
        '-P INPUT DROP\n-A INPUT -i lo -j ACCEPT\n-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n',
      ),
    ).toMatchObject({ verdict: 'fail', detail: expect.stringContaining('policy is DROP') });
    expect(
      portVerdict('-P INPUT DROP\n-A INPUT -s 10.123.0.0/24 -p udp -m udp --dport 8472 -j ACCEPT\n')
        .verdict,
    ).toBe('ok');
    expect(portVerdict('-P INPUT DROP\n-A INPUT -s 10.123.0.0/24 -j ACCEPT\n').verdict).toBe(
      'warn',
    );
    expect(portVerdict('-P INPUT ACCEPT\n-A INPUT -s 192.0.2.0/24 -p udp -j DROP\n').verdict).toBe(
      'warn',
    );
  });

  it('host-gw has no vxlan port to check', () => {
    const f = {
      ...healthyFacts(),
      store: storeFact({ backend: 'host-gw' }),
      inputChain: got('-P INPUT DROP\n'),
    };
    expect(resultOf(runChecks(f), 'vxlan-port').verdict).toBe('ok');
  });
});

describe('gather', () => {
  it('reads links with kind, master and vxlan data, and counts saved rules', () => {
    const json = [
      {
        ifname: 'twill.1',
        mtu: 1450,
        linkinfo: { info_kind: 'vxlan', info_data: { id: 1, port: 8472 } },
        addr_info: [{ family: 'inet', local: '10.244.3.0', prefixlen: 32 }],
      },
      { ifname: 'twv1', mtu: 1450, master: 'cni0', linkinfo: { info_kind: 'veth' }, addr_info: [] },
      {
        ifname: 'cni0',
        mtu: 1430,
        linkinfo: { info_kind: 'bridge' },
        addr_info: [
          { family: 'inet6', local: 'fd00:10:244:3::1', prefixlen: 64, scope: 'global' },
          // a bridge without ports keeps its address tentative: still the bridge's address
          {
            family: 'inet6',
            local: 'fd00:10:244:7::1',
            prefixlen: 64,
            scope: 'global',
            tentative: true,
          },
          { family: 'inet6', local: 'fe80::1', prefixlen: 64, scope: 'link' },
        ],
      },
    ];
    expect(parseLinkFacts(json)).toEqual([
      {
        name: 'twill.1',
        kind: 'vxlan',
        mtu: 1450,
        master: undefined,
        addresses: ['10.244.3.0/32'],
        addresses6: [],
        vni: 1,
        port: 8472,
      },
      {
        name: 'twv1',
        kind: 'veth',
        mtu: 1450,
        master: 'cni0',
        addresses: [],
        addresses6: [],
        vni: undefined,
        port: undefined,
      },
      {
        name: 'cni0',
        kind: 'bridge',
        mtu: 1430,
        master: undefined,
        addresses: [],
        addresses6: ['fd00:10:244:3::1/64', 'fd00:10:244:7::1/64'],
        vni: undefined,
        port: undefined,
      },
    ]);
    expect(
      countSavedRules(
        '# Generated\n*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\n-A FORWARD -j DROP\nCOMMIT\n',
      ),
    ).toBe(2);
    expect(countSavedRules('')).toBe(0);
  });

  it('turns failed reads and an unreachable store into facts, never throws', async () => {
    const runner: Runner = async (file, args) => {
      if (file === 'iptables' && args[0] === '--version')
        return { stdout: 'iptables v1.8.9 (nf_tables)\n', stderr: '' };
      throw new CommandError({
        command: [file, ...args],
        exitCode: 127,
        stderr: 'not found',
        reason: 'exit code 127',
      });
    };
    const read: string[] = [];
    const readText = async (path: string): Promise<string> => {
      read.push(path);
      if (path.includes('bridge')) throw Object.assign(new Error('ENOENT'), { code: 'ENOENT' });
      return '1\n';
    };
    const readStore = async (): Promise<never> => {
      throw new TwillError(
        'STORE_UNAVAILABLE',
        'etcd get /coreos.com/network/config: deadline exceeded',
      );
    };
    const f = await gather(
      { runner, readText, readStore },
      {
        iface: { iface: [], ifaceRegex: [], publicIp: undefined },
        subnetFile: '/nonexistent/subnet.env',
        bridge: 'cni0',
        procSysNet: '/host/proc/sys/net',
      },
      AbortSignal.timeout(5000),
    );
    // every sysctl is read where --proc-sys-net says, as the daemon reads them
    expect(read.filter((p) => !p.startsWith('/host/proc/sys/net/'))).toEqual([]);
    expect(read).toEqual(
      expect.arrayContaining([
        '/host/proc/sys/net/ipv4/ip_forward',
        '/host/proc/sys/net/bridge/bridge-nf-call-iptables',
        '/host/proc/sys/net/ipv4/conf/all/rp_filter',
      ]),
    );
    expect(f.ipForward).toEqual(got('1'));
    expect(f.bridgeNf).toEqual(got(undefined));
    expect(f.iptables).toMatchObject({
      ok: true,
      value: { backend: 'nf_tables', otherRules: { ok: false } },
    });
    expect(f.links.ok).toBe(false);
    expect(f.subnetEnv).toEqual(got(undefined));
    expect(f.store).toEqual({
      ok: false,
      error: 'lease store unreachable (etcd get /coreos.com/network/config: deadline exceeded)',
    });
    const results = runChecks(f);
    expect(resultOf(results, 'stale-routes').detail).toBe(
      'could not list routes: ip -json route show table main proto 151: exit code 127: not found',
    );
    expect(resultOf(results, 'br-netfilter').verdict).toBe('fail');
  });
});

describe('gather, IPv6 only', () => {
  // the node: eth0 at fd00:123::2/64 with the IPv6 default route, no IPv4 address anywhere
  const addrs = [
    {
      ifname: 'eth0',
      mtu: 1500,
      addr_info: [{ family: 'inet6', local: 'fd00:123::2', prefixlen: 64, scope: 'global' }],
    },
  ];
  const config = parseNetConfig(V6ONLY_CONFIG);

  it('reads ip6tables instead of iptables, finds the underlay by its IPv6 address, and reads the IPv4 leftovers', async () => {
    const calls: string[] = [];
    const runner: Runner = async (file, args) => {
      const line = [file, ...args].join(' ');
      calls.push(line);
      const out = (v: unknown): { stdout: string; stderr: string } => ({
        stdout: typeof v === 'string' ? v : JSON.stringify(v),
        stderr: '',
      });
      if (line === 'ip6tables --version') return out('ip6tables v1.8.9 (nf_tables)\n');
      if (line === 'ip6tables-legacy-save') return out('*filter\n-A INPUT -j ACCEPT\nCOMMIT\n');
      if (line.startsWith('ip6tables -w 5 -S INPUT')) return out('-P INPUT ACCEPT\n');
      if (line === 'ip -json -6 route show default')
        return out([{ dst: 'default', gateway: 'fd00:123::1', dev: 'eth0' }]);
      if (line.startsWith('ip -json addr show') || line.startsWith('ip -d -json addr show'))
        return out(addrs);
      if (line.includes('route show table main')) return out([]);
      // twill's and flannel's chains: none (iptables and ip6tables say the chain does not exist)
      throw new CommandError({
        command: [file, ...args],
        exitCode: 1,
        stderr: 'iptables: No chain/target/match by that name.',
        reason: 'exit code 1',
      });
    };
    const read: string[] = [];
    const readText = async (path: string): Promise<string> => {
      read.push(path);
      return '1\n';
    };
    const f = await gather(
      { runner, readText, readStore: async () => ({ config, leases: [] }) },
      {
        iface: { iface: [], ifaceRegex: [], publicIp: undefined },
        subnetFile: '/nonexistent/subnet.env',
        bridge: 'cni0',
        procSysNet: '/proc/sys/net',
      },
      AbortSignal.timeout(5000),
    );
    expect(f.underlay).toEqual(got({ name: 'eth0', mtu: 1500, publicIp: null }));
    expect(f.underlay6).toEqual(got({ ip: 'fd00:123::2', publicIp: 'fd00:123::2' }));
    // ip6tables' backend, INPUT and the other backend's rules; no iptables but for leftovers
    expect(f.iptables).toEqual(got({ backend: 'nf_tables', otherRules: got(1) }));
    expect(f.inputChain).toEqual(got('-P INPUT ACCEPT\n'));
    expect(calls).not.toContain('iptables --version');
    expect(calls).not.toContain('iptables -w 5 -S INPUT');
    expect(calls).toContain('ip -json -6 route show default');
    // flannel's chains looked for in ip6tables too; twill's iptables chains read as leftovers
    expect(calls.filter((c) => c.startsWith('ip6tables') && c.includes('FLANNEL-FWD'))).not.toEqual(
      [],
    );
    expect(f.ip4Chains).toEqual(
      got({ postrouting: { jumps: [], rules: null }, forward: { jumps: [], rules: null } }),
    );
    expect(f.bridgeNf6).toEqual(got('1'));
    expect(read).toContain('/proc/sys/net/bridge/bridge-nf-call-ip6tables');
    expect(read).toContain('/proc/sys/net/ipv6/conf/all/forwarding');
    // rp_filter filters IPv4 only: not read
    expect(read.filter((p) => p.includes('rp_filter'))).toEqual([]);
    const results = runChecks(f);
    expect(resultOf(results, 'ipv4-leftovers').verdict).toBe('ok');
    expect(resultOf(results, 'iptables-backend').detail).toContain(
      'ip6tables drives nf_tables, but the legacy backend holds 1 rules (ip6tables-legacy-save)',
    );
  });
});

describe('report', () => {
  it('wraps at spaces, and cuts words longer than the width', () => {
    expect(wrap('aaa bbb ccc', 7)).toEqual(['aaa bbb', 'ccc']);
    expect(wrap('abcdefghij', 4)).toEqual(['abcd', 'efgh', 'ij']);
    expect(wrap('', 4)).toEqual(['']);
  });

  it('prints a table with every check and a summary, and JSON with ok and the checks', () => {
    const results = runChecks({ ...healthyFacts(), ipForward: got('0') });
    const table = renderTable(results);
    expect(table.split('\n')[0]).toMatch(/^CHECK\s+VERDICT\s+DETAIL\s+FIX$/);
    expect(table).toMatch(/^ip-forward\s+FAIL\s+net\.ipv4\.ip_forward is 0/m);
    expect(table).toContain('12 checks: 11 ok, 0 warn, 1 fail');
    const json = JSON.parse(renderJson(results)) as {
      ok: boolean;
      checks: { check: string; verdict: string }[];
    };
    expect(json.ok).toBe(false);
    expect(json.checks).toHaveLength(12);
    expect(doctorExitCode(results)).toBe(1);
  });
});
