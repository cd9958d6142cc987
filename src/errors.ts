// The typed errors of twill. Every error carries a stable `code` string so
// that callers branch on codes, not on messages, and messages name the field
// and the value that was wrong (docs/design.md, rule 9).

export type ErrorCode =
  | 'CONFIG_INVALID'
  | 'CONFIG_MISSING'
  | 'CONFIG_UNSUPPORTED'
  | 'FLAG_INVALID'
  | 'LEASE_INVALID'
  | 'SUBNETS_EXHAUSTED'
  | 'LEASE_LOST'
  | 'LEASE_TAKEN'
  | 'IDENTITY_CONFLICT'
  | 'STORE_UNAVAILABLE'
  | 'COMMAND_FAILED'
  | 'SYSCTL_FAILED'
  | 'IFACE_NOT_FOUND'
  | 'SUBNET_ENV_INVALID'
  | 'CNI_FAILED'
  /** a part of the daemon that runs until stopped ended on its own (a bug: the daemon stops) */
  | 'LOOP_ENDED';

export class TwillError extends Error {
  readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = 'TwillError';
  }
}

/** True when `err` is a TwillError carrying `code`. */
export function hasCode(err: unknown, code: ErrorCode): err is TwillError {
  return err instanceof TwillError && err.code === code;
}

/** A short text for logs from anything thrown. */
export function describeError(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}
