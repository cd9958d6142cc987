// Unit tests of underlay interface selection over realistic `ip -json`
// output: --iface, --iface-regex, the default route, and --public-ip; the
// same with IPv6 (dual-stack), and with IPv4 off (IPv6 only).
import { describe, expect, it } from 'vitest';
import { TwillError } from '../../src/errors.ts';
import type { Runner } from '../../src/exec/runner.ts';
import {
  defaultRouteDevice,
  discoverInterface,
  onLink6,
  parseIpAddr,
  selectInterface,
  type IfaceChoice,
  type IfaceInfo,
  type IfaceRequest,
} from '../../src/net/iface.ts';

// `ip -json -4 addr show` on a host with loopback, two NICs, a NIC without an
// IPv4 address and a bridge (one line per link, as iproute2 prints it).
const IP_ADDR = JSON.parse(`[
{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue","operstate":"UNKNOWN","group":"default","txqlen":1000,"link_type":"loopback","address":"00:00:00:00:00:00","broadcast":"00:00:00:00:00:00","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo","valid_life_time":4294967295,"preferred_life_time":4294967295}]},
{"ifindex":2,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"fq_codel","operstate":"UP","group":"default","txqlen":1000,"link_type":"ether","address":"02:fc:00:00:00:01","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet","local":"192.0.2.2","prefixlen":24,"broadcast":"192.0.2.255","scope":"global","dynamic":true,"label":"eth0","valid_life_time":86000,"preferred_life_time":86000}]},
{"ifindex":3,"ifname":"eth1","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":9000,"address":"02:fc:00:00:00:02","addr_info":[{"family":"inet","local":"10.10.0.5","prefixlen":16,"scope":"global","label":"eth1"},{"family":"inet","local":"10.10.0.6","prefixlen":16,"scope":"global","secondary":true,"label":"eth1"}]},
{"ifindex":4,"ifname":"eth2","flags":["BROADCAST","MULTICAST"],"mtu":1500,"address":"02:fc:00:00:00:03","addr_info":[]},
{"ifindex":5,"ifname":"br-lan","flags":["BROADCAST","MULTICAST","UP"],"mtu":1400,"address":"02:fc:00:00:00:04","addr_info":[{"family":"inet","local":"172.16.9.1","prefixlen":24,"scope":"global","label":"br-lan"}]}
]`) as unknown;

const ROUTE_DEFAULT = JSON.parse(
  '[{"dst":"default","gateway":"192.0.2.1","dev":"eth0","protocol":"dhcp","prefsrc":"192.0.2.2","metric":100,"flags":[]}]',
) as unknown;

const LINKS = parseIpAddr(IP_ADDR);
const NONE: IfaceRequest = { iface: [], ifaceRegex: [], publicIp: undefined };

function summary(c: IfaceChoice): [string, string | null, string | null] {
  return [c.iface.name, c.ifaceIp, c.publicIp];
}

function failure(
  links: readonly IfaceInfo[],
  dev: string | undefined,
  req: IfaceRequest,
): TwillError {
  try {
    selectInterface(links, dev, req);
  } catch (err) {
    if (err instanceof TwillError) return err;
    throw err;
  }
  throw new Error(`expected IFACE_NOT_FOUND for ${JSON.stringify(req)}`);
}

describe('parseIpAddr', () => {
  it('reads name, MTU, MAC and IPv4 addresses in kernel order', () => {
    expect(LINKS).toStrictEqual([
      {
        name: 'lo',
        mtu: 65536,
        mac: '00:00:00:00:00:00',
        addrs: ['127.0.0.1'],
        networks: ['127.0.0.1/8'],
        networks6: [],
      },
      {
        name: 'eth0',
        mtu: 1500,
        mac: '02:fc:00:00:00:01',
        addrs: ['192.0.2.2'],
        networks: ['192.0.2.2/24'],
        networks6: [],
      },
      {
        name: 'eth1',
        mtu: 9000,
        mac: '02:fc:00:00:00:02',
        addrs: ['10.10.0.5', '10.10.0.6'],
        networks: ['10.10.0.5/16', '10.10.0.6/16'],
        networks6: [],
      },
      {
        name: 'eth2',
        mtu: 1500,
        mac: '02:fc:00:00:00:03',
        addrs: [],
        networks: [],
        networks6: [],
      },
      {
        name: 'br-lan',
        mtu: 1400,
        mac: '02:fc:00:00:00:04',
        addrs: ['172.16.9.1'],
        networks: ['172.16.9.1/24'],
        networks6: [],
      },
    ]);
  });

  it('keeps only inet addresses in addrs, and no IPv6 address without a global scope', () => {
    const json: unknown = [
      {
        ifname: 'eth0',
        mtu: 1500,
        address: '02:fc:00:00:00:01',
        addr_info: [
          { family: 'inet6', local: '2001:db8::2', prefixlen: 64 },
          { family: 'inet', local: '192.0.2.2', prefixlen: 24 },
        ],
      },
    ];
    expect(parseIpAddr(json)).toStrictEqual([
      {
        name: 'eth0',
        mtu: 1500,
        mac: '02:fc:00:00:00:01',
        addrs: ['192.0.2.2'],
        networks: ['192.0.2.2/24'],
        networks6: [],
      },
    ]);
  });

  it('gives no interfaces for output that is not an array', () => {
    expect(parseIpAddr({ ifname: 'eth0' })).toStrictEqual([]);
    expect(parseIpAddr(null)).toStrictEqual([]);
  });
});

describe('defaultRouteDevice', () => {
  it('finds the device of the default route', () => {
    expect(defaultRouteDevice(ROUTE_DEFAULT)).toBe('eth0');
  });

  it('takes the first of several default routes', () => {
    const json: unknown = [
      { dst: 'default', gateway: '10.10.0.1', dev: 'eth1', metric: 50, flags: [] },
      { dst: 'default', gateway: '192.0.2.1', dev: 'eth0', metric: 100, flags: [] },
    ];
    expect(defaultRouteDevice(json)).toBe('eth1');
  });

  it('is undefined without a default route', () => {
    expect(defaultRouteDevice([])).toBeUndefined();
    expect(
      defaultRouteDevice([
        {
          dst: '10.10.0.0/16',
          dev: 'eth1',
          protocol: 'kernel',
          scope: 'link',
          prefsrc: '10.10.0.5',
          flags: [],
        },
      ]),
    ).toBeUndefined();
    expect(defaultRouteDevice('not json')).toBeUndefined();
  });
});

describe('selectInterface', () => {
  const dev = defaultRouteDevice(ROUTE_DEFAULT);

  it('uses the default route device without flags', () => {
    expect(summary(selectInterface(LINKS, dev, NONE))).toStrictEqual([
      'eth0',
      '192.0.2.2',
      '192.0.2.2',
    ]);
  });

  it('selects --iface by name, using its first address', () => {
    expect(summary(selectInterface(LINKS, dev, { ...NONE, iface: ['eth1'] }))).toStrictEqual([
      'eth1',
      '10.10.0.5',
      '10.10.0.5',
    ]);
  });

  it('selects --iface by address, using that address', () => {
    expect(summary(selectInterface(LINKS, dev, { ...NONE, iface: ['10.10.0.6'] }))).toStrictEqual([
      'eth1',
      '10.10.0.6',
      '10.10.0.6',
    ]);
  });

  it('takes the first --iface that is found', () => {
    const choice = selectInterface(LINKS, dev, {
      ...NONE,
      iface: ['eth9', 'eth2', '203.0.113.1', 'br-lan', 'eth1'],
    });
    expect(summary(choice)).toStrictEqual(['br-lan', '172.16.9.1', '172.16.9.1']);
  });

  it('refuses when no --iface is found, naming the values', () => {
    const err = failure(LINKS, dev, { ...NONE, iface: ['eth9', 'eth2'] });
    expect(err.code).toBe('IFACE_NOT_FOUND');
    expect(err.message).toContain('--iface');
    expect(err.message).toContain('eth9');
    expect(err.message).toContain('eth2');
  });

  it('does not fall back to the default route when --iface is not found', () => {
    expect(failure(LINKS, dev, { ...NONE, iface: ['203.0.113.1'] }).message).toContain(
      '203.0.113.1',
    );
  });

  it('matches --iface-regex against addresses before names', () => {
    // "1" matches the name "eth1" but first the address 127.0.0.1 of lo
    expect(summary(selectInterface(LINKS, dev, { ...NONE, ifaceRegex: ['1'] }))).toStrictEqual([
      'lo',
      '127.0.0.1',
      '127.0.0.1',
    ]);
    // "^eth1$" matches no address, so it matches the name
    expect(summary(selectInterface(LINKS, dev, { ...NONE, ifaceRegex: ['^eth1$'] }))).toStrictEqual(
      ['eth1', '10.10.0.5', '10.10.0.5'],
    );
    // an address match on a later link beats a name match on an earlier one
    expect(
      summary(selectInterface(LINKS, dev, { ...NONE, ifaceRegex: ['^(eth0|172\\.16\\..*)$'] })),
    ).toStrictEqual(['br-lan', '172.16.9.1', '172.16.9.1']);
  });

  it('uses the matching address of an interface, not its first', () => {
    expect(summary(selectInterface(LINKS, dev, { ...NONE, ifaceRegex: ['\\.6$'] }))).toStrictEqual([
      'eth1',
      '10.10.0.6',
      '10.10.0.6',
    ]);
  });

  it('tries each --iface-regex in order', () => {
    const choice = selectInterface(LINKS, dev, { ...NONE, ifaceRegex: ['^wlan', '^br-'] });
    expect(summary(choice)).toStrictEqual(['br-lan', '172.16.9.1', '172.16.9.1']);
  });

  it('skips a name match without an address', () => {
    const err = failure(LINKS, dev, { ...NONE, ifaceRegex: ['^eth2$'] });
    expect(err.code).toBe('IFACE_NOT_FOUND');
    expect(err.message).toContain('--iface-regex');
    expect(err.message).toContain('^eth2$');
  });

  it('refuses without a default route, pointing at --iface', () => {
    const err = failure(LINKS, undefined, NONE);
    expect(err.code).toBe('IFACE_NOT_FOUND');
    expect(err.message).toContain('default route');
    expect(err.message).toContain('--iface');
  });

  it('refuses a default route device without an IPv4 address', () => {
    const err = failure(LINKS, 'eth2', NONE);
    expect(err.code).toBe('IFACE_NOT_FOUND');
    expect(err.message).toContain('eth2');
  });

  it('refuses a default route device that is not listed', () => {
    const err = failure(LINKS, 'wg0', NONE);
    expect(err.code).toBe('IFACE_NOT_FOUND');
    expect(err.message).toContain('wg0');
  });

  it('lets --public-ip override publicIp but not ifaceIp', () => {
    const byDefault = selectInterface(LINKS, dev, { ...NONE, publicIp: '203.0.113.7' });
    expect(summary(byDefault)).toStrictEqual(['eth0', '192.0.2.2', '203.0.113.7']);
    const byName = selectInterface(LINKS, dev, {
      iface: ['eth1'],
      ifaceRegex: [],
      publicIp: '203.0.113.7',
    });
    expect(summary(byName)).toStrictEqual(['eth1', '10.10.0.5', '203.0.113.7']);
    expect(byName.iface.mtu).toBe(9000);
  });
});

// `ip -json addr show` (both families) on a dual-stack host: eth0 has a global address, a
// deprecated one, one still in DAD, one that failed DAD, and its link-local one (the kernel lists
// the newest IPv6 address first); eth1 has only IPv4; eth3 has IPv6 addresses in two networks.
const IP_ADDR_DUAL = JSON.parse(`[
{"ifindex":2,"ifname":"eth0","mtu":1500,"address":"02:fc:00:00:00:01","addr_info":[
 {"family":"inet","local":"192.0.2.2","prefixlen":24,"scope":"global","label":"eth0"},
 {"family":"inet6","local":"fd00:0:0:1::9","prefixlen":64,"scope":"global","dadfailed":true,"tentative":true,"valid_life_time":4294967295,"preferred_life_time":4294967295},
 {"family":"inet6","local":"fd00:0:0:1::8","prefixlen":64,"scope":"global","tentative":true,"valid_life_time":4294967295,"preferred_life_time":4294967295},
 {"family":"inet6","local":"fd00:0:0:1::7","prefixlen":64,"scope":"global","deprecated":true,"valid_life_time":4294967295,"preferred_life_time":0},
 {"family":"inet6","local":"fd00:0:0:1:0:0:0:2","prefixlen":64,"scope":"global","nodad":true,"valid_life_time":4294967295,"preferred_life_time":4294967295},
 {"family":"inet6","local":"fe80::fc:ff:fe00:1","prefixlen":64,"scope":"link","valid_life_time":4294967295,"preferred_life_time":4294967295}]},
{"ifindex":3,"ifname":"eth1","mtu":9000,"address":"02:fc:00:00:00:02","addr_info":[
 {"family":"inet","local":"10.10.0.5","prefixlen":16,"scope":"global","label":"eth1"},
 {"family":"inet6","local":"fe80::fc:ff:fe00:2","prefixlen":64,"scope":"link"}]},
{"ifindex":4,"ifname":"eth3","mtu":1500,"address":"02:fc:00:00:00:05","addr_info":[
 {"family":"inet","local":"172.16.0.3","prefixlen":24,"scope":"global","label":"eth3"},
 {"family":"inet6","local":"2001:db8:5::3","prefixlen":48,"scope":"global"},
 {"family":"inet6","local":"fd00:0:0:5::3","prefixlen":64,"scope":"global"}]}
]`) as unknown;

const DUAL = parseIpAddr(IP_ADDR_DUAL);
const DUAL_REQ: IfaceRequest = { ...NONE, ipv6: true };

function failure6(dev: string | undefined, req: IfaceRequest): TwillError {
  return failure(DUAL, dev, req);
}

describe('IPv6 addresses (dual-stack)', () => {
  it('keeps global IPv6 addresses that are not deprecated, tentative or failed, canonical', () => {
    expect(DUAL.map((l) => [l.name, l.networks6])).toStrictEqual([
      ['eth0', ['fd00:0:0:1::2/64']],
      ['eth1', []],
      ['eth3', ['2001:db8:5::3/48', 'fd00:0:0:5::3/64']],
    ]);
  });

  it('takes the IPv6 address of the IPv4 default route interface', () => {
    const c = selectInterface(DUAL, 'eth0', DUAL_REQ);
    expect([c.iface.name, c.ifaceIp, c.ifaceIp6, c.publicIp6]).toStrictEqual([
      'eth0',
      '192.0.2.2',
      'fd00:0:0:1::2',
      'fd00:0:0:1::2',
    ]);
  });

  it('takes the first global IPv6 address of an --iface or --iface-regex interface', () => {
    const named = selectInterface(DUAL, 'eth0', { ...DUAL_REQ, iface: ['eth3'] });
    expect([named.iface.name, named.ifaceIp6]).toStrictEqual(['eth3', '2001:db8:5::3']);
    const matched = selectInterface(DUAL, 'eth0', { ...DUAL_REQ, ifaceRegex: ['^172\\.16\\.'] });
    expect([matched.iface.name, matched.ifaceIp6]).toStrictEqual(['eth3', '2001:db8:5::3']);
  });

  it('selects --iface by IPv6 address, using that address and the first IPv4 one', () => {
    const c = selectInterface(DUAL, 'eth0', { ...DUAL_REQ, iface: ['fd00:0:0:5:0::3'] });
    expect([c.iface.name, c.ifaceIp, c.ifaceIp6]).toStrictEqual([
      'eth3',
      '172.16.0.3',
      'fd00:0:0:5::3',
    ]);
  });

  it('fails like flannel when the interface has no usable IPv6 address, naming it', () => {
    for (const [dev, req] of [
      ['eth1', DUAL_REQ],
      ['eth0', { ...DUAL_REQ, iface: ['eth1'] }],
    ] as const) {
      const err = failure6(dev, req);
      expect(err.code).toBe('IFACE_NOT_FOUND');
      expect(err.message).toContain('failed to find IPv6 address for interface eth1');
    }
  });

  it('does not look at IPv6 unless asked', () => {
    const c = selectInterface(DUAL, 'eth1', NONE);
    expect([c.iface.name, c.ifaceIp6, c.publicIp6]).toStrictEqual(['eth1', undefined, undefined]);
  });

  it('lets --public-ipv6 override publicIp6 (canonical) but not ifaceIp6', () => {
    const c = selectInterface(DUAL, 'eth0', { ...DUAL_REQ, publicIpv6: '2001:DB8:0:0::77' });
    expect([c.ifaceIp6, c.publicIp6]).toStrictEqual(['fd00:0:0:1::2', '2001:db8::77']);
  });

  it('onLink6 tells whether an IPv6 address is in one of the global networks', () => {
    const eth3 = DUAL[2] as IfaceInfo;
    expect(onLink6(eth3, 'fd00:0:0:5::99')).toBe(true);
    expect(onLink6(eth3, '2001:db8:5:ffff::1')).toBe(true);
    expect(onLink6(eth3, 'fd00:0:0:6::1')).toBe(false);
    expect(onLink6(eth3, '172.16.0.9')).toBe(false);
  });
});

// `ip -json addr show` (both families) on an IPv6-only host: eth0 has only IPv6 addresses (a
// global one, its link-local), eth1 has an IPv4 address and a global IPv6 one, eth2 only IPv4,
// eth3 two global IPv6 addresses in two networks and a deprecated one.
const IP_ADDR_V6ONLY = JSON.parse(`[
{"ifindex":1,"ifname":"lo","mtu":65536,"address":"00:00:00:00:00:00","addr_info":[
 {"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo"},
 {"family":"inet6","local":"::1","prefixlen":128,"scope":"host"}]},
{"ifindex":2,"ifname":"eth0","mtu":1500,"address":"02:fc:00:00:00:01","addr_info":[
 {"family":"inet6","local":"2001:db8:0:1:0:0:0:2","prefixlen":64,"scope":"global","dynamic":true,"mngtmpaddr":true,"valid_life_time":86000,"preferred_life_time":14000},
 {"family":"inet6","local":"fe80::fc:ff:fe00:1","prefixlen":64,"scope":"link"}]},
{"ifindex":3,"ifname":"eth1","mtu":9000,"address":"02:fc:00:00:00:02","addr_info":[
 {"family":"inet","local":"10.10.0.5","prefixlen":16,"scope":"global","label":"eth1"},
 {"family":"inet6","local":"fd00:0:0:5::5","prefixlen":64,"scope":"global"}]},
{"ifindex":4,"ifname":"eth2","mtu":1500,"address":"02:fc:00:00:00:03","addr_info":[
 {"family":"inet","local":"172.16.9.1","prefixlen":24,"scope":"global","label":"eth2"},
 {"family":"inet6","local":"fe80::fc:ff:fe00:3","prefixlen":64,"scope":"link"}]},
{"ifindex":5,"ifname":"eth3","mtu":1400,"address":"02:fc:00:00:00:04","addr_info":[
 {"family":"inet6","local":"fd00:0:0:7::9","prefixlen":64,"scope":"global","deprecated":true,"preferred_life_time":0},
 {"family":"inet6","local":"2001:db8:7::3","prefixlen":48,"scope":"global"},
 {"family":"inet6","local":"fd00:0:0:7::3","prefixlen":64,"scope":"global"}]}
]`) as unknown;

// `ip -json -6 route show default` there: a router advertisement's route on eth0
const ROUTE6_DEFAULT = JSON.parse(
  '[{"dst":"default","gateway":"fe80::1","dev":"eth0","protocol":"ra","metric":1024,"flags":[],"expires":1798,"pref":"medium"}]',
) as unknown;

const V6ONLY = parseIpAddr(IP_ADDR_V6ONLY);
const V6ONLY_REQ: IfaceRequest = { ...NONE, ipv4: false, ipv6: true };

function choice6(c: IfaceChoice): unknown[] {
  return [c.iface.name, c.ifaceIp, c.publicIp, c.ifaceIp6, c.publicIp6];
}

describe('IPv6 only (EnableIPv4 false)', () => {
  const dev6 = defaultRouteDevice(ROUTE6_DEFAULT);

  it('uses the IPv6 default route device, which needs no IPv4 address, and has no IPv4 half', () => {
    expect(dev6).toBe('eth0');
    expect(choice6(selectInterface(V6ONLY, dev6, V6ONLY_REQ))).toEqual([
      'eth0',
      null,
      null,
      '2001:db8:0:1::2',
      '2001:db8:0:1::2',
    ]);
  });

  it('takes only the IPv6 address of an interface that has both', () => {
    expect(choice6(selectInterface(V6ONLY, 'eth1', V6ONLY_REQ))).toEqual([
      'eth1',
      null,
      null,
      'fd00:0:0:5::5',
      'fd00:0:0:5::5',
    ]);
  });

  it('selects --iface by name (its first usable IPv6 address) or by IPv6 address', () => {
    const byName = selectInterface(V6ONLY, dev6, { ...V6ONLY_REQ, iface: ['eth3'] });
    expect(choice6(byName)).toEqual(['eth3', null, null, '2001:db8:7::3', '2001:db8:7::3']);
    expect(byName.iface.mtu).toBe(1400);
    const byAddr = selectInterface(V6ONLY, dev6, { ...V6ONLY_REQ, iface: ['fd00:0:0:7:0::3'] });
    expect(choice6(byAddr)).toEqual(['eth3', null, null, 'fd00:0:0:7::3', 'fd00:0:0:7::3']);
  });

  it('skips --iface values without a usable IPv6 address, and an IPv4 address names nothing', () => {
    // eth2 has only a link-local IPv6 address; 10.10.0.5 is eth1's, but IPv4 is off
    const c = selectInterface(V6ONLY, dev6, {
      ...V6ONLY_REQ,
      iface: ['eth2', '10.10.0.5', 'fd00:0:0:7::9', 'eth1'],
    });
    expect(choice6(c)).toEqual(['eth1', null, null, 'fd00:0:0:5::5', 'fd00:0:0:5::5']);
    const err = failure(V6ONLY, dev6, { ...V6ONLY_REQ, iface: ['eth2', '10.10.0.5'] });
    expect(err.code).toBe('IFACE_NOT_FOUND');
    expect(err.message).toContain('--iface eth2,10.10.0.5');
    expect(err.message).toContain('IPv4 is off');
  });

  it('matches --iface-regex against IPv6 addresses before names, never IPv4 ones', () => {
    const byAddr = selectInterface(V6ONLY, dev6, { ...V6ONLY_REQ, ifaceRegex: ['^fd00:0:0:7:'] });
    expect(choice6(byAddr)).toEqual(['eth3', null, null, 'fd00:0:0:7::3', 'fd00:0:0:7::3']);
    // "^eth[12]$" matches eth1 by name (eth2 has no usable IPv6 address, and comes later)
    const byName = selectInterface(V6ONLY, dev6, { ...V6ONLY_REQ, ifaceRegex: ['^eth[21]$'] });
    expect(byName.iface.name).toBe('eth1');
    const err = failure(V6ONLY, dev6, { ...V6ONLY_REQ, ifaceRegex: ['^10\\.10\\.'] });
    expect(err.code).toBe('IFACE_NOT_FOUND');
    expect(err.message).toContain('--iface-regex ^10\\.10\\.');
  });

  it('refuses without an IPv6 default route, or when its device has no usable IPv6 address', () => {
    const none = failure(V6ONLY, undefined, V6ONLY_REQ);
    expect(none.code).toBe('IFACE_NOT_FOUND');
    expect(none.message).toContain('no IPv6 default route');
    expect(none.message).toContain('--iface');
    const bare = failure(V6ONLY, 'eth2', V6ONLY_REQ);
    expect(bare.message).toContain('failed to find IPv6 address for interface eth2');
    expect(failure(V6ONLY, 'wg0', V6ONLY_REQ).message).toContain('wg0');
  });

  it('refuses --public-ip as a config error pointing at --public-ipv6', () => {
    for (const dev of [dev6, undefined]) {
      const err = failure(V6ONLY, dev, { ...V6ONLY_REQ, publicIp: '203.0.113.7' });
      expect(err.code).toBe('CONFIG_INVALID');
      expect(err.message).toContain('--public-ip 203.0.113.7');
      expect(err.message).toContain('"EnableIPv4": false');
      expect(err.message).toContain('--public-ipv6');
    }
  });

  it('lets --public-ipv6 override publicIp6 (canonical) but not ifaceIp6', () => {
    const c = selectInterface(V6ONLY, dev6, { ...V6ONLY_REQ, publicIpv6: '2001:DB8:0:0::77' });
    expect(choice6(c)).toEqual(['eth0', null, null, '2001:db8:0:1::2', '2001:db8::77']);
  });

  it('discoverInterface reads every address and the IPv6 default route', async () => {
    const calls: string[] = [];
    const runner: Runner = async (file, args) => {
      const cmd = [file, ...args].join(' ');
      calls.push(cmd);
      if (cmd === 'ip -json addr show')
        return { stdout: JSON.stringify(IP_ADDR_V6ONLY), stderr: '' };
      if (cmd === 'ip -json -6 route show default')
        return { stdout: JSON.stringify(ROUTE6_DEFAULT), stderr: '' };
      throw new Error(`not in this test: ${cmd}`);
    };
    const c = await discoverInterface(runner, V6ONLY_REQ, AbortSignal.timeout(1_000));
    expect(choice6(c)).toEqual(['eth0', null, null, '2001:db8:0:1::2', '2001:db8:0:1::2']);
    expect(calls).toEqual(['ip -json addr show', 'ip -json -6 route show default']);
    // with --iface no route is read
    calls.length = 0;
    await discoverInterface(runner, { ...V6ONLY_REQ, iface: ['eth1'] }, AbortSignal.timeout(1_000));
    expect(calls).toEqual(['ip -json addr show']);
  });
});
