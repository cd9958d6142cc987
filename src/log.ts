// The daemon's logger: JSON lines on stderr, one record a line, in the shape pino wrote them when
// twill used it, since operators and the lab parse them:
//   {"level":30,"time":<epoch ms>,"node":"<node name>",...fields,"msg":"..."}
// with pino's numeric levels. Lines are written synchronously so the last words before an exit
// are not lost. Every line is scrubbed on its way out: credentials inside URLs
// (scheme://user:pass@host) and the secrets the caller names (the etcd password) never reach the
// log. Logging never throws: a value that cannot be serialized, or a stderr nobody reads, must not
// take the daemon down.
import { writeSync } from 'node:fs';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** The levels a record can have: every level but `silent`, which only turns logging off. */
export type RecordLevel = Exclude<LogLevel, 'silent'>;

/** pino's numbers for the levels: tooling (and the lab) filters records on them (level >= 40). */
export const LEVEL_NUMBERS: Readonly<Record<RecordLevel, number>> = {
  trace: 10,
  debug: 20,
  info: 30,
  warn: 40,
  error: 50,
  fatal: 60,
};

/**
 * Logs one record: `(fields, msg)`, `(fields)` or `(msg)`. An Error as `fields` is logged as
 * `err`, with its message as the record's message when none is given.
 */
export interface LogFn {
  (msg: string): void;
  (fields: object, msg?: string): void;
}

export interface Logger {
  fatal: LogFn;
  error: LogFn;
  warn: LogFn;
  info: LogFn;
  debug: LogFn;
  trace: LogFn;
  /** Whether records of `level` are written: lets a caller skip building costly fields. */
  isLevelEnabled(level: RecordLevel): boolean;
}

/** Secrets shorter than this are not scrubbed from log lines: they would mangle ordinary words. */
export const MIN_SCRUBBED_SECRET = 4;

/**
 * Replaces the credentials of every URL in `text` (scheme://user:pass@host
 * becomes scheme://user:***@host, scheme://token@host becomes
 * scheme://***@host). Works on plain text and on JSON text alike.
 */
export function redactUrlCredentials(text: string): string {
  return text.replace(
    /\b([a-z][a-z0-9+.-]*:\/\/)([^\s/?#@"'<>]+)@/gi,
    (_all, scheme: string, userinfo: string) => {
      const colon = userinfo.indexOf(':');
      return colon < 0 ? `${scheme}***@` : `${scheme}${userinfo.slice(0, colon)}:***@`;
    },
  );
}

/** `text` with URL credentials and each of `secrets` (raw or JSON-escaped) replaced by ***. */
export function redact(text: string, secrets: readonly (string | undefined)[] = []): string {
  let out = redactUrlCredentials(text);
  for (const s of secrets) {
    if (s === undefined || s.length < MIN_SCRUBBED_SECRET) continue;
    const forms = new Set([s, JSON.stringify(s).slice(1, -1)]);
    for (const f of forms) out = out.split(f).join('***');
  }
  return out;
}

// JSON.rawJSON (Node 21 and later) is not in the ES2024 typings. A bigint is written as a JSON
// number, as pino wrote it, rather than making JSON.stringify throw.
const rawJSON = (JSON as unknown as { rawJSON: (text: string) => unknown }).rawJSON;

/**
 * `value` made safe for JSON.stringify: Errors become {type, message, stack, ...their own fields}
 * (which JSON.stringify would reduce to their own fields, without message or stack), bigints
 * become numbers and a reference back to an enclosing object becomes "[Circular]". `ancestors`
 * holds the objects being copied around `value`.
 */
function jsonSafe(value: unknown, ancestors: object[]): unknown {
  if (typeof value === 'bigint') return rawJSON(value.toString());
  if (typeof value !== 'object' || value === null) return value;
  if (ancestors.includes(value)) return '[Circular]';
  ancestors.push(value);
  try {
    if (value instanceof Error) return errorFields(value, ancestors);
    // what JSON.stringify would write for it (a Date's ISO text, a Buffer's bytes)
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') return jsonSafe(toJSON.call(value), ancestors);
    if (Array.isArray(value)) return value.map((v) => jsonSafe(v, ancestors));
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = jsonSafe(v, ancestors);
    return out;
  } finally {
    ancestors.pop();
  }
}

function errorFields(e: Error, ancestors: object[]): Record<string, unknown> {
  const out: Record<string, unknown> = {
    type: typeof e.constructor === 'function' ? e.constructor.name : e.name,
    message: e.message,
    stack: e.stack,
  };
  // a system error's code, errno, syscall and the like
  for (const [k, v] of Object.entries(e)) out[k] = jsonSafe(v, ancestors);
  // neither is an own enumerable field, yet both say what went wrong (a failed connect to several
  // addresses throws an AggregateError holding one error per address)
  if (e.cause !== undefined) out.cause = jsonSafe(e.cause, ancestors);
  if (e instanceof AggregateError) out.errors = jsonSafe(e.errors, ancestors);
  return out;
}

/** The JSON line (with its newline) of one record. */
function formatRecord(
  level: number,
  bindings: Readonly<Record<string, unknown>>,
  first: unknown,
  msg: unknown,
): string {
  const time = Date.now();
  try {
    const rec: Record<string, unknown> = { level, time, ...bindings };
    if (typeof first === 'string') msg = first;
    else if (first instanceof Error) {
      rec.err = first;
      msg ??= first.message;
    } else if (typeof first === 'object' && first !== null) Object.assign(rec, first);
    // a field must not pass for the record's own level or time, which readers filter on
    rec.level = level;
    rec.time = time;
    if (msg !== undefined) rec.msg = msg;
    return `${JSON.stringify(jsonSafe(rec, []))}\n`;
  } catch (err) {
    // a getter that throws, nesting too deep for the stack: the message still gets out
    const why = err instanceof Error ? err.message : 'unknown';
    const text = typeof msg === 'string' ? msg : typeof first === 'string' ? first : undefined;
    const line = { level, time, ...bindings, msg: text, logError: `fields not logged: ${why}` };
    try {
      return `${JSON.stringify(line)}\n`;
    } catch {
      return `${JSON.stringify({ level, time, logError: 'record not logged' })}\n`;
    }
  }
}

/** How long one line may wait for a full stderr pipe to drain before the rest of it is dropped. */
export const FULL_PIPE_PATIENCE_MS = 1_000;

const nap = new Int32Array(new SharedArrayBuffer(4));

/**
 * Writes all of `text` to `fd` before returning. stderr is a pipe under a container runtime and
 * is non-blocking once anything in the process touches process.stderr (Node sets O_NONBLOCK on
 * it), so a burst of lines can fill it and writeSync then fails with EAGAIN: the write is retried
 * every millisecond until the reader catches up, for at most FULL_PIPE_PATIENCE_MS (a stuck
 * reader must not stall the daemon for good). Any other failure (EPIPE: nobody reads stderr any
 * more) drops the line. `write` is fs.writeSync's shape, replaceable to test the retries.
 */
export function writeLine(
  fd: number,
  text: string,
  write: (fd: number, buf: Uint8Array, offset: number, length: number) => number = writeSync,
): void {
  const buf = Buffer.from(text);
  let done = 0;
  let deadline: number | undefined;
  while (done < buf.length) {
    try {
      done += write(fd, buf, done, buf.length - done);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') return;
      deadline ??= Date.now() + FULL_PIPE_PATIENCE_MS;
      if (Date.now() >= deadline) return;
      // a synchronous sleep: the line must be out before the caller goes on (or exits)
      Atomics.wait(nap, 0, 0, 1);
    }
  }
}

export function createLogger(opts: {
  level: LogLevel;
  node: string;
  secrets?: readonly (string | undefined)[];
  /** Where each line (ending in a newline) goes; stderr by default. Tests capture them here. */
  write?: (line: string) => void;
}): Logger {
  const secrets = opts.secrets ?? [];
  const write = opts.write ?? ((line: string): void => writeLine(2, line));
  const bindings = { node: opts.node };
  const threshold = opts.level === 'silent' ? Infinity : LEVEL_NUMBERS[opts.level];
  const method = (level: RecordLevel): LogFn => {
    const n = LEVEL_NUMBERS[level];
    if (n < threshold) return () => {};
    return (first: object | string, msg?: string): void => {
      try {
        write(redact(formatRecord(n, bindings, first, msg), secrets));
      } catch {
        // a sink that throws (a test's, or a broken redaction) loses the line, not the daemon
      }
    };
  };
  return {
    fatal: method('fatal'),
    error: method('error'),
    warn: method('warn'),
    info: method('info'),
    debug: method('debug'),
    trace: method('trace'),
    isLevelEnabled: (level) => LEVEL_NUMBERS[level] >= threshold,
  };
}
