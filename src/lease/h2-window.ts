// Flow-control window arithmetic (RFC 9113 sections 5.2 and 6.9). Our receive windows, the
// connection's and each stream's, are replenished with WINDOW_UPDATE as the DATA they took is
// handed on, once half of a window is used, so long replies flow at full speed without an update
// for every frame. The server's windows (what we may send) are plain numbers in h2-session.ts.

/** RFC 9113 6.5.2: the initial window, of the connection and of each stream, until SETTINGS */
export const DEFAULT_WINDOW = 65_535;
/** the largest a window may grow: more is a FLOW_CONTROL_ERROR */
export const MAX_WINDOW = 2 ** 31 - 1;

/**
 * One of our receive windows: what the server may still send, and what has been handed on since
 * the window was last given back.
 */
export class ReceiveWindow {
  /** the window we granted */
  readonly size: number;
  /** what the server may still send; below zero it sent too much */
  available: number;
  private unacked = 0;

  constructor(size: number) {
    this.size = size;
    this.available = size;
  }

  /** The server sent `n` bytes (padding counts too): false when the window did not allow them. */
  take(n: number): boolean {
    this.available -= n;
    return this.available >= 0;
  }

  /**
   * `n` bytes were handed on: the increment a WINDOW_UPDATE is to give back once half the window
   * is used (the window then counts it as available again), else 0.
   */
  release(n: number): number {
    this.unacked += n;
    if (this.unacked < this.size / 2) return 0;
    const increment = this.unacked;
    this.available += increment;
    this.unacked = 0;
    return increment;
  }
}
