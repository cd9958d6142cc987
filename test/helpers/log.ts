// A logger that records its lines in memory, so tests can assert what was logged (and how often)
// without printing it. The lines go through the daemon's own formatting and redaction and are
// parsed back, so tests see what an operator would.
import { createLogger, type Logger } from '../../src/log.ts';

export interface CapturedLog {
  readonly logger: Logger;
  readonly lines: { level: number; msg: string; [k: string]: unknown }[];
}

export function captureLog(): CapturedLog {
  const lines: CapturedLog['lines'] = [];
  const logger = createLogger({
    level: 'debug',
    node: 'test',
    write: (line) => lines.push(JSON.parse(line) as CapturedLog['lines'][number]),
  });
  return { logger, lines };
}
