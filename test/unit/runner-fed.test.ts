// The runner's openFed: a real process (/bin/sh) fed as the test goes, its
// output seen as it arrives, and failing as `run` does (exit code with
// stderr, timeout, abort), with a second end() sending nothing.
import { describe, expect, it } from 'vitest';
import { openFed } from '../../src/exec/runner.ts';
import { commandFailure } from '../helpers/rejection.ts';

/** Echoes each line read back as "got <line>"; exits 3 on "fail", with a word on stderr. */
const ECHO = [
  'while IFS= read -r l; do',
  '  case $l in fail) echo "bad line" >&2; exit 3;; esac',
  '  echo "got $l"',
  'done',
].join('\n');

function sh(script: string, opts: Parameters<typeof openFed>[2] = {}) {
  return openFed('/bin/sh', ['-c', script], opts);
}

describe('openFed', () => {
  it('runs each line as it is written, shows stdout as it comes, and resolves on exit 0', async () => {
    const seen: string[] = [];
    let answered: () => void = () => undefined;
    const first = new Promise<void>((resolve) => (answered = resolve));
    const p = sh(ECHO, {
      onStdout: (text) => {
        seen.push(text);
        answered();
      },
    });
    p.write('one\n');
    // the process answers the first line while its stdin is still open
    await first;
    expect(seen.join('')).toBe('got one\n');
    expect(await p.end('two\n')).toEqual({ stdout: 'got one\ngot two\n', stderr: '' });
    expect(seen.join('')).toBe('got one\ngot two\n');
  });

  it('rejects a failing exit with the command, exit code and stderr', async () => {
    const p = sh(ECHO);
    p.write('one\n');
    const err = await commandFailure(p.end('fail\nnever\n'));
    expect(err.command).toEqual(['/bin/sh', '-c', ECHO]);
    expect(err.exitCode).toBe(3);
    expect(err.stderr).toBe('bad line\n');
    expect(err.reason).toBe('exit code 3');
    expect(err.code).toBe('COMMAND_FAILED');
  });

  it('settles `done` when the process exits on its own, before end', async () => {
    const p = sh('echo early; exit 5');
    const err = await commandFailure(p.done);
    expect(err.exitCode).toBe(5);
  });

  it('times out a process that does not finish after its input ends, not counting the time before', async () => {
    // exec: a sleep child of sh would hold the pipes open after sh is stopped
    const p = sh('read -r l; exec sleep 30', { timeoutMs: 150 });
    // written but not ended: the caller's own wait does not count
    p.write('x\n');
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    const err = await commandFailure(p.end());
    expect(err.reason).toBe('timed out');
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('stops a process never ended after its idle limit', async () => {
    const p = sh('exec sleep 30', { idleMs: 150, timeoutMs: 60_000 });
    const started = Date.now();
    const err = await commandFailure(p.done);
    expect(err.reason).toBe('timed out');
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('stops the process when the signal aborts', async () => {
    const ctl = new AbortController();
    const p = sh('exec sleep 30', { signal: ctl.signal });
    setTimeout(() => ctl.abort(), 50);
    const err = await commandFailure(p.done);
    expect(err.reason).toBe('cancelled');
  });

  it('starts nothing when the signal has aborted already', async () => {
    const ctl = new AbortController();
    ctl.abort();
    const p = sh('echo started', { signal: ctl.signal });
    const err = await commandFailure(p.end('x\n'));
    expect(err.reason).toBe('cancelled');
    expect(err.exitCode).toBeUndefined();
  });

  it('sends nothing on a second end, gives the same outcome, and refuses a write after it', async () => {
    const p = sh(ECHO);
    const once = p.end('a\n');
    const twice = p.end('b\n');
    expect(await once).toEqual({ stdout: 'got a\n', stderr: '' });
    expect(await twice).toEqual({ stdout: 'got a\n', stderr: '' });
    expect(() => p.write('c\n')).toThrow(/write after end/);
  });
});
