// The one reader of `ip -batch` / `bridge -batch` failure reports, as the
// daemon's apply and twill-cni's ADD and GC read them.
import { describe, expect, it } from 'vitest';
import {
  describeBatchFailures,
  failedLines,
  firstFailedLine,
  parseBatchErrors,
} from '../../src/exec/batch-errors.ts';

describe('ip -batch failure reports', () => {
  it('pairs each "Command failed" line with the messages printed before it', () => {
    expect(
      parseBatchErrors(
        'Cannot find device "nope"\nCommand failed -:1\nRTNETLINK answers: Operation not supported\n' +
          'Error: more\nCommand failed -:3\nCommand failed -:4\ntrailing words\n',
      ),
    ).toEqual({
      failures: [
        { line: 1, reason: 'Cannot find device "nope"' },
        { line: 3, reason: 'RTNETLINK answers: Operation not supported; Error: more' },
        { line: 4, reason: '' },
      ],
      unattributed: 'trailing words',
    });
    expect(parseBatchErrors('')).toEqual({ failures: [], unattributed: '' });
  });

  it('reads which lines of an ip -force -batch failed, and why (twill-cni GC)', () => {
    const failures = failedLines(
      'Cannot find device "nope"\nCommand failed -:1\nRTNETLINK answers: Operation not supported\nCommand failed -:3\n',
    );
    expect([...failures]).toEqual([
      [1, 'Cannot find device "nope"'],
      [3, 'RTNETLINK answers: Operation not supported'],
    ]);
    expect(failedLines('RTNETLINK answers: Permission denied\n').size).toBe(0);
  });

  it('reads the first line that failed (twill-cni ADD)', () => {
    expect(firstFailedLine('RTNETLINK answers: File exists\nCommand failed -:4\n')).toBe(4);
    expect(firstFailedLine('x\nCommand failed -:2\ny\nCommand failed -:5\n')).toBe(2);
    expect(firstFailedLine('')).toBeUndefined();
    expect(firstFailedLine('RTNETLINK answers: File exists\n')).toBeUndefined();
  });

  it('maps failures back to the batch lines they name (the daemon applying a plan)', () => {
    const lines = ['route add a', 'route add b', 'neigh replace c'];
    expect(
      describeBatchFailures(
        'RTNETLINK answers: File exists\nCommand failed -:2\nError: nexthop invalid\nCommand failed -:3\n',
        lines,
      ),
    ).toEqual([
      'route add b: RTNETLINK answers: File exists',
      'neigh replace c: Error: nexthop invalid',
    ]);
    expect(describeBatchFailures('Command failed -:9\n', lines)).toEqual(['line 9: failed']);
    expect(describeBatchFailures('Error: no such table\nmore\n', lines)).toEqual([
      'Error: no such table; more',
    ]);
    expect(describeBatchFailures('', lines)).toEqual([]);
  });
});
