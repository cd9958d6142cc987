// A pino logger that records lines in memory, so tests can assert what was
// logged (and how often) without printing it.
import { pino, type Logger } from 'pino';
import { Writable } from 'node:stream';

export interface CapturedLog {
  readonly logger: Logger;
  readonly lines: { level: number; msg: string; [k: string]: unknown }[];
}

export function captureLog(): CapturedLog {
  const lines: CapturedLog['lines'] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split('\n'))
        if (l.trim()) lines.push(JSON.parse(l) as CapturedLog['lines'][number]);
      cb();
    },
  });
  return { logger: pino({ level: 'debug' }, sink), lines };
}
