// A minimal Prometheus registry and its text exposition (format 0.0.4), all twill's metrics need:
// counters, gauges and histograms with a fixed label set each, and families whose samples are
// computed when scraped (the process metrics). Each family is "# HELP", "# TYPE" and its samples,
// families apart by a blank line, in the order they were registered; a family's series in the
// order they were first touched, labels in the order of its label names. Label values escape
// \, " and a newline; help text \ and a newline. A histogram's buckets are cumulative, end with
// le="+Inf" and are followed by _sum and _count. Values print as JavaScript numbers, which
// Prometheus parses (1e-7, 1e+21), and NaN, +Inf, -Inf as the format spells them.

/** The content type of what `Registry.metrics()` returns. */
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

export type MetricType = 'counter' | 'gauge' | 'histogram';

/** One series' labels: a value for every label name of its family, and no other. */
export type Labels<L extends string> = Readonly<Record<L, string>>;

/** What a registry exposes: the text of one or more whole families, without a final newline. */
export interface Collector {
  /** the families it exposes */
  readonly names: readonly string[];
  expose(): string;
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** A label value in a sample line: backslash, double quote and newline escaped. */
export function escapeLabelValue(v: string): string {
  return v.replace(/[\\"\n]/g, (c) => (c === '\\' ? '\\\\' : c === '"' ? '\\"' : '\\n'));
}

/** Help text on a # HELP line: backslash and newline escaped (a quote stays as it is). */
export function escapeHelp(v: string): string {
  return v.replace(/[\\\n]/g, (c) => (c === '\\' ? '\\\\' : '\\n'));
}

/** A sample value as the text format spells it. */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  return String(v);
}

/** `{a="x",b="y"}` for these names and values (the empty string when there are none). */
export function formatLabels(pairs: readonly (readonly [string, string])[]): string {
  if (pairs.length === 0) return '';
  return `{${pairs.map(([n, v]) => `${n}="${escapeLabelValue(v)}"`).join(',')}}`;
}

/** The # HELP and # TYPE lines of a family. */
export function familyHeader(name: string, help: string, type: MetricType): string {
  return `# HELP ${name} ${escapeHelp(help)}\n# TYPE ${name} ${type}`;
}

/** A whole family whose samples carry no labels (or none yet: then just its header). */
export function formatFamily(
  name: string,
  help: string,
  type: 'counter' | 'gauge',
  values: readonly number[],
): string {
  return [familyHeader(name, help, type), ...values.map((v) => `${name} ${formatValue(v)}`)].join(
    '\n',
  );
}

function checkName(name: string): void {
  if (!METRIC_NAME.test(name)) throw new TypeError(`invalid metric name ${JSON.stringify(name)}`);
}

function checkLabelNames(metric: string, names: readonly string[], reserved: string[]): void {
  for (const n of names) {
    if (!LABEL_NAME.test(n) || n.startsWith('__') || reserved.includes(n))
      throw new TypeError(`${metric}: invalid label name ${JSON.stringify(n)}`);
  }
  if (new Set(names).size !== names.length)
    throw new TypeError(`${metric}: label names repeat: ${names.join(', ')}`);
}

/** Registers collectors and renders them all; a name registered twice is a programming error. */
export class Registry {
  readonly contentType = PROMETHEUS_CONTENT_TYPE;
  private readonly collectors: Collector[] = [];

  register(c: Collector): void {
    for (const name of c.names) {
      checkName(name);
      if (this.collectors.some((o) => o.names.includes(name)))
        throw new Error(`metric ${name} is registered already`);
    }
    this.collectors.push(c);
  }

  /** Everything, as a scrape gets it (async like prom-client's, which callers await). */
  async metrics(): Promise<string> {
    return `${this.collectors.map((c) => c.expose()).join('\n\n')}\n`;
  }
}

interface MetricOptions<L extends string> {
  name: string;
  help: string;
  labelNames?: readonly L[];
  registers?: readonly Registry[];
}

/**
 * What counters, gauges and histograms share: one series per distinct set of label values, keyed
 * by its rendered label string (escaped, so distinct values never collide), kept in the order
 * first touched.
 */
abstract class Family<L extends string, S> implements Collector {
  readonly name: string;
  readonly help: string;
  readonly names: readonly string[];
  protected readonly labelNames: readonly L[];
  protected readonly series = new Map<string, S>();

  constructor(o: MetricOptions<L>, reserved: string[]) {
    checkName(o.name);
    this.name = o.name;
    this.names = [o.name];
    this.help = o.help;
    this.labelNames = [...(o.labelNames ?? [])];
    checkLabelNames(o.name, this.labelNames, reserved);
    for (const r of o.registers ?? []) r.register(this);
  }

  abstract expose(): string;

  /** The series for these labels, made by `fresh` the first time. */
  protected at(labels: Labels<L> | undefined, fresh: () => S): { key: string; s: S } {
    const key = this.key(labels ?? ({} as Labels<L>));
    let s = this.series.get(key);
    if (s === undefined) {
      s = fresh();
      this.series.set(key, s);
    }
    return { key, s };
  }

  protected pairs(labels: Labels<L>): [string, string][] {
    return this.labelNames.map((n) => [n, labels[n]]);
  }

  private key(labels: Labels<L>): string {
    const given = Object.keys(labels);
    const ok =
      given.length === this.labelNames.length &&
      this.labelNames.every((n) => typeof (labels as Record<string, unknown>)[n] === 'string');
    if (!ok)
      throw new TypeError(
        `${this.name}: labels ${JSON.stringify(labels)} do not match {${this.labelNames.join(',')}}`,
      );
    return formatLabels(this.pairs(labels));
  }
}

/** Split `(labels, value)` / `(value)` arguments, as prom-client takes them. */
function args<L extends string>(
  a: Labels<L> | number | undefined,
  b: number | undefined,
  dflt: number | undefined,
): { labels: Labels<L> | undefined; value: number } {
  if (typeof a === 'number') return { labels: undefined, value: a };
  const value = b ?? dflt;
  if (value === undefined) throw new TypeError('no value given');
  return { labels: a, value };
}

/** Counters and gauges: one number per series; without label names, one series from 0. */
abstract class Scalar<L extends string> extends Family<L, { v: number }> {
  protected abstract readonly type: 'counter' | 'gauge';

  constructor(o: MetricOptions<L>) {
    super(o, []);
    if (this.labelNames.length === 0) this.at(undefined, () => ({ v: 0 }));
  }

  expose(): string {
    const lines = [familyHeader(this.name, this.help, this.type)];
    for (const [key, s] of this.series) lines.push(`${this.name}${key} ${formatValue(s.v)}`);
    return lines.join('\n');
  }
}

/** A number that only goes up. */
export class Counter<L extends string = never> extends Scalar<L> {
  protected readonly type = 'counter';

  inc(by?: number): void;
  inc(labels: Labels<L>, by?: number): void;
  inc(a?: Labels<L> | number, b?: number): void {
    const { labels, value } = args(a, b, 1);
    if (!(value >= 0) || value === Infinity)
      throw new RangeError(`${this.name}: a counter cannot go up by ${value}`);
    this.at(labels, () => ({ v: 0 })).s.v += value;
  }
}

/** A number that is set. */
export class Gauge<L extends string = never> extends Scalar<L> {
  protected readonly type = 'gauge';

  set(value: number): void;
  set(labels: Labels<L>, value: number): void;
  set(a: Labels<L> | number, b?: number): void {
    const { labels, value } = args(a, b, undefined);
    this.at(labels, () => ({ v: 0 })).s.v = value;
  }
}

function checkBuckets<T extends { name: string; buckets: readonly number[] }>(o: T): T {
  const b = o.buckets;
  if (b.length === 0 || b.some((x, i) => !Number.isFinite(x) || (i > 0 && x <= b[i - 1]!)))
    throw new TypeError(`${o.name}: buckets must be finite and increasing: ${b.join(', ')}`);
  return o;
}

interface HistogramSeries {
  labels: [string, string][];
  /** observations per bucket, not cumulative: [i] those in (buckets[i-1], buckets[i]]; last +Inf */
  counts: number[];
  sum: number;
  count: number;
}

/**
 * Observations counted into fixed buckets (upper bounds, strictly increasing, finite; +Inf is
 * added). Without label names its one series starts with every bucket at 0.
 */
export class Histogram<L extends string = never> extends Family<L, HistogramSeries> {
  readonly buckets: readonly number[];

  constructor(o: MetricOptions<L> & { buckets: readonly number[] }) {
    // checked before the family registers itself: a refused one must not be left in a registry
    super(checkBuckets(o), ['le']);
    this.buckets = [...o.buckets];
    if (this.labelNames.length === 0) this.at(undefined, () => this.fresh({} as Labels<L>));
  }

  observe(value: number): void;
  observe(labels: Labels<L>, value: number): void;
  observe(a: Labels<L> | number, b?: number): void {
    const { labels, value } = args(a, b, undefined);
    if (Number.isNaN(value)) throw new RangeError(`${this.name}: cannot observe NaN`);
    const s = this.at(labels, () => this.fresh(labels ?? ({} as Labels<L>))).s;
    let i = this.buckets.findIndex((ub) => value <= ub);
    if (i < 0) i = this.buckets.length;
    s.counts[i]! += 1;
    s.sum += value;
    s.count += 1;
  }

  expose(): string {
    const lines = [familyHeader(this.name, this.help, 'histogram')];
    for (const [key, s] of this.series) {
      let cumulative = 0;
      for (let i = 0; i <= this.buckets.length; i++) {
        cumulative += s.counts[i]!;
        const le = i < this.buckets.length ? formatValue(this.buckets[i]!) : '+Inf';
        lines.push(
          `${this.name}_bucket${formatLabels([...s.labels, ['le', le]])} ${formatValue(cumulative)}`,
        );
      }
      lines.push(`${this.name}_sum${key} ${formatValue(s.sum)}`);
      lines.push(`${this.name}_count${key} ${formatValue(s.count)}`);
    }
    return lines.join('\n');
  }

  private fresh(labels: Labels<L>): HistogramSeries {
    return {
      labels: this.pairs(labels),
      counts: new Array<number>(this.buckets.length + 1).fill(0),
      sum: 0,
      count: 0,
    };
  }
}
