// Header blocks as they arrive (RFC 9113 section 4.3): a HEADERS frame and its CONTINUATIONs
// joined and HPACK-decoded. Bounded against a hostile or broken server: a block over twice the
// header list limit, or of more than MAX_CONTINUATIONS frames, ends the connection (as the
// decoder's own limit on the decoded header list does). Every block is decoded, even one for a
// stream already closed, so that our HPACK table stays in step with the server's.
import { ErrorCode, H2ConnectionError, protocolError } from './h2-errors.ts';
import { Flag, unpad } from './h2-frame.ts';
import { HpackDecoder, type HeaderField } from './hpack.ts';

/** our HPACK table: the protocol's default, which our SETTINGS advertise */
export const OUR_TABLE_SIZE = 4_096;
/** most CONTINUATION frames in one header block: more is a flood, whatever their size */
const MAX_CONTINUATIONS = 64;

/** A whole header block, decoded. */
export interface HeaderBlock {
  readonly streamId: number;
  readonly endStream: boolean;
  readonly fields: HeaderField[];
}

interface PendingBlock {
  readonly streamId: number;
  readonly endStream: boolean;
  readonly chunks: Buffer[];
  size: number;
  frames: number;
}

export class HeaderBlockReader {
  private readonly decoder: HpackDecoder;
  private readonly maxBlock: number;
  private pending: PendingBlock | undefined;

  /** `maxListSize`: SETTINGS_MAX_HEADER_LIST_SIZE, which we advertise and enforce */
  constructor(maxListSize: number) {
    this.decoder = new HpackDecoder(OUR_TABLE_SIZE, maxListSize);
    // Huffman can make a legitimate block longer than the list it decodes to, a little
    this.maxBlock = 2 * maxListSize;
  }

  /** a block waits for its CONTINUATIONs: no other frame may come between */
  get open(): boolean {
    return this.pending !== undefined;
  }

  /** A HEADERS frame: its block when whole (END_HEADERS), else undefined until CONTINUATIONs. */
  headers(flags: number, id: number, payload: Buffer): HeaderBlock | undefined {
    const fragment = unpad(flags, payload, flags & Flag.PRIORITY ? 5 : 0, 'HEADERS');
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if (flags & Flag.END_HEADERS) return this.decode(id, endStream, fragment);
    this.pending = { streamId: id, endStream, chunks: [fragment], size: 0, frames: 0 };
    this.grow(fragment.length);
    return undefined;
  }

  /** A CONTINUATION frame: the block when this one ends it, else undefined. */
  continuation(flags: number, id: number, payload: Buffer): HeaderBlock | undefined {
    const b = this.pending;
    if (!b || b.streamId !== id) throw protocolError(`CONTINUATION on stream ${id} out of place`);
    b.chunks.push(payload);
    this.grow(payload.length);
    if (!(flags & Flag.END_HEADERS)) return undefined;
    this.pending = undefined;
    return this.decode(id, b.endStream, Buffer.concat(b.chunks));
  }

  /** Forgets a block in progress: the connection is over. */
  clear(): void {
    this.pending = undefined;
  }

  private grow(n: number): void {
    const b = this.pending as PendingBlock;
    b.size += n;
    b.frames++;
    if (b.size > this.maxBlock || b.frames > MAX_CONTINUATIONS)
      throw new H2ConnectionError(
        ErrorCode.ENHANCE_YOUR_CALM,
        `header block over ${this.maxBlock} bytes or ${MAX_CONTINUATIONS} frames`,
      );
  }

  private decode(streamId: number, endStream: boolean, block: Buffer): HeaderBlock {
    return { streamId, endStream, fields: this.decoder.decode(block) };
  }
}
