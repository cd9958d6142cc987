// The watch reply's line reader: lines come out whole and decoded right
// whatever the chunking (a multi-byte character split between chunks
// included), CRLF and empty lines are handled, and a line longer than the
// bound ends the read before it is held, newline or not.
import { describe, expect, it } from 'vitest';
import { LineReader, LineTooLong } from '../../src/lease/kube-watch-lines.ts';

function feed(text: string | Buffer, chunk: number, max?: number): string[] {
  const lines: string[] = [];
  const reader = new LineReader((l) => lines.push(l), max);
  const bytes = Buffer.isBuffer(text) ? text : Buffer.from(text);
  for (let i = 0; i < bytes.length; i += chunk) reader.push(bytes.subarray(i, i + chunk));
  reader.end();
  return lines;
}

describe('LineReader', () => {
  const events = [
    '{"type":"ADDED","object":{"metadata":{"name":"n1"}}}',
    '{"type":"MODIFIED","object":{"metadata":{"name":"nœud-é","annotations":{"a":"ünï→"}}}}',
    '{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"42"}}}',
  ];
  const text = `${events.join('\n')}\n`;

  it('yields the same lines whatever the chunk size, multi-byte characters split or not', () => {
    for (const chunk of [1, 2, 3, 5, 7, 16, 64, text.length])
      expect(feed(text, chunk), `chunk ${chunk}`).toEqual(events);
  });

  it('drops a CR before the newline and skips empty lines; end() gives the last unterminated line', () => {
    expect(feed('a\r\n\n\r\nb\nc', 2)).toEqual(['a', 'b', 'c']);
    expect(feed('', 1)).toEqual([]);
  });

  it('takes a line of exactly the bound, and refuses one byte more before its newline arrives', () => {
    expect(feed(`${'x'.repeat(10)}\n${'y'.repeat(10)}\n`, 3, 10)).toEqual([
      'x'.repeat(10),
      'y'.repeat(10),
    ]);
    const lines: string[] = [];
    const reader = new LineReader((l) => lines.push(l), 10);
    reader.push(Buffer.from('ok\n'));
    reader.push(Buffer.from('z'.repeat(6)));
    expect(() => reader.push(Buffer.from('z'.repeat(5)))).toThrow(LineTooLong);
    expect(lines).toEqual(['ok']);
    expect(() => feed(`${'q'.repeat(11)}\n`, 100, 10)).toThrow(/longer than 10 bytes/);
  });

  it('bounds a line by bytes, not characters', () => {
    // 4 characters, 8 bytes
    expect(() => feed('éééé\n', 1, 7)).toThrow(LineTooLong);
    expect(feed('éééé\n', 1, 8)).toEqual(['éééé']);
  });
});
