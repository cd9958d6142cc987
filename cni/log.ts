// The plugin's log: JSON lines appended to `logFile`, or to stderr when none
// is configured (stdout carries only the CNI result). Synchronous, so the
// last line is written before the process exits.
import { appendFileSync } from 'node:fs';

export interface CniLog {
  info(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

function write(file: string | undefined, line: string): void {
  if (file !== undefined) {
    try {
      appendFileSync(file, line);
      return;
    } catch {
      // an unwritable log file must not fail the call: fall back to stderr
    }
  }
  process.stderr.write(line);
}

export function createLog(o: { file: string | undefined; base: Record<string, unknown> }): CniLog {
  const emit = (level: string, msg: string, fields?: Record<string, unknown>): void =>
    write(
      o.file,
      `${JSON.stringify({ time: new Date().toISOString(), level, pid: process.pid, ...o.base, msg, ...fields })}\n`,
    );
  return {
    info: (msg, fields) => emit('info', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
  };
}
