// An in-memory Kv with etcd's semantics, for unit tests of the logic above
// it and for the build's warm-up of the daemon (src/cli/warm-up.ts, which
// runs a start against it before the code cache is taken): one global
// revision, TTL expiry that deletes the key (and tells watchers), history
// for watches that start in the past, compaction and a wipe that resets the
// revision. It passes the same LeaseStore contract suite as etcd
// (test/contract). `twill` never stores leases in it.
import { TwillError } from '../errors.ts';
import type {
  Kv,
  KvChange,
  KvEntry,
  KvListing,
  KvPage,
  KvReplace,
  KvWatchOptions,
  KvWritten,
  WatchEnd,
} from './kv.ts';

interface Stored {
  entry: KvEntry;
  /** expiry timer; none for keys written without a TTL */
  timer: NodeJS.Timeout | undefined;
  expiresAt?: number;
}

interface Watch {
  readonly prefix: string;
  readonly opts: KvWatchOptions;
  readonly end: (e: WatchEnd) => void;
}

export class MemoryKv implements Kv {
  readonly description = 'memory';
  private readonly data = new Map<string, Stored>();
  private readonly history: { revision: bigint; change: KvChange }[] = [];
  private readonly watches = new Set<Watch>();
  private revision = 1n;
  private compacted = 0n;
  private down = false;

  // --- test controls -------------------------------------------------------

  /** Makes every call fail as if the store were unreachable (or reachable again). */
  setDown(down: boolean): void {
    this.down = down;
    for (const w of this.watches)
      w.opts.onConnectivity(!down, down ? 'memory store down' : 'memory store up');
  }

  /** Drops history up to the current revision; watches behind it end 'compacted'. */
  compact(): void {
    this.compacted = this.revision;
    this.history.length = 0;
  }

  /** Forgets everything, as a restarted empty etcd would; live watches see 'wiped'. */
  wipe(): void {
    for (const s of this.data.values()) clearTimeout(s.timer);
    this.data.clear();
    this.history.length = 0;
    this.revision = 1n;
    this.compacted = 0n;
    for (const w of [...this.watches]) w.end({ reason: 'wiped', detail: 'memory store wiped' });
  }

  /** Writes a key with no TTL, the way an operator's `etcdctl put` would. */
  putRaw(key: string, value: string): void {
    this.write(key, value, 0);
  }

  deleteRaw(key: string): void {
    this.remove(key);
  }

  // --- Kv --------------------------------------------------------------------

  /** Every call answers at once, so honouring its signal means refusing one that has aborted. */
  private check(signal: AbortSignal | undefined): void {
    signal?.throwIfAborted();
    if (this.down) throw new TwillError('STORE_UNAVAILABLE', 'memory store is down');
  }

  async expiresAt(key: string, signal?: AbortSignal): Promise<number | undefined> {
    this.check(signal);
    return this.data.get(key)?.expiresAt;
  }

  async get(key: string, signal?: AbortSignal): Promise<KvEntry | undefined> {
    this.check(signal);
    return this.data.get(key)?.entry;
  }

  async list(
    prefix: string,
    signal?: AbortSignal,
    onPage?: (page: KvPage) => void,
  ): Promise<KvListing> {
    this.check(signal);
    // one synchronous pass is a consistent snapshot; key order, as etcd lists
    const entries = [...this.data.values()]
      .map((s) => s.entry)
      .filter((e) => e.key.startsWith(prefix))
      .sort((a, b) => Buffer.compare(Buffer.from(a.key, 'utf8'), Buffer.from(b.key, 'utf8')));
    onPage?.({ entries, first: true });
    return { entries, skipped: [], revision: this.revision };
  }

  async keysCreatedBetween(
    prefix: string,
    revisions: { readonly after: bigint; readonly before: bigint },
    signal?: AbortSignal,
  ): Promise<string[]> {
    const { entries } = await this.list(prefix, signal);
    return entries
      .filter((e) => {
        const created = BigInt(e.createRevision ?? e.modRevision);
        return created > revisions.after && created < revisions.before;
      })
      .map((e) => e.key);
  }

  async create(
    key: string,
    value: string,
    ttlSeconds: number,
    signal?: AbortSignal,
  ): Promise<KvWritten | undefined> {
    this.check(signal);
    if (this.data.has(key)) return undefined;
    return this.write(key, value, ttlSeconds);
  }

  async replace(o: KvReplace): Promise<KvWritten | undefined> {
    this.check(o.signal);
    if (this.data.get(o.key)?.entry.modRevision !== o.expected) return undefined;
    return this.write(o.key, o.value, o.ttlSeconds);
  }

  async deleteIf(key: string, expected: string, signal?: AbortSignal): Promise<boolean> {
    this.check(signal);
    const now = this.data.get(key);
    // gone already counts as deleted (the Kv contract: kv.ts)
    if (now === undefined) return true;
    if (now.entry.modRevision !== expected) return false;
    this.remove(key);
    return true;
  }

  async watch(prefix: string, opts: KvWatchOptions): Promise<WatchEnd> {
    if (opts.signal.aborted) return { reason: 'aborted' };
    if (opts.fromRevision <= this.compacted) {
      return { reason: 'compacted', detail: `revision ${opts.fromRevision} has been compacted` };
    }
    return new Promise<WatchEnd>((resolve) => {
      const w: Watch = {
        prefix,
        opts,
        end: (e) => {
          this.watches.delete(w);
          resolve(e);
        },
      };
      const past = this.history.filter(
        (h) => h.revision >= opts.fromRevision && this.matches(w, h.change),
      );
      if (past.length > 0) opts.onChanges(past.map((h) => h.change));
      this.watches.add(w);
      opts.onConnectivity(!this.down, 'memory watch started');
      opts.signal.addEventListener('abort', () => w.end({ reason: 'aborted' }), { once: true });
    });
  }

  async close(): Promise<void> {
    for (const s of this.data.values()) clearTimeout(s.timer);
    for (const w of [...this.watches]) w.end({ reason: 'aborted' });
  }

  // --- internals -------------------------------------------------------------

  private matches(w: Watch, change: KvChange): boolean {
    return (change.type === 'put' ? change.entry.key : change.key).startsWith(w.prefix);
  }

  private publish(change: KvChange): void {
    this.history.push({ revision: this.revision, change });
    for (const w of this.watches) if (this.matches(w, change)) w.opts.onChanges([change]);
  }

  private write(key: string, value: string, ttlSeconds: number): KvWritten {
    const old = this.data.get(key);
    if (old) clearTimeout(old.timer);
    this.revision += 1n;
    const entry = {
      key,
      value,
      modRevision: String(this.revision),
      createRevision: old?.entry.createRevision ?? String(this.revision),
    };
    const expiresAt = ttlSeconds > 0 ? Date.now() + ttlSeconds * 1000 : Number.MAX_SAFE_INTEGER;
    const timer =
      ttlSeconds > 0 ? setTimeout(() => this.remove(key), ttlSeconds * 1000).unref() : undefined;
    this.data.set(key, { entry, timer, ...(ttlSeconds > 0 ? { expiresAt } : {}) });
    this.publish({ type: 'put', entry });
    return { entry, expiresAt };
  }

  private remove(key: string): void {
    const old = this.data.get(key);
    if (!old) return;
    clearTimeout(old.timer);
    this.data.delete(key);
    this.revision += 1n;
    this.publish({ type: 'delete', key });
  }
}

/** A Kv over `inner` that many stores can share: closing one of them does not close `inner`. */
export function shared(inner: MemoryKv): Kv {
  return {
    description: inner.description,
    get: (key, signal) => inner.get(key, signal),
    list: (prefix, signal, onPage) => inner.list(prefix, signal, onPage),
    keysCreatedBetween: (prefix, revisions, signal) =>
      inner.keysCreatedBetween(prefix, revisions, signal),
    create: (key, value, ttl, signal) => inner.create(key, value, ttl, signal),
    replace: (o) => inner.replace(o),
    deleteIf: (key, expected, signal) => inner.deleteIf(key, expected, signal),
    expiresAt: (key, signal) => inner.expiresAt(key, signal),
    watch: (prefix, opts) => inner.watch(prefix, opts),
    close: async () => undefined,
  };
}
