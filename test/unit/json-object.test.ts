// Unit tests of src/config/json-object.ts: case-insensitive keys as Go's encoding/json matches
// them, with and without the `known` names that let a lease value skip the lower-case index.
import { describe, expect, it } from 'vitest';
import { CiObject } from '../../src/config/json-object.ts';
import { TwillError } from '../../src/errors.ts';

const KNOWN: ReadonlySet<string> = new Set(['PublicIP', 'BackendType', 'VNI']);

describe.each([
  ['without known names', undefined],
  ['with known names', KNOWN],
])('CiObject %s', (_, known) => {
  const ci = (obj: unknown): CiObject => CiObject.from('value', obj, 'LEASE_INVALID', known);

  it('finds a key as spelled and in any other case; null reads as absent', () => {
    const o = ci({ PublicIP: '10.0.0.1', backendtype: 'vxlan', VNI: null });
    expect(o.get('PublicIP')).toBe('10.0.0.1');
    expect(o.get('publicip')).toBe('10.0.0.1');
    expect(o.string('BackendType')).toBe('vxlan');
    expect(o.get('VNI')).toBeUndefined();
    expect(o.has('VNI')).toBe(false);
    expect(o.has('PUBLICIP')).toBe(true);
    expect(o.get('Missing')).toBeUndefined();
    // every key known: a name in another case is still found
    expect(ci({ PublicIP: 'a', VNI: 1 }).get('PUBLICIP')).toBe('a');
    expect(ci({ PublicIP: 'a', VNI: 1 }).has('vni')).toBe(true);
    // and a known name that is not there, in any case, is absent
    expect(ci({ PublicIP: 'a', VNI: 1 }).get('BackendType')).toBeUndefined();
    expect(ci({ PublicIP: 'a', backendTYPE: 'x' }).get('BackendType')).toBe('x');
  });

  it('refuses two keys that differ only in case, whichever is known', () => {
    expect(() => ci({ PublicIP: 'a', publicip: 'b' })).toThrow(
      /keys "PublicIP" and "publicip" are the same key/,
    );
    expect(() => ci({ vni: 1, VNI: 2 })).toThrow(TwillError);
  });

  it('lists the keys no getter asked for, in their spelling', () => {
    const o = ci({ PublicIP: 'a', BackendType: 'host-gw', Extra: 1, vni: 2 });
    o.get('publicIP');
    o.get('VNI');
    expect(o.unknownKeys()).toStrictEqual(['BackendType', 'Extra']);
  });

  it('typed getters name the key and the value in their error', () => {
    expect(() => ci({ VNI: 'x' }).int('VNI', { min: 0, max: 9 })).toThrow(
      'value: "VNI" must be an integer from 0 to 9, got "x"',
    );
    expect(() => ci({ PublicIP: 7 }).string('PublicIP')).toThrow(
      'value: "PublicIP" must be a string, got 7',
    );
  });
});

it('a key named __proto__ is an own key like any other', () => {
  const o = CiObject.from(
    'value',
    JSON.parse('{"__proto__": 5, "VNI": 1}'),
    'LEASE_INVALID',
    KNOWN,
  );
  expect(o.get('__PROTO__')).toBe(5);
  expect(o.get('vni')).toBe(1);
});
