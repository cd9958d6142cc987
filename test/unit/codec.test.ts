// Unit tests of flannel's lease format: subnet keys, the exact JSON flannel
// writes, values written by flannel itself, and hostile values.
import { describe, expect, it } from 'vitest';
import { TwillError } from '../../src/errors.ts';
import {
  decodeLeaseValue,
  encodeLeaseValue,
  parseSubnetKey,
  subnetKey,
} from '../../src/lease/codec.ts';
import type { LeaseAttrs } from '../../src/lease/types.ts';
import { formatCidr } from '../../src/net/ipv4.ts';

function failure(fn: () => unknown): TwillError {
  try {
    fn();
  } catch (err) {
    if (err instanceof TwillError) return err;
    throw err;
  }
  throw new Error('expected a TwillError, but the call succeeded');
}

const VXLAN: LeaseAttrs = {
  publicIp: '10.0.0.5',
  publicIpv6: null,
  backendType: 'vxlan',
  backendData: { vni: 1, vtepMac: '0a:58:0a:f4:01:01' },
};
const HOST_GW: LeaseAttrs = {
  publicIp: '10.0.0.5',
  publicIpv6: null,
  backendType: 'host-gw',
  backendData: null,
};

describe('subnet keys', () => {
  it.each([
    ['10.244.3.0-24', '10.244.3.0/24'],
    ['10.244.0.0-16', '10.244.0.0/16'],
    ['192.168.1.128-25', '192.168.1.128/25'],
    ['0.0.0.0-0', '0.0.0.0/0'],
  ])('%s round-trips as %s', (key, text) => {
    const subnet = parseSubnetKey(key);
    expect(formatCidr(subnet)).toBe(text);
    expect(subnetKey(subnet)).toBe(key);
  });

  it.each([
    '10.244.3.1-24',
    '10.0.0.0-0',
    '10.244.3.0/24',
    'x',
    '',
    '10.244.3.0-33',
    '10.244.3.0-024',
    '010.244.3.0-24',
    '10.244.3.0-24 ',
  ])('refuses %j', (key) => {
    const err = failure(() => parseSubnetKey(key));
    expect(err.code).toBe('LEASE_INVALID');
    expect(err.message).toContain(JSON.stringify(key));
  });
});

describe('encodeLeaseValue', () => {
  it("writes exactly flannel's vxlan JSON", () => {
    expect(encodeLeaseValue(VXLAN)).toBe(
      '{"PublicIP":"10.0.0.5","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"0a:58:0a:f4:01:01"}}',
    );
  });

  it("writes exactly flannel's host-gw JSON, without BackendData", () => {
    expect(encodeLeaseValue(HOST_GW)).toBe(
      '{"PublicIP":"10.0.0.5","PublicIPv6":null,"BackendType":"host-gw"}',
    );
  });

  it.each([VXLAN, HOST_GW])('decode(encode(x)) is x for $backendType', (attrs) => {
    expect(decodeLeaseValue(encodeLeaseValue(attrs))).toStrictEqual(attrs);
  });
});

describe('decodeLeaseValue: values written by flannel', () => {
  it("refuses flannel's vxlan value without VNI, naming BackendData.VNI", () => {
    const err = failure(() =>
      decodeLeaseValue(
        '{"PublicIP":"192.168.56.11","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VtepMAC":"7e:1b:4f:9a:2c:01"}}',
      ),
    );
    expect(err.code).toBe('LEASE_INVALID');
    expect(err.message).toContain('BackendData.VNI');
  });

  it("accepts flannel's vxlan value with VNI", () => {
    const text =
      '{"PublicIP":"192.168.56.11","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"7e:1b:4f:9a:2c:01"}}';
    expect(decodeLeaseValue(text)).toStrictEqual({
      publicIp: '192.168.56.11',
      publicIpv6: null,
      backendType: 'vxlan',
      backendData: { vni: 1, vtepMac: '7e:1b:4f:9a:2c:01' },
    });
  });

  it('accepts flannel\'s host-gw value with "BackendData":null', () => {
    expect(
      decodeLeaseValue(
        '{"PublicIP":"192.168.56.12","PublicIPv6":null,"BackendType":"host-gw","BackendData":null}',
      ),
    ).toStrictEqual({
      publicIp: '192.168.56.12',
      publicIpv6: null,
      backendType: 'host-gw',
      backendData: null,
    });
  });

  it('matches keys case-insensitively and normalises an upper-case MAC', () => {
    const text =
      '{"publicip":"10.0.0.7","backendtype":"vxlan","backenddata":{"vni":4096,"vtepmac":"7E:1B:4F:9A:2C:0A"}}';
    expect(decodeLeaseValue(text)).toStrictEqual({
      publicIp: '10.0.0.7',
      publicIpv6: null,
      backendType: 'vxlan',
      backendData: { vni: 4096, vtepMac: '7e:1b:4f:9a:2c:0a' },
    });
  });
});

const mac = (m: string): string =>
  `{"PublicIP":"10.0.0.5","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"${m}"}}`;
const ip = (p: string): string => `{"PublicIP":${p},"BackendType":"host-gw"}`;

describe('decodeLeaseValue: hostile values', () => {
  it.each([
    ['garbage', 'not json at all', ['not JSON', 'not json at all']],
    ['empty text', '', ['not JSON']],
    [
      'an array',
      '[{"PublicIP":"10.0.0.5"}]',
      ['must be a JSON object', '[{"PublicIP":"10.0.0.5"}]'],
    ],
    ['null', 'null', ['must be a JSON object', 'null']],
    ['a number', '42', ['must be a JSON object', '42']],
    ['PublicIP 999.1.1.1', ip('"999.1.1.1"'), ['PublicIP', '999.1.1.1']],
    ['PublicIP short form', ip('"10.5"'), ['PublicIP', '10.5']],
    ['PublicIP with a space', ip('" 10.0.0.5"'), ['PublicIP', ' 10.0.0.5']],
    ['PublicIP missing', '{"BackendType":"host-gw"}', ['PublicIP', 'null']],
    ['PublicIP a number', ip('167772165'), ['PublicIP', '167772165']],
    ['BackendType udp', '{"PublicIP":"10.0.0.5","BackendType":"udp"}', ['BackendType', '"udp"']],
    ['BackendType missing', '{"PublicIP":"10.0.0.5"}', ['BackendType', '""']],
    [
      'BackendType upper case',
      '{"PublicIP":"10.0.0.5","BackendType":"VXLAN"}',
      ['BackendType', '"VXLAN"'],
    ],
    [
      'vxlan without BackendData',
      '{"PublicIP":"10.0.0.5","BackendType":"vxlan"}',
      ['BackendData', 'missing'],
    ],
    [
      'vxlan with BackendData null',
      '{"PublicIP":"10.0.0.5","BackendType":"vxlan","BackendData":null}',
      ['BackendData', 'missing'],
    ],
    [
      'BackendData a string',
      '{"PublicIP":"10.0.0.5","BackendType":"vxlan","BackendData":"x"}',
      ['BackendData', '"x"'],
    ],
    [
      'VNI a string',
      '{"PublicIP":"10.0.0.5","BackendType":"vxlan","BackendData":{"VNI":"1","VtepMAC":"0a:58:0a:f4:01:01"}}',
      ['"VNI"', '"1"'],
    ],
    [
      'VNI 2^24',
      '{"PublicIP":"10.0.0.5","BackendType":"vxlan","BackendData":{"VNI":16777216,"VtepMAC":"0a:58:0a:f4:01:01"}}',
      ['"VNI"', '16777216'],
    ],
    [
      'VtepMAC missing',
      '{"PublicIP":"10.0.0.5","BackendType":"vxlan","BackendData":{"VNI":1}}',
      ['BackendData.VtepMAC', 'missing'],
    ],
    [
      'multicast MAC',
      mac('01:00:5e:00:00:01'),
      ['BackendData.VtepMAC', '01:00:5e:00:00:01', 'multicast'],
    ],
    [
      'broadcast MAC',
      mac('ff:ff:ff:ff:ff:ff'),
      ['BackendData.VtepMAC', 'ff:ff:ff:ff:ff:ff', 'multicast'],
    ],
    [
      'all-zero MAC',
      mac('00:00:00:00:00:00'),
      ['BackendData.VtepMAC', '00:00:00:00:00:00', 'all-zero'],
    ],
    ['non-hex MAC', mac('zz:zz:zz:zz:zz:zz'), ['BackendData.VtepMAC', 'zz:zz:zz:zz:zz:zz']],
    ['short MAC', mac('0a:58:0a:f4:01'), ['BackendData.VtepMAC', '0a:58:0a:f4:01']],
    ['dash MAC', mac('0a-58-0a-f4-01-01'), ['BackendData.VtepMAC', '0a-58-0a-f4-01-01']],
    [
      'duplicate keys differing in case',
      '{"PublicIP":"10.0.0.5","publicip":"10.0.0.6","BackendType":"host-gw"}',
      ['"PublicIP"', '"publicip"'],
    ],
  ])('%s', (_name, text, parts) => {
    const err = failure(() => decodeLeaseValue(text));
    expect(err.code).toBe('LEASE_INVALID');
    for (const part of parts) expect(err.message).toContain(part);
  });

  it('normalises an upper-case MAC to lower case', () => {
    expect(decodeLeaseValue(mac('0A:58:0A:F4:01:FE')).backendData).toStrictEqual({
      vni: 1,
      vtepMac: '0a:58:0a:f4:01:fe',
    });
  });

  it('cuts a long garbage value short in the message', () => {
    const err = failure(() => decodeLeaseValue(`x${'y'.repeat(500)}`));
    expect(err.message.length).toBeLessThan(200);
  });
});
