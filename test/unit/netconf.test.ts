// Unit tests of net-conf.json parsing: flannel's defaults and rules, the
// unsupported features, and errors that name the key and the bad value.
import { describe, expect, it } from 'vitest';
import { parseNetConfig, type BackendConfig } from '../../src/config/netconf.ts';
import { TwillError, type ErrorCode } from '../../src/errors.ts';
import { formatCidr, formatIpv4 } from '../../src/net/ipv4.ts';

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
    expect({
      network: formatCidr(cfg.network),
      subnetLen: cfg.subnetLen,
      min: formatIpv4(cfg.subnetMin),
      max: formatIpv4(cfg.subnetMax),
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
  ['EnableIPv6 true', `{${NET},"EnableIPv6":true}`, 'CONFIG_UNSUPPORTED', ['"EnableIPv6"', 'true']],
  [
    'IPv6Network present',
    `{${NET},"IPv6Network":"fd00::/56"}`,
    'CONFIG_UNSUPPORTED',
    ['"IPv6Network"', 'fd00::/56'],
  ],
  [
    'EnableIPv4 false',
    `{${NET},"EnableIPv4":false}`,
    'CONFIG_UNSUPPORTED',
    ['"EnableIPv4"', 'false'],
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
