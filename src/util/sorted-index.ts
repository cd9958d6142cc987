// Values found by a string key, kept in one array sorted by it: a Map's lookups in a fraction
// of a Map's memory. V8's Map holds three words an entry in a power-of-two table (10,000 entries:
// 448 KiB); this is one pointer an entry (80 KiB). A dual-stack vxlan node's kernel events are
// judged against three such indexes of 10,000 entries each (dataplane/judge.ts). Lookups are a
// binary search; an insert or a removal moves the entries after it, so it suits indexes that are
// built whole and then changed a few entries at a time. Several values may share a key.
export class SortedIndex<T> {
  private readonly items: T[];
  private readonly keyOf: (t: T) => string;

  constructor(items: readonly T[], keyOf: (t: T) => string) {
    this.keyOf = keyOf;
    this.items = items.slice();
    // stable (values under one key keep their order); input already in order costs about one
    // comparison an entry (the desired state's IPv4 routes and neighbours, listed in their leases'
    // key order), other input n log n (FDB entries by public IP, IPv6 destinations)
    this.items.sort((a, b) => compare(keyOf(a), keyOf(b)));
  }

  get size(): number {
    return this.items.length;
  }

  /** The first value under `key`; undefined when none. */
  get(key: string): T | undefined {
    const t = this.items[this.first(key)];
    return t !== undefined && this.keyOf(t) === key ? t : undefined;
  }

  /** Every value under `key`, in the order they were added; undefined when none. */
  all(key: string): T[] | undefined {
    const out: T[] = [];
    for (let i = this.first(key); i < this.items.length; i++) {
      const t = this.items[i] as T;
      if (this.keyOf(t) !== key) break;
      out.push(t);
    }
    return out.length > 0 ? out : undefined;
  }

  /** Adds `t` after the values already under its key. */
  add(t: T): void {
    const key = this.keyOf(t);
    let i = this.first(key);
    while (i < this.items.length && this.keyOf(this.items[i] as T) === key) i++;
    this.items.splice(i, 0, t);
  }

  /** Removes `t` itself (not another value under its key); nothing when it is not there. */
  remove(t: T): void {
    const key = this.keyOf(t);
    for (let i = this.first(key); i < this.items.length; i++) {
      const at = this.items[i] as T;
      if (this.keyOf(at) !== key) return;
      if (at === t) {
        this.items.splice(i, 1);
        return;
      }
    }
  }

  /** Every value, by key. */
  values(): readonly T[] {
    return this.items;
  }

  /** The position of the first value whose key is not less than `key`. */
  private first(key: string): number {
    let lo = 0;
    let hi = this.items.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.keyOf(this.items[mid] as T) < key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** Strings in code-unit order, as `<` compares them. */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
