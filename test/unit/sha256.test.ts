// Unit tests of the plain-JavaScript SHA-256 against node:crypto's: the FIPS 180-4 examples, every
// length across the padding boundaries (55, 56 and 64 bytes split the length field differently),
// UTF-8 text, and random inputs from the seeded generator. The VtepMAC derived from a node's name
// rests on it: a different digest would give a node a new MAC on upgrade.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { derivedVtepMac } from '../../src/daemon.ts';
import { sha256 } from '../../src/util/sha256.ts';
import { random as seeded } from '../helpers/random.ts';

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const reference = (d: string | Uint8Array): string => createHash('sha256').update(d).digest('hex');

describe('sha256', () => {
  it('gives the FIPS 180-4 example digests', () => {
    expect(hex(sha256(''))).toBe(
      'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    );
    expect(hex(sha256('abc'))).toBe(
      'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad',
    );
    expect(hex(sha256('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq'))).toBe(
      '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1',
    );
  });

  it('matches node:crypto for every length from 0 to 300 bytes', () => {
    for (let n = 0; n <= 300; n++) {
      const data = Uint8Array.from({ length: n }, (_, i) => (i * 31 + n) & 0xff);
      expect(hex(sha256(data)), `length ${n}`).toBe(reference(data));
    }
  });

  it('takes a string as its UTF-8 bytes', () => {
    for (const s of ['twill:node-1:1', 'nœud-ß-→-日本', 'twill:n1:1:v6'])
      expect(hex(sha256(s))).toBe(reference(s));
  });

  it('matches node:crypto on random inputs up to 4 KiB', () => {
    const random = seeded(17);
    for (let k = 0; k < 200; k++) {
      const data = Uint8Array.from({ length: Math.floor(random() * 4096) }, () =>
        Math.floor(random() * 256),
      );
      expect(hex(sha256(data))).toBe(reference(data));
    }
  });

  it('keeps the VtepMAC derived from a node name as node:crypto gave it', () => {
    // the first six bytes of sha256("twill:node-1:1"), locally administered and unicast
    const d = createHash('sha256').update('twill:node-1:1').digest();
    d[0] = ((d[0] ?? 0) & 0xfe) | 0x02;
    const want = [...d.subarray(0, 6)].map((b) => b.toString(16).padStart(2, '0')).join(':');
    expect(derivedVtepMac('node-1', 1)).toBe(want);
    expect(derivedVtepMac('node-1', 1, 6)).not.toBe(want);
  });
});
