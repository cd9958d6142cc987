// Case-insensitive access to the keys of a JSON object, the way Go's
// encoding/json (and so flannel) matches struct fields. Used by the
// net-conf.json parser and by the lease codec. It remembers which keys were
// read so that callers can report the keys nobody asked for.
import { TwillError, type ErrorCode } from '../errors.ts';

export class CiObject {
  private readonly entries = new Map<string, { key: string; value: unknown }>();
  private readonly seen = new Set<string>();

  readonly where: string;
  private readonly code: ErrorCode;

  /** `where` prefixes every error, e.g. "net-conf.json" or "Backend". */
  constructor(where: string, obj: Record<string, unknown>, code: ErrorCode) {
    this.where = where;
    this.code = code;
    for (const [key, value] of Object.entries(obj)) {
      const lower = key.toLowerCase();
      const prev = this.entries.get(lower);
      if (prev)
        this.fail(`keys "${prev.key}" and "${key}" are the same key (keys are case-insensitive)`);
      this.entries.set(lower, { key, value });
    }
  }

  static from(where: string, value: unknown, code: ErrorCode): CiObject {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw new TwillError(
        code,
        `${where}: must be a JSON object, got ${JSON.stringify(value) ?? String(value)}`,
      );
    }
    return new CiObject(where, value as Record<string, unknown>, code);
  }

  fail(message: string): never {
    throw new TwillError(this.code, `${this.where}: ${message}`);
  }

  /** Returns the value (undefined when absent or null) and the key's spelling. */
  get(name: string): unknown {
    const hit = this.entries.get(name.toLowerCase());
    this.seen.add(name.toLowerCase());
    return hit?.value ?? undefined;
  }

  has(name: string): boolean {
    const hit = this.entries.get(name.toLowerCase());
    this.seen.add(name.toLowerCase());
    return hit !== undefined && hit.value !== null;
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
    return [...this.entries.entries()]
      .filter(([lower]) => !this.seen.has(lower))
      .map(([, e]) => e.key);
  }
}
