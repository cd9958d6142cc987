// The etcd-shaped primitives the lease store is built on: a revisioned
// key-value store with TTL-bound conditional writes and a resumable watch.
// Two implementations: etcd (etcd-kv.ts) and, for tests and the build's warm-up, memory
// (memory-kv.ts); both pass the same LeaseStore contract suite through kv-store.ts. Every call
// honours its AbortSignal: once it aborts, the call rejects with the signal's reason (a watch
// ends 'aborted').

export interface KvEntry {
  readonly key: string;
  readonly value: string;
  /** revision of the last write to this key (the compare-and-swap version) */
  readonly modRevision: string;
  /**
   * the revision that created the key (etcd's create_revision): kept across rewrites, so it orders
   * first claims
   */
  readonly createRevision?: string;
}

/**
 * A key the list saw but could not read (its value does not fit in a reply); it still occupies its
 * key.
 */
export interface KvSkipped {
  readonly key: string;
  readonly modRevision: string;
  /** why, without the value */
  readonly reason: string;
}

/**
 * Every key under a prefix as of one revision, in key order. A store may
 * read it in pages, but all pages are at `revision` (a consistent snapshot).
 */
export interface KvListing {
  readonly entries: readonly KvEntry[];
  /** keys whose values could not be read at all; never a reason to fail the list */
  readonly skipped: readonly KvSkipped[];
  readonly revision: bigint;
}

/**
 * One page of a listing as it is read (Kv.list's `onPage`), in key order. `first`: the first page
 * of an attempt; a list started over at a fresh revision (its snapshot compacted away under it)
 * begins again with a first page, and what the pages before it said is void.
 */
export interface KvPage {
  readonly entries: readonly KvEntry[];
  readonly first: boolean;
}

export interface KvWritten {
  readonly entry: KvEntry;
  /** epoch milliseconds when the TTL runs out */
  readonly expiresAt: number;
}

export type KvChange =
  | { readonly type: 'put'; readonly entry: KvEntry }
  | { readonly type: 'delete'; readonly key: string };

/**
 * Why a watch ended: the caller re-lists for everything but 'aborted', and backs off after
 * 'failed'.
 */
export type WatchEnd =
  | { readonly reason: 'aborted' }
  | { readonly reason: 'compacted' | 'wiped' | 'reconnected' | 'failed'; readonly detail: string };

export interface KvWatchOptions {
  /** first revision to report (the listing's revision + 1) */
  readonly fromRevision: bigint;
  readonly signal: AbortSignal;
  readonly onChanges: (changes: readonly KvChange[]) => void;
  readonly onConnectivity: (connected: boolean, detail: string) => void;
}

export interface KvReplace {
  readonly key: string;
  readonly value: string;
  /** the modRevision `key` must still have */
  readonly expected: string;
  readonly ttlSeconds: number;
  readonly signal: AbortSignal;
}

export interface Kv {
  readonly description: string;
  get(key: string, signal: AbortSignal): Promise<KvEntry | undefined>;
  /**
   * Every key under `prefix`; `onPage`, when given, is told each page's entries as it arrives
   * (a store that reads in one piece tells one page), so a caller can start on them while the
   * rest is read. The listing returned is the whole of the last attempt's pages.
   */
  list(prefix: string, signal: AbortSignal, onPage?: (page: KvPage) => void): Promise<KvListing>;
  /**
   * The keys under `prefix` (in key order, without their values) created after revision `after`
   * and before revision `before`, as of now: what a claim written at `before` must yield to
   * beyond a listing at `after`, without reading every lease again.
   */
  keysCreatedBetween(
    prefix: string,
    revisions: { readonly after: bigint; readonly before: bigint },
    signal: AbortSignal,
  ): Promise<string[]>;
  /** Writes `key` bound to a fresh TTL only if it is absent; undefined when it exists. */
  create(
    key: string,
    value: string,
    ttlSeconds: number,
    signal: AbortSignal,
  ): Promise<KvWritten | undefined>;
  /** Rewrites `key` with a fresh TTL only if its modRevision is `expected`; undefined otherwise. */
  replace(o: KvReplace): Promise<KvWritten | undefined>;
  /** When `key`'s TTL runs out (epoch ms); undefined when it is absent or has no TTL. */
  expiresAt(key: string, signal: AbortSignal): Promise<number | undefined>;
  /**
   * Deletes `key` only if its modRevision is `expected`. True when that version is gone: deleted
   * now, or already (by an earlier try whose reply was lost, or by another writer); false when the
   * key holds another version, which is left as it is.
   */
  deleteIf(key: string, expected: string, signal: AbortSignal): Promise<boolean>;
  /** Streams changes under `prefix` until the signal aborts or the stream cannot go on. */
  watch(prefix: string, opts: KvWatchOptions): Promise<WatchEnd>;
  close(): Promise<void>;
}
