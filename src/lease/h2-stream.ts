// One request's stream: what the caller writes on it (data, its end, a cancel) and what the
// connection keeps for it (its id, its windows, the data waiting for the server's window, how far
// it got). The connection (h2-session.ts) opens, flushes and finishes it; the stream only asks.
import type { HeaderField } from './hpack.ts';
import { ReceiveWindow } from './h2-window.ts';

/** What a stream reports, in order: headers (the reply's, then trailers), data, then its end. */
export interface StreamEvents {
  /** the final reply headers (1xx ones are skipped), then the trailers (endStream true) */
  onHeaders(fields: HeaderField[], endStream: boolean): void;
  onData(chunk: Buffer): void;
  /**
   * Once, unless the stream was cancelled: undefined once the server ended its side (its
   * END_STREAM), else why not (H2StreamError, or the connection's failure).
   */
  onEnd(err: Error | undefined): void;
}

/** What a stream asks of its connection. */
export interface StreamOwner {
  /** send what the stream has queued, as far as the windows allow */
  flush(s: H2Stream): void;
  /** end the stream from our side */
  cancel(s: H2Stream): void;
}

/** One request's stream: what the caller writes on it. */
export class H2Stream {
  /** 0 until its HEADERS are sent (it may wait for MAX_CONCURRENT_STREAMS) */
  id = 0;
  readonly fields: readonly HeaderField[];
  readonly events: StreamEvents;
  /** what the server's window for this stream lets us send */
  sendWindow = 0;
  /** our window for this stream: granted when it opens */
  recv = new ReceiveWindow(0);
  /** data written and not yet sent (flow control) */
  queue: Buffer[] = [];
  endQueued = false;
  localEnded = false;
  gotHeaders = false;
  done = false;
  private readonly owner: StreamOwner;

  constructor(owner: StreamOwner, fields: readonly HeaderField[], events: StreamEvents) {
    this.owner = owner;
    this.fields = fields;
    this.events = events;
  }

  /** Sends `data` as the flow-control windows allow. */
  write(data: Buffer): void {
    if (this.done || this.endQueued || data.length === 0) return;
    this.queue.push(data);
    this.owner.flush(this);
  }

  /** Half-closes: END_STREAM after the data written. */
  end(): void {
    if (this.done || this.endQueued) return;
    this.endQueued = true;
    this.owner.flush(this);
  }

  /** Ends the stream from our side (RST_STREAM CANCEL); no onEnd follows. */
  cancel(): void {
    this.owner.cancel(this);
  }
}
