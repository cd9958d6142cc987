// CNI errors: the spec's numeric codes and twill's own (100+), the error
// JSON a runtime reads on stdout, and the mapping from twill's typed errors
// to those codes. Messages name the field or file and the bad value.
import { TwillError } from '../src/errors.ts';

/** The spec's codes (1–99) and twill's (100+). */
export const CNI_CODES = {
  incompatibleVersion: 1,
  unknownContainer: 3,
  invalidEnv: 4,
  io: 5,
  decode: 6,
  invalidConfig: 7,
  tryAgain: 11,
  notAvailable: 50,
  internal: 100,
  command: 101,
  subnetEnv: 102,
  exhausted: 103,
  exists: 104,
  checkFailed: 105,
} as const;

export type CniCode = (typeof CNI_CODES)[keyof typeof CNI_CODES];

export class CniError extends TwillError {
  readonly cniCode: CniCode;
  readonly details: string | undefined;

  constructor(o: { cniCode: CniCode; message: string; details?: string; cause?: unknown }) {
    super('CNI_FAILED', o.message, { cause: o.cause });
    this.cniCode = o.cniCode;
    this.details = o.details;
    this.name = 'CniError';
  }
}

/** Shorthand: throws a CniError with `code` and `message`. */
export function fail(cniCode: CniCode, message: string, details?: string): never {
  throw new CniError({ cniCode, message, ...(details === undefined ? {} : { details }) });
}

const BY_TWILL_CODE: Partial<Record<string, CniCode>> = {
  CONFIG_INVALID: CNI_CODES.invalidConfig,
  COMMAND_FAILED: CNI_CODES.command,
  SUBNET_ENV_INVALID: CNI_CODES.subnetEnv,
  // a sysctl file that cannot be read or written (ip_forward)
  SYSCTL_FAILED: CNI_CODES.io,
};

/** Any thrown value as a CniError (unknown errors get code 100). */
export function asCniError(err: unknown): CniError {
  if (err instanceof CniError) return err;
  const message = err instanceof Error ? err.message : String(err);
  const code = err instanceof TwillError ? BY_TWILL_CODE[err.code] : undefined;
  const io = (err as NodeJS.ErrnoException | undefined)?.syscall !== undefined;
  return new CniError({
    cniCode: code ?? (io ? CNI_CODES.io : CNI_CODES.internal),
    message,
    cause: err,
  });
}

/** The error object a runtime reads on stdout. */
export function errorResult(cniVersion: string, err: CniError): Record<string, unknown> {
  return {
    cniVersion,
    code: err.cniCode,
    msg: err.message,
    ...(err.details ? { details: err.details } : {}),
  };
}
