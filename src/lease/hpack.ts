// HPACK (RFC 7541), as much as an HTTP/2 client needs: an encoder that writes every field as a
// literal without indexing (or as a static-table index where one matches exactly), so it never
// has a dynamic table of its own to keep in step, and a complete decoder for what a server sends
// (indexed fields, literals with, without and never indexing, dynamic table size updates, Huffman
// strings), bounded so a hostile peer cannot make it hold more than the limits it is given.

/** A header block the peer sent is not valid HPACK, or is larger than allowed. */
export class HpackError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HpackError';
  }
}

/** One header field: name (lower case) and value, as latin1 strings (one character a byte). */
export type HeaderField = readonly [name: string, value: string];

/** RFC 7541 Appendix A: the static table, index 1 first. */
export const STATIC_TABLE: readonly HeaderField[] = [
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];

/**
 * RFC 7541 Appendix B: the length in bits of the Huffman code of each symbol, bytes 0-255 and
 * EOS (256) last, sixteen a row. The code is canonical (codes of one length are consecutive, in
 * symbol order, after every shorter code), so the lengths alone define it: the codes are built
 * from them below, and the unit tests check them against rows of the appendix.
 */
// prettier-ignore
const HUFFMAN_LENGTHS = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
  28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
  6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
  5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
  13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
  7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
  15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
  6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
  20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
  24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
  22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
  21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
  26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
  19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
  20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
  26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
  30,
];

const EOS = 256;
const MAX_CODE_BITS = 30;

/** The canonical decoding tables: per length, the first code, how many, and their symbols. */
interface HuffmanTables {
  /** the code of each symbol, right-aligned (for the tests) */
  readonly codes: readonly number[];
  readonly first: readonly number[];
  readonly count: readonly number[];
  /** index in `symbols` of the first symbol of each length */
  readonly offset: readonly number[];
  /** symbols ordered by code length, then value: the order of their codes */
  readonly symbols: readonly number[];
}

function buildHuffman(): HuffmanTables {
  const symbols = HUFFMAN_LENGTHS.map((_, s) => s).sort(
    (a, b) => (HUFFMAN_LENGTHS[a] as number) - (HUFFMAN_LENGTHS[b] as number) || a - b,
  );
  const codes: number[] = new Array<number>(HUFFMAN_LENGTHS.length).fill(0);
  const first: number[] = new Array<number>(MAX_CODE_BITS + 1).fill(0);
  const count: number[] = new Array<number>(MAX_CODE_BITS + 1).fill(0);
  const offset: number[] = new Array<number>(MAX_CODE_BITS + 1).fill(0);
  let code = 0;
  let len = 0;
  symbols.forEach((s, i) => {
    const l = HUFFMAN_LENGTHS[s] as number;
    if (l !== len) {
      code *= 2 ** (l - len);
      len = l;
      first[l] = code;
      offset[l] = i;
    }
    codes[s] = code;
    count[l] = (count[l] as number) + 1;
    code++;
  });
  // a complete prefix code ends exactly at 2^30 after its last (longest) code
  if (code !== 2 ** MAX_CODE_BITS) throw new Error('HPACK Huffman table is not a complete code');
  return { codes, first, count, offset, symbols };
}

const HUFFMAN = buildHuffman();

/** Each symbol's Huffman code and its length in bits (a test aid). */
export function huffmanCode(symbol: number): { code: number; bits: number } {
  return { code: HUFFMAN.codes[symbol] as number, bits: HUFFMAN_LENGTHS[symbol] as number };
}

/**
 * Decodes a Huffman-coded string (RFC 7541 section 5.2). Refuses the EOS symbol, and padding that
 * is longer than 7 bits or not the most significant bits of EOS (all ones).
 */
export function huffmanDecode(data: Buffer): Buffer {
  // each symbol takes 5 bits at least
  const out = Buffer.allocUnsafe(Math.ceil((data.length * 8) / 5));
  let n = 0;
  let code = 0;
  let len = 0;
  for (const byte of data) {
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1);
      len++;
      const index = code - (HUFFMAN.first[len] as number);
      if (len >= 5 && index >= 0 && index < (HUFFMAN.count[len] as number)) {
        const symbol = HUFFMAN.symbols[(HUFFMAN.offset[len] as number) + index] as number;
        if (symbol === EOS) throw new HpackError('Huffman string contains EOS');
        out[n++] = symbol;
        code = 0;
        len = 0;
      } else if (len >= MAX_CODE_BITS) {
        throw new HpackError('invalid Huffman code');
      }
    }
  }
  if (len > 7) throw new HpackError('Huffman padding longer than 7 bits');
  if (code !== 2 ** len - 1) throw new HpackError('Huffman padding is not all ones');
  return out.subarray(0, n);
}

/** The largest integer accepted in a header block: more is a hostile or broken peer. */
const MAX_INT = 2 ** 31 - 1;

/**
 * An HPACK integer with an N-bit prefix (RFC 7541 section 5.1) at `pos`: its value and the
 * position after it.
 */
export function decodeInteger(buf: Buffer, pos: number, prefixBits: number): [number, number] {
  const mask = 2 ** prefixBits - 1;
  if (pos >= buf.length) throw new HpackError('header block truncated in an integer');
  let value = (buf[pos++] as number) & mask;
  if (value < mask) return [value, pos];
  let shift = 0;
  for (;;) {
    if (pos >= buf.length) throw new HpackError('header block truncated in an integer');
    const b = buf[pos++] as number;
    value += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if (value > MAX_INT) throw new HpackError('integer in header block too large');
    if ((b & 0x80) === 0) return [value, pos];
  }
}

/** Appends an HPACK integer with an N-bit prefix, `flags` in the prefix byte's high bits. */
export function encodeInteger(out: number[], value: number, prefixBits: number, flags: number) {
  const mask = 2 ** prefixBits - 1;
  if (value < mask) {
    out.push(flags | value);
    return;
  }
  out.push(flags | mask);
  let rest = value - mask;
  while (rest >= 0x80) {
    out.push((rest % 0x80) | 0x80);
    rest = Math.floor(rest / 0x80);
  }
  out.push(rest);
}

const STATIC_NAME = new Map<string, number>();
const STATIC_FIELD = new Map<string, number>();
STATIC_TABLE.forEach(([name, value], i) => {
  if (!STATIC_NAME.has(name)) STATIC_NAME.set(name, i + 1);
  if (value !== '') STATIC_FIELD.set(`${name}\0${value}`, i + 1);
});

/** Fields whose values must never be put in a compression table on the way (RFC 7541 7.1.3). */
const SENSITIVE = new Set(['authorization', 'token']);

function pushString(out: number[], s: string): void {
  const bytes = Buffer.from(s, 'latin1');
  encodeInteger(out, bytes.length, 7, 0); // H = 0: not Huffman-coded
  for (const b of bytes) out.push(b);
}

/**
 * A header block for `fields`: a static-table index where a field matches one exactly, else a
 * literal without indexing (never indexed for credentials), its name indexed when the static
 * table has it. Names must be lower case.
 */
export function encodeHeaders(fields: readonly HeaderField[]): Buffer {
  const out: number[] = [];
  for (const [name, value] of fields) {
    const exact = STATIC_FIELD.get(`${name}\0${value}`);
    if (exact !== undefined) {
      encodeInteger(out, exact, 7, 0x80);
      continue;
    }
    // 0000xxxx: literal without indexing; 0001xxxx: never indexed
    const flags = SENSITIVE.has(name) ? 0x10 : 0x00;
    const nameIndex = STATIC_NAME.get(name) ?? 0;
    encodeInteger(out, nameIndex, 4, flags);
    if (nameIndex === 0) pushString(out, name);
    pushString(out, value);
  }
  return Buffer.from(out);
}

/** RFC 7541 section 4.1: an entry's size is its name and value in octets, plus 32. */
const entrySize = (name: string, value: string): number => name.length + value.length + 32;

/**
 * The decoding side of one connection: its dynamic table persists from block to block.
 * `maxTableSize` is the SETTINGS_HEADER_TABLE_SIZE we advertised (the most a size update may ask
 * for); `maxListSize` bounds each decoded block as SETTINGS_MAX_HEADER_LIST_SIZE counts it.
 */
export class HpackDecoder {
  private readonly maxTableSize: number;
  private readonly maxListSize: number;
  private tableSize: number;
  /** newest first: index 62 is the first element */
  private readonly table: HeaderField[] = [];
  private used = 0;

  constructor(maxTableSize: number, maxListSize: number) {
    this.maxTableSize = maxTableSize;
    this.tableSize = maxTableSize;
    this.maxListSize = maxListSize;
  }

  /** the dynamic table's entries and size in octets (a test aid) */
  get dynamic(): { entries: readonly HeaderField[]; size: number; max: number } {
    return { entries: this.table, size: this.used, max: this.tableSize };
  }

  /**
   * One whole header block (HEADERS and its CONTINUATIONs joined). Throws HpackError for an
   * invalid block or one decoding to more than `maxListSize`; the connection is then unusable,
   * as its table may be out of step with the peer's.
   */
  decode(block: Buffer): HeaderField[] {
    const fields: HeaderField[] = [];
    let listSize = 0;
    let pos = 0;
    let sawField = false;
    while (pos < block.length) {
      const b = block[pos] as number;
      let field: HeaderField;
      if (b & 0x80) {
        // indexed field
        let index: number;
        [index, pos] = decodeInteger(block, pos, 7);
        field = this.entry(index);
      } else if ((b & 0xe0) === 0x20) {
        // dynamic table size update: only before the first field of a block
        if (sawField) throw new HpackError('table size update after a header field');
        let size: number;
        [size, pos] = decodeInteger(block, pos, 5);
        if (size > this.maxTableSize)
          throw new HpackError(`table size update to ${size}, over ${this.maxTableSize}`);
        this.tableSize = size;
        this.evict(0);
        continue;
      } else {
        // 01xxxxxx: literal with incremental indexing (6-bit index); 0000xxxx without indexing,
        // 0001xxxx never indexed (4-bit index)
        const indexing = (b & 0xc0) === 0x40;
        let index: number;
        [index, pos] = decodeInteger(block, pos, indexing ? 6 : 4);
        let name: string;
        if (index === 0) [name, pos] = this.string(block, pos);
        else name = this.entry(index)[0];
        let value: string;
        [value, pos] = this.string(block, pos);
        field = [name, value];
        if (indexing) this.insert(field);
      }
      sawField = true;
      listSize += entrySize(field[0], field[1]);
      if (listSize > this.maxListSize)
        throw new HpackError(`header list larger than ${this.maxListSize} bytes`);
      fields.push(field);
    }
    return fields;
  }

  private entry(index: number): HeaderField {
    if (index === 0) throw new HpackError('header index 0');
    if (index <= STATIC_TABLE.length) return STATIC_TABLE[index - 1] as HeaderField;
    const field = this.table[index - STATIC_TABLE.length - 1];
    if (!field) throw new HpackError(`header index ${index} beyond the tables`);
    return field;
  }

  private string(block: Buffer, at: number): [string, number] {
    const huffman = ((block[at] as number) & 0x80) !== 0;
    const [len, pos] = decodeInteger(block, at, 7);
    if (pos + len > block.length) throw new HpackError('header block truncated in a string');
    const raw = block.subarray(pos, pos + len);
    return [(huffman ? huffmanDecode(raw) : raw).toString('latin1'), pos + len];
  }

  /** Evicts the oldest entries until `room` more octets fit. */
  private evict(room: number): void {
    while (this.table.length > 0 && this.used + room > this.tableSize) {
      const [name, value] = this.table.pop() as HeaderField;
      this.used -= entrySize(name, value);
    }
  }

  private insert(field: HeaderField): void {
    const size = entrySize(field[0], field[1]);
    // an entry larger than the table empties it and is not added (RFC 7541 section 4.4)
    this.evict(size);
    if (size > this.tableSize) return;
    this.table.unshift(field);
    this.used += size;
  }
}
