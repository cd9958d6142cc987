// HTTP/2's error codes (RFC 9113 section 7) and the two errors that carry them: one that ends the
// whole connection (we send GOAWAY with its code) and one that ends a single stream (RST_STREAM).
// Apart from the frame codec because the connection, its streams and etcd-grpc.ts all name them.

/** RFC 9113 section 7: error codes of RST_STREAM and GOAWAY. */
export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  CONNECT_ERROR: 0xa,
  ENHANCE_YOUR_CALM: 0xb,
  INADEQUATE_SECURITY: 0xc,
  HTTP_1_1_REQUIRED: 0xd,
} as const;

const ERROR_NAMES = Object.fromEntries(Object.entries(ErrorCode).map(([k, v]) => [v, k]));

/** An error code by name, for messages: "PROTOCOL_ERROR", or the number when unknown. */
export function errorName(code: number): string {
  return ERROR_NAMES[code] ?? `error ${code}`;
}

/** The connection broke the protocol, by us or by the server; `code` is what GOAWAY carried. */
export class H2ConnectionError extends Error {
  readonly code: number;

  constructor(code: number, message: string) {
    super(message);
    this.name = 'H2ConnectionError';
    this.code = code;
  }
}

/** A stream ended by RST_STREAM: from the server (`remote`) or from us, for a malformed reply. */
export class H2StreamError extends Error {
  readonly code: number;
  readonly remote: boolean;

  constructor(code: number, message: string, remote: boolean) {
    super(message);
    this.name = 'H2StreamError';
    this.code = code;
    this.remote = remote;
  }
}

/** The server broke a rule of the protocol: the connection ends with PROTOCOL_ERROR. */
export function protocolError(message: string): H2ConnectionError {
  return new H2ConnectionError(ErrorCode.PROTOCOL_ERROR, `${message} (PROTOCOL_ERROR)`);
}

/** A frame of a length its type does not allow: the connection ends with FRAME_SIZE_ERROR. */
export function frameSizeError(what: string, length: number): H2ConnectionError {
  return new H2ConnectionError(
    ErrorCode.FRAME_SIZE_ERROR,
    `${what} frame of ${length} bytes (FRAME_SIZE_ERROR)`,
  );
}

/** A window went past its bounds: the connection ends with FLOW_CONTROL_ERROR. */
export function flowControlError(message: string): H2ConnectionError {
  return new H2ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, message);
}
