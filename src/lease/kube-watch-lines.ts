// A watch reply's lines, read as its chunks arrive: the apiserver sends one
// JSON event per line, and a chunk may hold part of a line or many. Only the
// current line's bytes are held, and a line is bounded: a Node (etcd stores
// at most 1.5 MiB per object by default) fits many times over in the bound,
// so a longer line is a broken or hostile server and ends the watch instead
// of growing without end. Splitting on the byte 0x0a is safe in UTF-8 (no
// multi-byte character holds it), so a line is decoded once, whole.

/** The longest watch line kept (bytes, without its newline). */
export const MAX_WATCH_LINE = 4 * 1024 * 1024;

export class LineTooLong extends Error {
  constructor(max: number) {
    super(`a watch event longer than ${max} bytes`);
    this.name = 'LineTooLong';
  }
}

/**
 * Feeds chunks in with `push`; each complete, non-empty line goes to `onLine` (without its
 * newline or a trailing CR). `end` hands over a last line the reply did not end with a newline.
 * Throws LineTooLong once the current line exceeds `max` bytes.
 */
export class LineReader {
  private parts: Buffer[] = [];
  private held = 0;
  private readonly max: number;
  private readonly onLine: (line: string) => void;

  constructor(onLine: (line: string) => void, max = MAX_WATCH_LINE) {
    this.onLine = onLine;
    this.max = max;
  }

  push(chunk: Buffer): void {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(0x0a, start);
      if (nl === -1) break;
      this.take(chunk.subarray(start, nl));
      this.emit();
      start = nl + 1;
    }
    if (start < chunk.length) this.take(chunk.subarray(start));
  }

  end(): void {
    this.emit();
  }

  private take(bytes: Buffer): void {
    this.held += bytes.length;
    // the newline-less part of a line counts before it is kept: a line never exceeds the bound
    if (this.held > this.max) {
      this.parts = [];
      this.held = 0;
      throw new LineTooLong(this.max);
    }
    // a view, not a copy: a reply's chunks are fresh buffers, never reused by the stream
    if (bytes.length > 0) this.parts.push(bytes);
  }

  private emit(): void {
    const parts = this.parts;
    this.parts = [];
    this.held = 0;
    if (parts.length === 0) return;
    let line = (parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts)).toString('utf8');
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (line !== '') this.onLine(line);
  }
}
