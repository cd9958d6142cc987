// The daemon's logger: pino, JSON lines to stderr, written synchronously so
// the last words before an exit are not lost.
import { pino, type Logger } from 'pino';

export type { Logger };

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export function createLogger(opts: { level: LogLevel; node: string }): Logger {
  return pino({ level: opts.level, base: { node: opts.node } }, pino.destination({ dest: 2, sync: true }));
}
