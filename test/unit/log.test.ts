// Unit tests of the daemon's logger (src/log.ts): the JSON-lines shape pino wrote (operators and
// the lab parse it), values JSON.stringify cannot take, levels, redaction, and writes to a pipe
// that is full.
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { createLogger, FULL_PIPE_PATIENCE_MS, writeLine, type LogLevel } from '../../src/log.ts';

/** A logger whose raw lines land in `raw`. */
function rawLogger(level: LogLevel = 'trace', secrets: string[] = []) {
  const raw: string[] = [];
  const logger = createLogger({ level, node: 'n1', secrets, write: (l) => raw.push(l) });
  const parsed = (): Record<string, unknown>[] =>
    raw.map((l) => JSON.parse(l) as Record<string, unknown>);
  return { logger, raw, parsed };
}

describe('createLogger', () => {
  it('writes one compact JSON object a line: level, time, node, the fields, msg', () => {
    const { logger, raw } = rawLogger();
    const before = Date.now();
    logger.info({ key: 'k', n: 3, gone: undefined }, 'peer joined');
    expect(raw).toHaveLength(1);
    const line = raw[0]!;
    expect(line.endsWith('}\n')).toBe(true);
    expect(line.slice(0, -1)).not.toContain('\n');
    // the lab matches `"msg":"<text>"` in the raw text, so no spaces after the colons
    expect(line).toContain('"msg":"peer joined"');
    const rec = JSON.parse(line) as Record<string, unknown>;
    expect(Object.keys(rec)).toEqual(['level', 'time', 'node', 'key', 'n', 'msg']);
    expect(rec).toMatchObject({ level: 30, node: 'n1', key: 'k', n: 3, msg: 'peer joined' });
    expect(rec.time).toBeGreaterThanOrEqual(before);
    expect(rec.time).toBeLessThanOrEqual(Date.now());
  });

  it("uses pino's level numbers and leaves msg out when only fields are given", () => {
    const { logger, parsed } = rawLogger();
    logger.trace('t');
    logger.debug('d');
    logger.info('i');
    logger.warn('w');
    logger.error('e');
    logger.fatal('f');
    logger.info({ only: true });
    expect(parsed().map((r) => [r.level, r.msg])).toEqual([
      [10, 't'],
      [20, 'd'],
      [30, 'i'],
      [40, 'w'],
      [50, 'e'],
      [60, 'f'],
      [30, undefined],
    ]);
    expect('msg' in parsed()[6]!).toBe(false);
  });

  it('writes only records at or above its level; silent writes nothing', () => {
    const warn = rawLogger('warn');
    warn.logger.info('no');
    warn.logger.warn('yes');
    warn.logger.fatal('yes too');
    expect(warn.parsed().map((r) => r.msg)).toEqual(['yes', 'yes too']);
    expect(warn.logger.isLevelEnabled('info')).toBe(false);
    expect(warn.logger.isLevelEnabled('warn')).toBe(true);

    const silent = rawLogger('silent');
    silent.logger.fatal('no');
    expect(silent.raw).toEqual([]);
    expect(silent.logger.isLevelEnabled('fatal')).toBe(false);
  });

  it('keeps its own level and time over fields of those names', () => {
    const { logger, parsed } = rawLogger();
    logger.warn({ level: 99, time: 5, node: 'other' }, 'm');
    expect(parsed()[0]).toMatchObject({ level: 40, node: 'other', msg: 'm' });
    expect(parsed()[0]!.time).not.toBe(5);
  });

  it('logs an Error with its type, message, stack and own fields, as err or as any field', () => {
    const { logger, parsed } = rawLogger();
    const e = Object.assign(new RangeError('boom'), { code: 'ECONNREFUSED' });
    logger.error(e);
    logger.error(e, 'store failed');
    logger.warn({ cause: e }, 'as a field');
    const [first, second, third] = parsed();
    const err = { type: 'RangeError', message: 'boom', code: 'ECONNREFUSED', stack: e.stack };
    expect(first).toMatchObject({ level: 50, err, msg: 'boom' });
    expect(second).toMatchObject({ err, msg: 'store failed' });
    expect(third).toMatchObject({ cause: err, msg: 'as a field' });
    expect(typeof err.stack).toBe('string');
  });

  it("logs an Error's cause and an AggregateError's errors", () => {
    const { logger, parsed } = rawLogger();
    const agg = new AggregateError([new Error('a'), new Error('b')], 'connect failed', {
      cause: new TypeError('root'),
    });
    logger.error({ err: agg }, 'x');
    expect(parsed()[0]!.err).toMatchObject({
      type: 'AggregateError',
      message: 'connect failed',
      cause: { type: 'TypeError', message: 'root' },
      errors: [{ message: 'a' }, { message: 'b' }],
    });
  });

  it('does not throw on bigint, circular or throwing values, and still logs the message', () => {
    const { logger, raw, parsed } = rawLogger();
    const loop: Record<string, unknown> = { name: 'loop' };
    loop.self = loop;
    const shared = { v: 1 };
    const err = new Error('self');
    Object.assign(err, { again: err });
    const hostile = {
      get bad(): never {
        throw new Error('getter exploded');
      },
    };
    expect(() => {
      logger.info({ rev: 12345678901234567890n, loop, twice: [shared, shared] }, 'values');
      logger.info({ err }, 'error loop');
      logger.info(hostile, 'hostile');
    }).not.toThrow();
    expect(raw[0]).toContain('"rev":12345678901234567890,');
    const [values, errorLoop, bad] = parsed();
    expect(values).toMatchObject({
      loop: { name: 'loop', self: '[Circular]' },
      // the same object twice is not a cycle
      twice: [{ v: 1 }, { v: 1 }],
      msg: 'values',
    });
    expect(errorLoop!.err).toMatchObject({ message: 'self', again: '[Circular]' });
    expect(bad).toMatchObject({ level: 30, node: 'n1', msg: 'hostile' });
    expect(String(bad!.logError)).toContain('getter exploded');
  });

  it('writes Dates and Buffers as JSON.stringify does, and drops functions', () => {
    const { logger, parsed } = rawLogger();
    logger.info({ at: new Date(0), f: () => 1, list: [undefined, 1] }, 'm');
    expect(parsed()[0]).toMatchObject({ at: '1970-01-01T00:00:00.000Z', list: [null, 1] });
    expect('f' in parsed()[0]!).toBe(false);
  });

  it('redacts URL credentials and the named secrets anywhere in the line', () => {
    const { logger, raw } = rawLogger('info', ['s3cret-pw']);
    logger.info({ store: 'etcd https://root:s3cret-pw@10.0.0.1:2379' }, 'pw is s3cret-pw');
    expect(raw[0]).not.toContain('s3cret-pw');
    expect(JSON.parse(raw[0]!)).toMatchObject({
      store: 'etcd https://root:***@10.0.0.1:2379',
      msg: 'pw is ***',
    });
  });

  it('survives a sink that throws', () => {
    const logger = createLogger({
      level: 'info',
      node: 'n1',
      write: () => {
        throw new Error('sink down');
      },
    });
    expect(() => logger.info('m')).not.toThrow();
  });
});

describe('writeLine', () => {
  const again = (): never => {
    throw Object.assign(new Error('EAGAIN: resource temporarily unavailable'), { code: 'EAGAIN' });
  };

  it('retries EAGAIN and partial writes until the whole line is out', () => {
    const got: number[] = [];
    let calls = 0;
    writeLine(2, 'hello world\n', (_fd, buf, off, len) => {
      calls += 1;
      if (calls % 2 === 1) again(); // every other call finds the pipe full
      const n = Math.min(len, 4); // and each write takes only 4 bytes
      got.push(...buf.subarray(off, off + n));
      return n;
    });
    expect(Buffer.from(got).toString()).toBe('hello world\n');
  });

  it('gives up on a pipe that stays full, and drops the line on other errors, without throwing', () => {
    const start = Date.now();
    expect(() => writeLine(2, 'x\n', again)).not.toThrow();
    expect(Date.now() - start).toBeGreaterThanOrEqual(FULL_PIPE_PATIENCE_MS - 50);
    let calls = 0;
    const epipe = (): never => {
      calls += 1;
      throw Object.assign(new Error('EPIPE'), { code: 'EPIPE' });
    };
    expect(() => writeLine(2, 'x\n', epipe)).not.toThrow();
    expect(calls).toBe(1);
  });

  it('loses no line when the stderr pipe is non-blocking and its reader lags', async () => {
    // A child logs 2,000 lines of ~200 bytes (400 KB, several times a pipe's 64 KiB) into a pipe
    // that `sleep` keeps unread for a while. It touches process.stderr first, which makes fd 2
    // non-blocking as under a container runtime, and says so in its first line.
    const log = resolve(import.meta.dirname, '../../src/log.ts');
    const child = [
      `import { readFileSync } from 'node:fs';`,
      `import { createLogger } from ${JSON.stringify(log)};`,
      `process.stderr.write('');`,
      `const flags = /flags:\\s*(\\d+)/.exec(readFileSync('/proc/self/fdinfo/2', 'utf8'))[1];`,
      `const logger = createLogger({ level: 'info', node: 'n1' });`,
      `logger.info({ nonblocking: (parseInt(flags, 8) & 0o4000) !== 0 }, 'start');`,
      `for (let i = 0; i < 2000; i++) logger.info({ i, pad: 'x'.repeat(150) }, 'line');`,
    ].join('\n');
    const script = `"$NODE" --input-type=module -e "$CHILD" 2>&1 >/dev/null | { sleep 0.5; cat; }`;
    const { stdout } = await promisify(execFile)('sh', ['-c', script], {
      env: { ...process.env, NODE: process.execPath, CHILD: child },
      maxBuffer: 16 << 20,
    });
    const recs = stdout
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(recs[0]).toMatchObject({ msg: 'start', nonblocking: true });
    expect(recs.slice(1).map((r) => r.i)).toEqual(Array.from({ length: 2000 }, (_, i) => i));
  });
});
