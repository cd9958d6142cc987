// HPACK (src/lease/hpack.ts): integers, the Huffman code against rows of RFC 7541 Appendix B, the
// decoder against the Appendix C examples (with and without Huffman, with evictions), and the
// bounds a hostile header block runs into; the encoder read back by the decoder.
import { describe, expect, it } from 'vitest';
import {
  decodeInteger,
  encodeHeaders,
  encodeInteger,
  HpackDecoder,
  HpackError,
  huffmanCode,
  huffmanDecode,
  type HeaderField,
} from '../../src/lease/hpack.ts';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

describe('integers (RFC 7541 C.1)', () => {
  it('encodes and decodes 10 and 1337 with a 5-bit prefix, and 42 at an octet boundary', () => {
    const out: number[] = [];
    encodeInteger(out, 10, 5, 0);
    expect(out).toEqual([0x0a]);
    out.length = 0;
    encodeInteger(out, 1337, 5, 0);
    expect(out).toEqual([0x1f, 0x9a, 0x0a]);
    out.length = 0;
    encodeInteger(out, 42, 8, 0);
    expect(out).toEqual([0x2a]);
    expect(decodeInteger(Buffer.from([0xea]), 0, 5)).toEqual([10, 1]);
    expect(decodeInteger(Buffer.from([0x1f, 0x9a, 0x0a]), 0, 5)).toEqual([1337, 3]);
  });

  it('refuses a truncated integer and one past 2^31-1', () => {
    expect(() => decodeInteger(Buffer.from([0x1f, 0x9a]), 0, 5)).toThrow(HpackError);
    expect(() => decodeInteger(Buffer.from([0x1f, 0xff, 0xff, 0xff, 0xff, 0x7f]), 0, 5)).toThrow(
      /too large/,
    );
  });
});

/** A Huffman encoder for the tests, from the decoder's own code table. */
function huffmanEncode(data: Buffer): Buffer {
  const bytes: number[] = [];
  let acc = 0n;
  let bits = 0;
  for (const b of data) {
    const { code, bits: n } = huffmanCode(b);
    acc = (acc << BigInt(n)) | BigInt(code);
    bits += n;
    while (bits >= 8) {
      bits -= 8;
      bytes.push(Number((acc >> BigInt(bits)) & 0xffn));
    }
  }
  if (bits > 0)
    bytes.push(Number(((acc << BigInt(8 - bits)) | ((1n << BigInt(8 - bits)) - 1n)) & 0xffn));
  return Buffer.from(bytes);
}

describe('Huffman code (RFC 7541 Appendix B)', () => {
  it('builds the codes of the appendix from the code lengths', () => {
    // [symbol, code (right-aligned), bits], rows of the appendix
    const rows: [number, number, number][] = [
      [0, 0x1ff8, 13],
      [1, 0x7fffd8, 23],
      [9, 0xffffea, 24],
      [10, 0x3ffffffc, 30],
      [32, 0x14, 6],
      [48, 0x0, 5],
      [58, 0x5c, 7],
      [92, 0x7fff0, 19],
      [97, 0x3, 5],
      [116, 0x9, 5],
      [127, 0xffffffc, 28],
      [128, 0xfffe6, 20],
      [195, 0x7fff1, 19],
      [203, 0x7ffffde, 27],
      [249, 0xffffffe, 28],
      [255, 0x3ffffee, 26],
      [256, 0x3fffffff, 30],
    ];
    for (const [symbol, code, bits] of rows) expect(huffmanCode(symbol)).toEqual({ code, bits });
  });

  it('decodes "www.example.com" and "no-cache" (C.4) and every byte value', () => {
    expect(huffmanDecode(hex('f1e3 c2e5 f23a 6ba0 ab90 f4ff')).toString()).toBe('www.example.com');
    expect(huffmanDecode(hex('a8eb 1064 9cbf')).toString()).toBe('no-cache');
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    expect(huffmanDecode(huffmanEncode(all))).toEqual(all);
    expect(huffmanDecode(Buffer.alloc(0))).toEqual(Buffer.alloc(0));
  });

  it('refuses padding that is not ones, padding of 8 bits or more, and EOS', () => {
    // 'a' is 00011: padded with zeros instead of ones
    expect(() => huffmanDecode(Buffer.from([0b00011000]))).toThrow(/not all ones/);
    // 'a' then a whole byte of ones
    expect(() => huffmanDecode(Buffer.from([0b00011111, 0xff]))).toThrow(/longer than 7/);
    // EOS (30 ones) then padding
    expect(() => huffmanDecode(Buffer.from([0xff, 0xff, 0xff, 0xff]))).toThrow(/EOS/);
  });
});

const REQUESTS: HeaderField[][] = [
  [
    [':method', 'GET'],
    [':scheme', 'http'],
    [':path', '/'],
    [':authority', 'www.example.com'],
  ],
  [
    [':method', 'GET'],
    [':scheme', 'http'],
    [':path', '/'],
    [':authority', 'www.example.com'],
    ['cache-control', 'no-cache'],
  ],
  [
    [':method', 'GET'],
    [':scheme', 'https'],
    [':path', '/index.html'],
    [':authority', 'www.example.com'],
    ['custom-key', 'custom-value'],
  ],
];
const REQUEST_TABLE_SIZES = [57, 110, 164];

const DATE1 = 'Mon, 21 Oct 2013 20:13:21 GMT';
const DATE2 = 'Mon, 21 Oct 2013 20:13:22 GMT';
const URL = 'https://www.example.com';
const COOKIE = 'foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1';
const RESPONSES: HeaderField[][] = [
  [
    [':status', '302'],
    ['cache-control', 'private'],
    ['date', DATE1],
    ['location', URL],
  ],
  [
    [':status', '307'],
    ['cache-control', 'private'],
    ['date', DATE1],
    ['location', URL],
  ],
  [
    [':status', '200'],
    ['cache-control', 'private'],
    ['date', DATE2],
    ['location', URL],
    ['content-encoding', 'gzip'],
    ['set-cookie', COOKIE],
  ],
];
const RESPONSE_TABLES: HeaderField[][] = [
  [
    ['location', URL],
    ['date', DATE1],
    ['cache-control', 'private'],
    [':status', '302'],
  ],
  [
    [':status', '307'],
    ['location', URL],
    ['date', DATE1],
    ['cache-control', 'private'],
  ],
  [
    ['set-cookie', COOKIE],
    ['content-encoding', 'gzip'],
    ['date', DATE2],
  ],
];
const RESPONSE_TABLE_SIZES = [222, 222, 215];

describe('decoder (RFC 7541 Appendix C)', () => {
  it('decodes the single fields of C.2', () => {
    const d = new HpackDecoder(4096, 65536);
    expect(
      d.decode(hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572')),
    ).toEqual([['custom-key', 'custom-header']]);
    expect(d.dynamic.size).toBe(55);
    expect(d.decode(hex('040c 2f73 616d 706c 652f 7061 7468'))).toEqual([
      [':path', '/sample/path'],
    ]);
    expect(d.decode(hex('1008 7061 7373 776f 7264 0673 6563 7265 74'))).toEqual([
      ['password', 'secret'],
    ]);
    expect(d.decode(hex('82'))).toEqual([[':method', 'GET']]);
    // only the first was added to the table
    expect(d.dynamic.entries).toEqual([['custom-key', 'custom-header']]);
  });

  it.each([
    [
      'C.3 (plain)',
      [
        '8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d',
        '8286 84be 5808 6e6f 2d63 6163 6865',
        '8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65',
      ],
    ],
    [
      'C.4 (Huffman)',
      [
        '8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff',
        '8286 84be 5886 a8eb 1064 9cbf',
        '8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf',
      ],
    ],
  ])('decodes the requests of %s, the table growing', (_, blocks) => {
    const d = new HpackDecoder(4096, 65536);
    blocks.forEach((b, i) => {
      expect(d.decode(hex(b))).toEqual(REQUESTS[i]);
      expect(d.dynamic.size).toBe(REQUEST_TABLE_SIZES[i]);
    });
  });

  it.each([
    [
      'C.5 (plain)',
      [
        '4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d',
        '4803 3330 37c1 c0bf',
        '88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31',
      ],
    ],
    [
      'C.6 (Huffman)',
      [
        '4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3',
        '4883 640e ffc1 c0bf',
        '88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07',
      ],
    ],
  ])('decodes the responses of %s in a 256-octet table, evicting', (_, blocks) => {
    const d = new HpackDecoder(256, 65536);
    blocks.forEach((b, i) => {
      expect(d.decode(hex(b))).toEqual(RESPONSES[i]);
      expect(d.dynamic.entries).toEqual(RESPONSE_TABLES[i]);
      expect(d.dynamic.size).toBe(RESPONSE_TABLE_SIZES[i]);
    });
  });

  it('applies a table size update at the start of a block, evicting, and refuses one later or too large', () => {
    const d = new HpackDecoder(4096, 65536);
    d.decode(hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572'));
    // 001xxxxx size 0: empties the table; then the entry is gone
    expect(d.decode(hex('20 82'))).toEqual([[':method', 'GET']]);
    expect(d.dynamic).toEqual({ entries: [], size: 0, max: 0 });
    expect(() => d.decode(hex('be'))).toThrow(/beyond the tables/);
    expect(() => d.decode(hex('82 20'))).toThrow(/after a header field/);
    // 3fe11f: 31 + 4065 = 4096 is allowed; 3fe21f = 4097 is not
    expect(() => d.decode(hex('3fe11f'))).not.toThrow();
    expect(() => d.decode(hex('3fe21f'))).toThrow(/over 4096/);
  });

  it('does not add an entry larger than the table, and empties it', () => {
    const d = new HpackDecoder(64, 65536);
    d.decode(hex('4001 61 0162')); // a: b, 34 octets
    expect(d.dynamic.size).toBe(34);
    // name "a", value of 40 octets: 73 > 64
    const big = Buffer.concat([hex('4001 61 28'), Buffer.alloc(40, 0x78)]);
    expect(d.decode(big)).toEqual([['a', 'x'.repeat(40)]]);
    expect(d.dynamic.entries).toEqual([]);
  });

  it('refuses index 0, truncated strings, and a header list over the limit (indexed entries count)', () => {
    const d = new HpackDecoder(4096, 200);
    expect(() => d.decode(hex('80'))).toThrow(/index 0/);
    expect(() => d.decode(hex('0003 6162'))).toThrow(/truncated/);
    // one 100-octet entry, then three references to it: 4 * 132 > 200
    const entry = Buffer.concat([hex('4001 61 63'), Buffer.alloc(99, 0x79)]);
    const d2 = new HpackDecoder(4096, 200);
    expect(() => d2.decode(Buffer.concat([entry, hex('bebebe')]))).toThrow(/larger than 200/);
  });
});

describe('encoder', () => {
  it('writes static matches as indexes and the rest as literals the decoder reads back', () => {
    const fields: HeaderField[] = [
      [':method', 'POST'],
      [':scheme', 'http'],
      [':path', '/etcdserverpb.KV/Range'],
      [':authority', '127.0.0.1:2379'],
      ['content-type', 'application/grpc'],
      ['te', 'trailers'],
      ['token', 'secret.42'],
      ['x-long', 'v'.repeat(300)],
    ];
    const block = encodeHeaders(fields);
    expect(block.subarray(0, 3)).toEqual(hex('83 86 04'));
    // the token is never indexed (0001xxxx), with a literal name
    expect(block.includes(hex('1005 746f6b656e'))).toBe(true);
    expect(new HpackDecoder(4096, 65536).decode(block)).toEqual(fields);
  });
});
