// Unit tests of net-conf.json parsing: flannel's defaults and rules, the
// unsupported features, and errors that name the key and the bad value.
import { describe, expect, it } from 'vitest';
import { parseNetConfig, type BackendConfig } from '../../src/config/netconf.ts';
import { TwillError, type ErrorCode } from '../../src/errors.ts';
import { formatCidr, formatIpv4 } from '../../src/net/ipv4.ts';
import { formatCidr6, formatIpv6 } from '../../src/net/ipv6.ts';

const VXLAN_DEFAULTS: BackendConfig = {
  type: 'vxlan',
  vni: 1,
  port: 8472,
  mtu: undefined,
  directRouting: false,
  gbp: false,
  learning: false,
};

function failure(text: string): TwillError {
  try {
    parseNetConfig(text);
  } catch (err) {
    if (err instanceof TwillError) return err;
    throw err;
  }
  throw new Error(`expected an error, but ${text} was accepted`);
}

interface Good {
  readonly name: string;
  readonly text: string;
  readonly network: string;
  readonly subnetLen: number;
  readonly min: string;
  readonly max: string;
  readonly backend: BackendConfig;
}

const GOOD: Good[] = [
  {
    name: 'only Network, /16',
    text: '{"Network":"10.244.0.0/16"}',
    network: '10.244.0.0/16',
    subnetLen: 24,
    min: '10.244.1.0',
    max: '10.244.255.0',
    backend: VXLAN_DEFAULTS,
  },
  {
    name: 'lower-case keys and host-gw',
    text: '{"network":"10.244.0.0/16","backend":{"type":"host-gw"}}',
    network: '10.244.0.0/16',
    subnetLen: 24,
    min: '10.244.1.0',
    max: '10.244.255.0',
    backend: { type: 'host-gw' },
  },
  {
    name: 'upper-case keys and an explicit SubnetLen',
    text: '{"NETWORK":"10.0.0.0/8","SUBNETLEN":20,"BACKEND":{"TYPE":"vxlan"}}',
    network: '10.0.0.0/8',
    subnetLen: 20,
    min: '10.0.16.0',
    max: '10.255.240.0',
    backend: VXLAN_DEFAULTS,
  },
  {
    name: '/22 keeps the /24 default',
    text: '{"Network":"192.168.0.0/22"}',
    network: '192.168.0.0/22',
    subnetLen: 24,
    min: '192.168.1.0',
    max: '192.168.3.0',
    backend: VXLAN_DEFAULTS,
  },
  {
    name: '/23 defaults to prefix + 2',
    text: '{"Network":"192.168.0.0/23"}',
    network: '192.168.0.0/23',
    subnetLen: 25,
    min: '192.168.0.128',
    max: '192.168.1.128',
    backend: VXLAN_DEFAULTS,
  },
  {
    name: 'the smallest network, /28',
    text: '{"Network":"10.1.0.0/28"}',
    network: '10.1.0.0/28',
    subnetLen: 30,
    min: '10.1.0.4',
    max: '10.1.0.12',
    backend: VXLAN_DEFAULTS,
  },
  {
    name: 'SubnetLen 30',
    text: '{"Network":"10.244.0.0/16","SubnetLen":30}',
    network: '10.244.0.0/16',
    subnetLen: 30,
    min: '10.244.0.4',
    max: '10.244.255.252',
    backend: VXLAN_DEFAULTS,
  },
  {
    name: 'SubnetLen exactly prefix + 2',
    text: '{"Network":"10.244.0.0/16","SubnetLen":18}',
    network: '10.244.0.0/16',
    subnetLen: 18,
    min: '10.244.64.0',
    max: '10.244.192.0',
    backend: VXLAN_DEFAULTS,
  },
  {
    name: 'explicit SubnetMin and SubnetMax',
    text: '{"Network":"10.244.0.0/16","SubnetMin":"10.244.10.0","SubnetMax":"10.244.20.0"}',
    network: '10.244.0.0/16',
    subnetLen: 24,
    min: '10.244.10.0',
    max: '10.244.20.0',
    backend: VXLAN_DEFAULTS,
  },
  {
    name: 'SubnetMin equal to SubnetMax, at the network address',
    text: '{"Network":"10.244.0.0/16","subnetmin":"10.244.0.0","subnetmax":"10.244.0.0"}',
    network: '10.244.0.0/16',
    subnetLen: 24,
    min: '10.244.0.0',
    max: '10.244.0.0',
    backend: VXLAN_DEFAULTS,
  },
  {
    name: 'every vxlan field set',
    text: '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789,"MTU":9000,"DirectRouting":true,"GBP":true,"Learning":true}}',
    network: '10.244.0.0/16',
    subnetLen: 24,
    min: '10.244.1.0',
    max: '10.244.255.0',
    backend: {
      type: 'vxlan',
      vni: 4096,
      port: 4789,
      mtu: 9000,
      directRouting: true,
      gbp: true,
      learning: true,
    },
  },
  {
    name: 'VNI at the top of its range, Port 1',
    text: '{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":16777215,"Port":1}}',
    network: '10.244.0.0/16',
    subnetLen: 24,
    min: '10.244.1.0',
    max: '10.244.255.0',
    backend: { ...VXLAN_DEFAULTS, vni: 16_777_215, port: 1 },
  },
  {
    name: 'EnableIPv4 true and EnableIPv6 false, as kube-flannel writes them',
    text: '{"Network":"10.244.0.0/16","EnableIPv4":true,"EnableIPv6":false,"Backend":{"Type":"vxlan"}}',
    network: '10.244.0.0/16',
    subnetLen: 24,
    min: '10.244.1.0',
    max: '10.244.255.0',
    backend: VXLAN_DEFAULTS,
  },
  {
    name: 'Backend null is the default backend',
    text: '{"Network":"10.244.0.0/16","Backend":null}',
    network: '10.244.0.0/16',
    subnetLen: 24,
    min: '10.244.1.0',
    max: '10.244.255.0',
    backend: VXLAN_DEFAULTS,
  },
];

describe('parseNetConfig: good configs', () => {
  it.each(GOOD)('$name', (row) => {
    const cfg = parseNetConfig(row.text);
    const v4 = cfg.ipv4;
    if (!v4) throw new Error('no IPv4 half');
    expect({
      network: formatCidr(v4.network),
      subnetLen: v4.subnetLen,
      min: formatIpv4(v4.subnetMin),
      max: formatIpv4(v4.subnetMax),
      backend: cfg.backend,
      unknownKeys: cfg.unknownKeys,
    }).toStrictEqual({
      network: row.network,
      subnetLen: row.subnetLen,
      min: row.min,
      max: row.max,
      backend: row.backend,
      unknownKeys: [],
    });
  });
});

const NET = '"Network":"10.244.0.0/16"';
const vx = (fields: string): string => `{${NET},"Backend":{"Type":"vxlan",${fields}}}`;

const v6 = (fields: string): string => `{${NET},"EnableIPv6":true,${fields}}`;

/** The dual-stack errors, each naming the key and the bad value. */
function v6Bad(): [string, string, ErrorCode, string[]][] {
  const N = '"IPv6Network":"fd00:10:244::/56"';
  return [
    ['IPv6Network a number', v6('"IPv6Network":6'), 'CONFIG_INVALID', ['"IPv6Network"', '6']],
    [
      'IPv6Network an IPv4 CIDR',
      v6('"IPv6Network":"10.0.0.0/8"'),
      'CONFIG_INVALID',
      ['"IPv6Network"', '"10.0.0.0/8"', 'IPv6 CIDR'],
    ],
    [
      'IPv6Network without prefix',
      v6('"IPv6Network":"fd00::"'),
      'CONFIG_INVALID',
      ['"IPv6Network"', '"fd00::"'],
    ],
    [
      'IPv6Network with a zone',
      v6('"IPv6Network":"fe80::%eth0/64"'),
      'CONFIG_INVALID',
      ['"IPv6Network"', 'fe80::%eth0/64'],
    ],
    [
      'IPv6Network with host bits, not canonical either',
      v6('"IPv6Network":"FD00:0:0:0::1/56"'),
      'CONFIG_INVALID',
      ['"IPv6Network"', '"FD00:0:0:0::1/56"', 'host bits', 'did you mean "fd00::/56"'],
    ],
    [
      'IPv6Network with host bits',
      v6('"IPv6Network":"fd00::1/56"'),
      'CONFIG_INVALID',
      ['"IPv6Network"', '"fd00::1/56"', 'host bits', 'did you mean "fd00::/56"'],
    ],
    [
      'IPv6Network too small',
      v6('"IPv6Network":"fd00::/125"'),
      'CONFIG_INVALID',
      ['"IPv6Network"', 'fd00::/125', 'too small', '/124'],
    ],
    [
      'IPv6SubnetLen not longer than IPv6Network + 2',
      v6(`${N},"IPv6SubnetLen":57`),
      'CONFIG_INVALID',
      ['"IPv6SubnetLen"', '57', 'at least 58', 'fd00:10:244::/56'],
    ],
    [
      'IPv6SubnetLen equal to the network',
      v6(`${N},"IPv6SubnetLen":56`),
      'CONFIG_INVALID',
      ['"IPv6SubnetLen"', '56', 'at least 58'],
    ],
    [
      'IPv6SubnetLen 127',
      v6(`${N},"IPv6SubnetLen":127`),
      'CONFIG_INVALID',
      ['"IPv6SubnetLen"', '127', '126 or less'],
    ],
    [
      'IPv6SubnetLen 129',
      v6(`${N},"IPv6SubnetLen":129`),
      'CONFIG_INVALID',
      ['"IPv6SubnetLen"', '129'],
    ],
    [
      'IPv6SubnetLen a string',
      v6(`${N},"IPv6SubnetLen":"64"`),
      'CONFIG_INVALID',
      ['"IPv6SubnetLen"', '"64"'],
    ],
    [
      'IPv6SubnetMin not an address',
      v6(`${N},"IPv6SubnetMin":"fd00:10:244:1::/64"`),
      'CONFIG_INVALID',
      ['"IPv6SubnetMin"', '"fd00:10:244:1::/64"', 'IPv6 address'],
    ],
    [
      'IPv6SubnetMin an IPv4 address',
      v6(`${N},"IPv6SubnetMin":"10.244.1.0"`),
      'CONFIG_INVALID',
      ['"IPv6SubnetMin"', '"10.244.1.0"'],
    ],
    [
      'IPv6SubnetMin outside IPv6Network',
      v6(`${N},"IPv6SubnetMin":"fd00:10:245::"`),
      'CONFIG_INVALID',
      ['"IPv6SubnetMin"', 'fd00:10:245::', 'not inside', 'fd00:10:244::/56'],
    ],
    [
      'IPv6SubnetMax outside IPv6Network',
      v6(`${N},"IPv6SubnetMax":"fd00:10:244:100::"`),
      'CONFIG_INVALID',
      ['"IPv6SubnetMax"', 'fd00:10:244:100::', 'not inside'],
    ],
    [
      'IPv6SubnetMin not on a subnet boundary',
      v6(`${N},"IPv6SubnetMin":"fd00:10:244:1::1"`),
      'CONFIG_INVALID',
      ['"IPv6SubnetMin"', 'fd00:10:244:1::1', 'not the start of a /64'],
    ],
    [
      'IPv6SubnetMax not on a subnet boundary',
      v6(`${N},"IPv6SubnetLen":60,"IPv6SubnetMax":"fd00:10:244:18::"`),
      'CONFIG_INVALID',
      ['"IPv6SubnetMax"', 'fd00:10:244:18::', 'not the start of a /60'],
    ],
    [
      'IPv6SubnetMin above IPv6SubnetMax',
      v6(`${N},"IPv6SubnetMin":"fd00:10:244:9::","IPv6SubnetMax":"fd00:10:244:2::"`),
      'CONFIG_INVALID',
      ['"IPv6SubnetMin" fd00:10:244:9::', '"IPv6SubnetMax" fd00:10:244:2::'],
    ],
    [
      'IPv6SubnetMax below the default IPv6SubnetMin',
      v6('"IPv6Network":"fd00::/62","IPv6SubnetMax":"fd00::"'),
      'CONFIG_INVALID',
      ['"IPv6SubnetMin" fd00:0:0:1::', '"IPv6SubnetMax" fd00::'],
    ],
    [
      'IPv6-only with a Network',
      `{${NET},"EnableIPv4":false,"EnableIPv6":true,${N}}`,
      'CONFIG_INVALID',
      ['"Network" is set', '"EnableIPv4" is false', 'IPv6 only'],
    ],
    [
      'IPv6-only with a SubnetLen',
      `{"EnableIPv4":false,"SubnetLen":24,"EnableIPv6":true,"IPv6Network":"fd00::/56"}`,
      'CONFIG_INVALID',
      ['"SubnetLen" is set', '"EnableIPv4" is false'],
    ],
    [
      'IPv6-only without IPv6Network',
      `{"EnableIPv4":false,"EnableIPv6":true}`,
      'CONFIG_INVALID',
      ['"IPv6Network"', 'required'],
    ],
  ];
}

const BAD: [string, string, ErrorCode, string[]][] = [
  ['truncated JSON', '{"Network":', 'CONFIG_INVALID', ['net-conf.json', 'not valid JSON']],
  ['an array', '[]', 'CONFIG_INVALID', ['must be a JSON object', '[]']],
  ['a string', '"10.244.0.0/16"', 'CONFIG_INVALID', ['must be a JSON object', '"10.244.0.0/16"']],
  ['null', 'null', 'CONFIG_INVALID', ['must be a JSON object', 'null']],
  ['Network missing', '{"SubnetLen":24}', 'CONFIG_INVALID', ['"Network"', 'required']],
  ['Network a number', '{"Network":10}', 'CONFIG_INVALID', ['"Network"', '10']],
  [
    'Network without prefix',
    '{"Network":"10.244.0.0"}',
    'CONFIG_INVALID',
    ['"Network"', '"10.244.0.0"'],
  ],
  ['Network IPv6', '{"Network":"fd00::/64"}', 'CONFIG_INVALID', ['"Network"', 'fd00::/64']],
  [
    'Network octal',
    '{"Network":"010.244.0.0/16"}',
    'CONFIG_INVALID',
    ['"Network"', '010.244.0.0/16'],
  ],
  [
    'Network prefix 33',
    '{"Network":"10.0.0.0/33"}',
    'CONFIG_INVALID',
    ['"Network"', '10.0.0.0/33'],
  ],
  [
    'Network host bits',
    '{"Network":"10.244.1.0/16"}',
    'CONFIG_INVALID',
    ['"Network"', '10.244.1.0/16', '10.244.0.0/16'],
  ],
  [
    'Network host bits, /0',
    '{"Network":"10.0.0.0/0"}',
    'CONFIG_INVALID',
    ['"Network"', '10.0.0.0/0', '0.0.0.0/0'],
  ],
  [
    'Network /29',
    '{"Network":"10.0.0.0/29"}',
    'CONFIG_INVALID',
    ['"Network"', '10.0.0.0/29', '/28'],
  ],
  ['SubnetLen 31', `{${NET},"SubnetLen":31}`, 'CONFIG_INVALID', ['"SubnetLen"', '31', '30']],
  [
    'SubnetLen 17 in a /16',
    `{${NET},"SubnetLen":17}`,
    'CONFIG_INVALID',
    ['"SubnetLen"', '17', '18'],
  ],
  [
    'SubnetLen 16 in a /16',
    `{${NET},"SubnetLen":16}`,
    'CONFIG_INVALID',
    ['"SubnetLen"', '16', '18'],
  ],
  ['SubnetLen a string', `{${NET},"SubnetLen":"24"}`, 'CONFIG_INVALID', ['"SubnetLen"', '"24"']],
  ['SubnetLen a fraction', `{${NET},"SubnetLen":24.5}`, 'CONFIG_INVALID', ['"SubnetLen"', '24.5']],
  [
    'SubnetMin outside',
    `{${NET},"SubnetMin":"10.245.0.0"}`,
    'CONFIG_INVALID',
    ['"SubnetMin"', '10.245.0.0', '10.244.0.0/16'],
  ],
  [
    'SubnetMax outside',
    `{${NET},"SubnetMax":"10.243.255.0"}`,
    'CONFIG_INVALID',
    ['"SubnetMax"', '10.243.255.0'],
  ],
  [
    'SubnetMin not aligned',
    `{${NET},"SubnetMin":"10.244.1.1"}`,
    'CONFIG_INVALID',
    ['"SubnetMin"', '10.244.1.1', '/24'],
  ],
  [
    'SubnetMax not aligned',
    `{${NET},"SubnetMax":"10.244.3.128"}`,
    'CONFIG_INVALID',
    ['"SubnetMax"', '10.244.3.128'],
  ],
  [
    'SubnetMin short form',
    `{${NET},"SubnetMin":"10.244.1"}`,
    'CONFIG_INVALID',
    ['"SubnetMin"', '10.244.1'],
  ],
  ['SubnetMin a number', `{${NET},"SubnetMin":5}`, 'CONFIG_INVALID', ['"SubnetMin"', '5']],
  [
    'SubnetMin above SubnetMax',
    `{${NET},"SubnetMin":"10.244.20.0","SubnetMax":"10.244.10.0"}`,
    'CONFIG_INVALID',
    ['"SubnetMin"', '10.244.20.0', '"SubnetMax"', '10.244.10.0'],
  ],
  ['Backend a string', `{${NET},"Backend":"vxlan"}`, 'CONFIG_INVALID', ['"Backend"', '"vxlan"']],
  [
    'Backend.Type udp',
    `{${NET},"Backend":{"Type":"udp"}}`,
    'CONFIG_UNSUPPORTED',
    ['"Type"', '"udp"'],
  ],
  [
    'Backend.Type ipip',
    `{${NET},"Backend":{"type":"ipip"}}`,
    'CONFIG_UNSUPPORTED',
    ['"Type"', '"ipip"'],
  ],
  ['Backend.Type a number', `{${NET},"Backend":{"Type":5}}`, 'CONFIG_INVALID', ['"Type"', '5']],
  [
    'EnableIPv6 true without IPv6Network',
    `{${NET},"EnableIPv6":true}`,
    'CONFIG_INVALID',
    ['"EnableIPv6"', '"IPv6Network" is required'],
  ],
  [
    'IPv6Network without EnableIPv6',
    `{${NET},"IPv6Network":"fd00::/56"}`,
    'CONFIG_INVALID',
    ['"IPv6Network" is set', '"EnableIPv6"'],
  ],
  [
    'IPv6Network with EnableIPv6 false',
    `{${NET},"EnableIPv6":false,"IPv6Network":"fd00::/56"}`,
    'CONFIG_INVALID',
    ['"IPv6Network" is set', '"EnableIPv6"'],
  ],
  [
    'IPv6SubnetLen without EnableIPv6',
    `{${NET},"IPv6SubnetLen":64}`,
    'CONFIG_INVALID',
    ['"IPv6SubnetLen" is set', '"EnableIPv6"'],
  ],
  [
    'IPv6SubnetMin without EnableIPv6',
    `{${NET},"IPv6SubnetMin":"fd00:0:0:1::"}`,
    'CONFIG_INVALID',
    ['"IPv6SubnetMin" is set', '"EnableIPv6"'],
  ],
  [
    'IPv6SubnetMax without EnableIPv6',
    `{${NET},"IPv6SubnetMax":"fd00:0:0:9::"}`,
    'CONFIG_INVALID',
    ['"IPv6SubnetMax" is set', '"EnableIPv6"'],
  ],
  ...v6Bad(),
  [
    'EnableIPv4 false and no IPv6',
    `{"EnableIPv4":false}`,
    'CONFIG_INVALID',
    ['"EnableIPv4" is false', '"EnableIPv6" is not true', 'no pod network'],
  ],
  [
    'EnableIPv4 false with EnableIPv6 false',
    `{"EnableIPv4":false,"EnableIPv6":false,"Backend":{"Type":"host-gw"}}`,
    'CONFIG_INVALID',
    ['no pod network'],
  ],
  [
    'EnableIPv4 false but a Network',
    `{${NET},"EnableIPv4":false}`,
    'CONFIG_INVALID',
    ['"Network" is set', '"EnableIPv4" is false'],
  ],
  [
    'EnableIPv6 a string',
    `{${NET},"EnableIPv6":"true"}`,
    'CONFIG_INVALID',
    ['"EnableIPv6"', '"true"'],
  ],
  ['VNI a string', vx('"VNI":"1"'), 'CONFIG_INVALID', ['"VNI"', '"1"']],
  ['VNI 2^24', vx('"VNI":16777216'), 'CONFIG_INVALID', ['"VNI"', '16777216']],
  ['VNI negative', vx('"VNI":-1'), 'CONFIG_INVALID', ['"VNI"', '-1']],
  ['Port 0', vx('"Port":0'), 'CONFIG_INVALID', ['"Port"', 'got 0']],
  ['Port 65536', vx('"Port":65536'), 'CONFIG_INVALID', ['"Port"', '65536']],
  ['MTU a string', vx('"MTU":"1450"'), 'CONFIG_INVALID', ['"MTU"', '"1450"']],
  [
    'DirectRouting a string',
    vx('"DirectRouting":"true"'),
    'CONFIG_INVALID',
    ['"DirectRouting"', '"true"'],
  ],
  ['GBP a number', vx('"GBP":1'), 'CONFIG_INVALID', ['"GBP"', '1']],
  ['Learning a string', vx('"Learning":"false"'), 'CONFIG_INVALID', ['"Learning"', '"false"']],
  [
    'duplicate keys differing in case',
    '{"Network":"10.244.0.0/16","network":"10.245.0.0/16"}',
    'CONFIG_INVALID',
    ['"Network"', '"network"', 'case-insensitive'],
  ],
  [
    'duplicate Backend keys differing in case',
    `{${NET},"Backend":{"Type":"vxlan","TYPE":"host-gw"}}`,
    'CONFIG_INVALID',
    ['"Type"', '"TYPE"'],
  ],
];

describe('parseNetConfig: bad configs', () => {
  it.each(BAD)('%s', (_name, text, code, parts) => {
    const err = failure(text);
    expect(err.code).toBe(code);
    for (const part of parts) expect(err.message).toContain(part);
  });

  it('every error is prefixed with the file name', () => {
    expect(failure('{"Network":"10.244.0.0/29"}').message).toMatch(/^net-conf\.json: /);
  });
});

interface Good6 {
  readonly name: string;
  readonly fields: string;
  readonly network: string;
  readonly subnetLen: number;
  readonly min: string;
  readonly max: string;
}

const GOOD6: Good6[] = [
  {
    name: 'a /56: /64 subnets, the first skipped',
    fields: '"IPv6Network":"fd00:10:244::/56"',
    network: 'fd00:10:244::/56',
    subnetLen: 64,
    min: 'fd00:10:244:1::',
    max: 'fd00:10:244:ff::',
  },
  {
    name: 'a /48 (65,536 /64s)',
    fields: '"IPv6Network":"2001:db8:42::/48"',
    network: '2001:db8:42::/48',
    subnetLen: 64,
    min: '2001:db8:42:1::',
    max: '2001:db8:42:ffff::',
  },
  {
    name: 'a /62 still gets /64s',
    fields: '"IPv6Network":"fd00::/62"',
    network: 'fd00::/62',
    subnetLen: 64,
    min: 'fd00:0:0:1::',
    max: 'fd00:0:0:3::',
  },
  {
    name: 'a /63 gets /65s (prefix + 2)',
    fields: '"IPv6Network":"fd00::/63"',
    network: 'fd00::/63',
    subnetLen: 65,
    min: 'fd00::8000:0:0:0',
    max: 'fd00:0:0:1:8000::',
  },
  {
    name: 'a /124 gets /126s',
    fields: '"IPv6Network":"fd00::/124"',
    network: 'fd00::/124',
    subnetLen: 126,
    min: 'fd00::4',
    max: 'fd00::c',
  },
  {
    name: 'IPv6SubnetLen 0 is the default, as in flannel',
    fields: '"IPv6Network":"fd00::/56","IPv6SubnetLen":0',
    network: 'fd00::/56',
    subnetLen: 64,
    min: 'fd00:0:0:1::',
    max: 'fd00:0:0:ff::',
  },
  {
    name: 'IPv6SubnetLen network + 2, and explicit bounds',
    fields:
      '"IPv6Network":"fd00::/56","IPv6SubnetLen":58,"IPv6SubnetMin":"fd00:0:0:40::","IPv6SubnetMax":"fd00:0:0:40::"',
    network: 'fd00::/56',
    subnetLen: 58,
    min: 'fd00:0:0:40::',
    max: 'fd00:0:0:40::',
  },
  {
    name: 'IPv6SubnetMin may be the network itself, bounds in any case of key and hex',
    fields:
      '"ipv6network":"fd00::/56","IPV6SUBNETLEN":60,"ipv6SubnetMin":"FD00::","IPv6SubnetMax":"fd00:0:0:0070::"',
    network: 'fd00::/56',
    subnetLen: 60,
    min: 'fd00::',
    max: 'fd00:0:0:70::',
  },
  {
    // flannel reads any valid spelling (Go's net.ParseCIDR); twill keeps the canonical one
    name: 'IPv6Network not canonical (zeros written out, upper case) is taken canonicalised',
    fields:
      '"IPv6Network":"FD00:10:244:0::/56","IPv6SubnetMin":"FD00:10:244:0:0::","IPv6SubnetMax":"fd00:0010:244:00ff::"',
    network: 'fd00:10:244::/56',
    subnetLen: 64,
    min: 'fd00:10:244::',
    max: 'fd00:10:244:ff::',
  },
  {
    name: 'the whole space (::/0)',
    fields: '"IPv6Network":"::/0"',
    network: '::/0',
    subnetLen: 64,
    min: '0:0:0:1::',
    max: 'ffff:ffff:ffff:ffff::',
  },
];

describe('parseNetConfig: dual-stack', () => {
  it('an IPv4-only config has ipv6 null', () => {
    expect(parseNetConfig(`{${NET}}`).ipv6).toBeNull();
    expect(parseNetConfig(`{${NET},"EnableIPv6":false}`).ipv6).toBeNull();
    expect(parseNetConfig(`{${NET},"EnableIPv4":true,"IPv6Network":null}`).ipv6).toBeNull();
  });

  it.each(GOOD6)('$name', (row) => {
    const cfg = parseNetConfig(`{${NET},"EnableIPv6":true,${row.fields}}`);
    const ipv6 = cfg.ipv6;
    expect(ipv6).not.toBeNull();
    if (!ipv6) return;
    expect({
      network: formatCidr6(ipv6.network),
      subnetLen: ipv6.subnetLen,
      min: formatIpv6(ipv6.subnetMin),
      max: formatIpv6(ipv6.subnetMax),
      unknownKeys: cfg.unknownKeys,
    }).toStrictEqual({
      network: row.network,
      subnetLen: row.subnetLen,
      min: row.min,
      max: row.max,
      unknownKeys: [],
    });
    // the IPv4 half is unchanged by IPv6
    expect(cfg.ipv4 && formatCidr(cfg.ipv4.network)).toBe('10.244.0.0/16');
    expect(cfg.ipv4?.subnetLen).toBe(24);
  });

  it('IPv6 only: EnableIPv4 false leaves no IPv4 half, and the IPv6 one as in dual-stack', () => {
    const cfg = parseNetConfig(
      '{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}',
    );
    expect(cfg.ipv4).toBeNull();
    const v6 = cfg.ipv6;
    if (!v6) throw new Error('no IPv6 half');
    expect({
      network: formatCidr6(v6.network),
      subnetLen: v6.subnetLen,
      min: formatIpv6(v6.subnetMin),
      max: formatIpv6(v6.subnetMax),
    }).toStrictEqual({
      network: 'fd00:10:244::/56',
      subnetLen: 64,
      min: 'fd00:10:244:1::',
      max: 'fd00:10:244:ff::',
    });
    expect(cfg.unknownKeys).toStrictEqual([]);
  });

  it('IPv6 only, keys in any case (as flannel reads them)', () => {
    const cfg = parseNetConfig(
      '{"enableipv4":false,"ENABLEIPV6":true,"ipv6network":"2001:db8:42::/48","IPv6SubnetLen":56}',
    );
    expect(cfg.ipv4).toBeNull();
    expect(cfg.ipv6?.subnetLen).toBe(56);
  });

  it('keeps the IPv4 network mandatory with IPv6 enabled', () => {
    const err = failure('{"EnableIPv6":true,"IPv6Network":"fd00::/56"}');
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.message).toContain('"Network" is required');
  });

  it('a dual-stack host-gw config (as kube-flannel writes it)', () => {
    const cfg = parseNetConfig(
      '{"Network":"10.244.0.0/16","EnableIPv4":true,"EnableIPv6":true,"IPv6Network":"2001:cafe:42::/56","Backend":{"Type":"host-gw"}}',
    );
    expect(cfg.backend).toStrictEqual({ type: 'host-gw' });
    expect(cfg.ipv6 && formatCidr6(cfg.ipv6.network)).toBe('2001:cafe:42::/56');
  });
});

describe('parseNetConfig: unknown keys', () => {
  it('lists top-level and Backend keys in their spelling', () => {
    const cfg = parseNetConfig(`{${NET},"fOO":1,"Backend":{"Type":"vxlan","Bar":2,"VNI":3}}`);
    expect(cfg.unknownKeys).toStrictEqual(['fOO', 'Backend.Bar']);
  });

  it('knows every documented key in any case', () => {
    const text = JSON.stringify({
      network: '10.244.0.0/16',
      subnetlen: 24,
      SUBNETMIN: '10.244.1.0',
      subnetMax: '10.244.9.0',
      enableipv4: true,
      EnableIpv6: false,
      backend: {
        TYPE: 'vxlan',
        vni: 1,
        port: 8472,
        mtu: 1500,
        directrouting: false,
        gbp: false,
        learning: false,
      },
    });
    expect(parseNetConfig(text).unknownKeys).toStrictEqual([]);
  });

  it('prefixes unknown keys of a host-gw Backend with "Backend."', () => {
    const cfg = parseNetConfig(`{${NET},"Backend":{"Type":"host-gw","VNI":1}}`);
    expect(cfg.unknownKeys).toStrictEqual(['Backend.VNI']);
  });

  it('does not report IPv6Network null as unknown', () => {
    const cfg = parseNetConfig(`{${NET},"IPv6Network":null}`);
    expect(cfg.unknownKeys).toStrictEqual([]);
  });
});

describe('parseNetConfig: EnableNFTables', () => {
  it('is false (iptables mode) unless set', () => {
    expect(parseNetConfig(`{${NET}}`).nftables).toBe(false);
    expect(parseNetConfig(`{${NET},"EnableNFTables":false}`).nftables).toBe(false);
    // null is unset, as for every other key
    expect(parseNetConfig(`{${NET},"EnableNFTables":null}`).nftables).toBe(false);
  });

  it('turns nftables mode on, in any case, without being an unknown key', () => {
    for (const key of ['EnableNFTables', 'enablenftables', 'ENABLENFTABLES']) {
      const cfg = parseNetConfig(`{${NET},"${key}":true}`);
      expect(cfg.nftables, key).toBe(true);
      expect(cfg.unknownKeys, key).toStrictEqual([]);
    }
  });

  it.each([
    ['a string', '"true"', '"true"'],
    ['a number', '1', '1'],
    ['an object', '{"on":true}', '{"on":true}'],
  ])('refuses %s, naming the key and the value', (_name, value, shown) => {
    const err = failure(`{${NET},"EnableNFTables":${value}}`);
    expect(err.code).toBe('CONFIG_INVALID');
    expect(err.message).toContain('"EnableNFTables"');
    expect(err.message).toContain(shown);
  });
});
