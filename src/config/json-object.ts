// Case-insensitive access to the keys of a JSON object, the way Go's
// encoding/json (and so flannel) matches struct fields. Used by the
// net-conf.json parser and by the lease codec. It remembers which keys were
// read so that callers can report the keys nobody asked for.
import { TwillError, type ErrorCode } from '../errors.ts';

export class CiObject {
  private readonly obj: Record<string, unknown>;
  /**
   * The keys by their lower case; undefined while every key is spelled as one of the `known`
   * names the caller gave (a lease value as flannel and twill write it): a name is then looked up
   * as spelled, with no index made for each of 5,000 leases.
   */
  private index: Map<string, string> | undefined;
  /** the names the caller will ask for (see the constructor) */
  private readonly known: ReadonlySet<string> | undefined;
  /** the names asked for, as the getters spelled them */
  private readonly asked: string[] = [];

  readonly where: string;
  private readonly code: ErrorCode;

  /**
   * `where` prefixes every error, e.g. "net-conf.json" or "Backend". `known`: the names the caller
   * will ask for, no two the same but for case.
   */
  constructor(
    where: string,
    obj: Record<string, unknown>,
    code: ErrorCode,
    known?: ReadonlySet<string>,
  ) {
    this.where = where;
    this.code = code;
    this.obj = obj;
    this.known = known;
    const keys = Object.keys(obj);
    // keys that are all known names differ from each other in more than case
    if (known === undefined || !keys.every((k) => known.has(k))) this.index = this.indexOf(keys);
  }

  private indexOf(keys: readonly string[]): Map<string, string> {
    const index = new Map<string, string>();
    for (const key of keys) {
      const lower = key.toLowerCase();
      const prev = index.get(lower);
      if (prev !== undefined)
        this.fail(`keys "${prev}" and "${key}" are the same key (keys are case-insensitive)`);
      index.set(lower, key);
    }
    return index;
  }

  static from(
    where: string,
    value: unknown,
    code: ErrorCode,
    known?: ReadonlySet<string>,
  ): CiObject {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw new TwillError(
        code,
        `${where}: must be a JSON object, got ${JSON.stringify(value) ?? String(value)}`,
      );
    }
    return new CiObject(where, value as Record<string, unknown>, code, known);
  }

  /** The object's key for `name`, whatever its case; undefined when it has none. */
  private keyFor(name: string): string | undefined {
    this.asked.push(name);
    if (Object.hasOwn(this.obj, name)) return name;
    // without an index every key is a known name spelled as the caller spells it: a known name
    // not there as spelled is absent (an IPv4 lease's PublicIPv6), and only a name outside
    // `known` can still match one in another case
    if (this.index === undefined && this.known?.has(name)) return undefined;
    this.index ??= this.indexOf(Object.keys(this.obj));
    return this.index.get(name.toLowerCase());
  }

  fail(message: string): never {
    throw new TwillError(this.code, `${this.where}: ${message}`);
  }

  /** Returns the value (undefined when absent or null). */
  get(name: string): unknown {
    const key = this.keyFor(name);
    return key === undefined ? undefined : (this.obj[key] ?? undefined);
  }

  has(name: string): boolean {
    const key = this.keyFor(name);
    return key !== undefined && this.obj[key] !== null;
  }

  string(name: string): string | undefined {
    const v = this.get(name);
    if (v === undefined) return undefined;
    if (typeof v !== 'string') this.fail(`"${name}" must be a string, got ${JSON.stringify(v)}`);
    return v;
  }

  bool(name: string): boolean | undefined {
    const v = this.get(name);
    if (v === undefined) return undefined;
    if (typeof v !== 'boolean')
      this.fail(`"${name}" must be true or false, got ${JSON.stringify(v)}`);
    return v;
  }

  /** An integer in [min, max]. */
  int(name: string, range: { min: number; max: number }): number | undefined {
    const v = this.get(name);
    if (v === undefined) return undefined;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < range.min || v > range.max) {
      this.fail(
        `"${name}" must be an integer from ${range.min} to ${range.max}, got ${JSON.stringify(v)}`,
      );
    }
    return v;
  }

  /** Keys present in the object that no getter asked for, in their spelling. */
  unknownKeys(): string[] {
    const seen = new Set(this.asked.map((name) => name.toLowerCase()));
    return Object.keys(this.obj).filter((key) => !seen.has(key.toLowerCase()));
  }
}
