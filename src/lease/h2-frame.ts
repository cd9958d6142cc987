// HTTP/2's wire format (RFC 9113 sections 3.4, 4 and 6): the client preface, frame types, flags
// and settings ids, the 9-byte frame header, and the payloads that are plain data (SETTINGS and
// the values they may carry, GOAWAY, padding). Pure functions over buffers, so that the connection
// (h2-session.ts, h2.ts) holds only its state and its decisions.
import { flowControlError, frameSizeError, protocolError } from './h2-errors.ts';
import { MAX_WINDOW } from './h2-window.ts';

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

export const Flag = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

export const Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

export const FRAME_HEADER = 9;
/** RFC 9113 6.5.2: the largest frame payload until SETTINGS say otherwise, and the least allowed */
export const DEFAULT_MAX_FRAME = 16_384;
/** the largest SETTINGS_MAX_FRAME_SIZE allowed: the header's 24-bit length */
const LARGEST_MAX_FRAME = 0xffffff;

/** One frame: its 9-byte header and payload. */
export function encodeFrame(
  type: number,
  flags: number,
  streamId: number,
  payload: Buffer,
): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_HEADER + payload.length);
  frame.writeUIntBE(payload.length, 0, 3);
  frame[3] = type;
  frame[4] = flags;
  frame.writeUInt32BE(streamId, 5);
  payload.copy(frame, FRAME_HEADER);
  return frame;
}

/** A frame's header: payload length, type, flags and stream id (the reserved bit dropped). */
export function decodeFrameHeader(buf: Buffer, at = 0) {
  return {
    length: buf.readUIntBE(at, 3),
    type: buf[at + 3] as number,
    flags: buf[at + 4] as number,
    streamId: buf.readUInt32BE(at + 5) & 0x7fffffff,
  };
}

/** A 4-byte payload: RST_STREAM's error code, WINDOW_UPDATE's increment. */
export function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

/** A SETTINGS payload: each setting as 16-bit id and 32-bit value. */
export function encodeSettings(settings: readonly (readonly [number, number])[]): Buffer {
  const payload = Buffer.alloc(settings.length * 6);
  settings.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, i * 6);
    payload.writeUInt32BE(value, i * 6 + 2);
  });
  return payload;
}

/** The settings of a SETTINGS payload (not an ACK's), in order: [id, value]. */
export function decodeSettings(payload: Buffer): [number, number][] {
  if (payload.length % 6 !== 0) throw frameSizeError('SETTINGS', payload.length);
  const settings: [number, number][] = [];
  for (let at = 0; at < payload.length; at += 6)
    settings.push([payload.readUInt16BE(at), payload.readUInt32BE(at + 2)]);
  return settings;
}

/** Throws for a value that RFC 9113 6.5.2 does not allow the setting `id` to take. */
export function checkSetting(id: number, value: number): void {
  if (id === Setting.ENABLE_PUSH && value > 1) throw protocolError(`SETTINGS_ENABLE_PUSH ${value}`);
  if (id === Setting.INITIAL_WINDOW_SIZE && value > MAX_WINDOW)
    throw flowControlError(`SETTINGS_INITIAL_WINDOW_SIZE ${value}`);
  if (id === Setting.MAX_FRAME_SIZE && (value < DEFAULT_MAX_FRAME || value > LARGEST_MAX_FRAME))
    throw protocolError(`SETTINGS_MAX_FRAME_SIZE ${value}`);
}

/**
 * A GOAWAY payload from us: last stream id 0 (push is off, so the server opens no streams), the
 * code, and the start of `message` as debug data.
 */
export function encodeGoaway(code: number, message: string): Buffer {
  return Buffer.concat([u32(0), u32(code), Buffer.from(message.slice(0, 200), 'utf8')]);
}

/** The server's GOAWAY payload. */
export function decodeGoaway(payload: Buffer) {
  if (payload.length < 8) throw frameSizeError('GOAWAY', payload.length);
  return {
    lastStreamId: payload.readUInt32BE(0) & 0x7fffffff,
    code: payload.readUInt32BE(4),
    // the debug data is the server's text: shown, but short and printable only
    debug: payload
      .subarray(8, 208)
      .toString('latin1')
      .replace(/[^\x20-\x7e]/g, '?'),
  };
}

/** A DATA or HEADERS payload without its padding (and `skip` more leading bytes: priority). */
export function unpad(flags: number, payload: Buffer, skip: number, what: string): Buffer {
  let start = skip;
  let end = payload.length;
  if (flags & Flag.PADDED) {
    if (payload.length < 1) throw frameSizeError(what, payload.length);
    start += 1;
    end -= payload[0] as number;
  }
  if (end < start) throw protocolError(`${what} padding longer than its frame`);
  return payload.subarray(start, end);
}
