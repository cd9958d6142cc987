// Unit tests of the Prometheus text exposition (src/health/prom-text.ts) against hand-written
// vectors of format 0.0.4: each metric type, escaping of label values and help text, cumulative
// histogram buckets ending in +Inf, the order of families, series and labels, and what the
// registry refuses; then twill's own families (src/health/metrics.ts): every name, type, label set
// and bucket it exposes, and the process metrics read at scrape time.
import { describe, expect, it } from 'vitest';
import { TwillMetrics } from '../../src/health/metrics.ts';
import {
  Counter,
  escapeHelp,
  escapeLabelValue,
  formatValue,
  Gauge,
  Histogram,
  PROMETHEUS_CONTENT_TYPE,
  Registry,
} from '../../src/health/prom-text.ts';

describe('escaping', () => {
  it('escapes backslash, double quote and newline in a label value, and nothing else', () => {
    expect(escapeLabelValue('a\\b"c\nd')).toBe('a\\\\b\\"c\\nd');
    expect(escapeLabelValue('\\n')).toBe('\\\\n');
    expect(escapeLabelValue("tab\t 'x' {é}")).toBe("tab\t 'x' {é}");
  });

  it('escapes backslash and newline in help text, leaving quotes', () => {
    expect(escapeHelp('say "hi"\\\nbye')).toBe('say "hi"\\\\\\nbye');
  });

  it('spells values as Prometheus parses them', () => {
    expect(formatValue(0)).toBe('0');
    expect(formatValue(-2.5)).toBe('-2.5');
    expect(formatValue(1e-7)).toBe('1e-7');
    expect(formatValue(1795567031)).toBe('1795567031');
    expect(formatValue(NaN)).toBe('NaN');
    expect(formatValue(Infinity)).toBe('+Inf');
    expect(formatValue(-Infinity)).toBe('-Inf');
  });
});

describe('exposition', () => {
  it('renders a counter, starting at 0 without labels, and counts up', async () => {
    const r = new Registry();
    const c = new Counter({ name: 'x_total', help: 'things', registers: [r] });
    expect(await r.metrics()).toBe('# HELP x_total things\n# TYPE x_total counter\nx_total 0\n');
    c.inc();
    c.inc(2.5);
    expect(await r.metrics()).toBe('# HELP x_total things\n# TYPE x_total counter\nx_total 3.5\n');
  });

  it('renders labelled series in the order first touched, labels in label-name order', async () => {
    const r = new Registry();
    const c = new Counter({
      name: 'ops_total',
      help: 'h',
      labelNames: ['kind', 'action'],
      registers: [r],
    });
    c.inc({ kind: 'route', action: 'add' });
    c.inc({ action: 'delete', kind: 'fdb' }, 3);
    c.inc({ kind: 'route', action: 'add' }, 0);
    c.inc({ kind: 'route', action: 'add' });
    expect(await r.metrics()).toBe(
      [
        '# HELP ops_total h',
        '# TYPE ops_total counter',
        'ops_total{kind="route",action="add"} 2',
        'ops_total{kind="fdb",action="delete"} 3',
        '',
      ].join('\n'),
    );
  });

  it('keeps a labelled family without series as its header alone', async () => {
    const r = new Registry();
    new Gauge({ name: 'g', help: 'h', labelNames: ['backend'], registers: [r] });
    expect(await r.metrics()).toBe('# HELP g h\n# TYPE g gauge\n');
  });

  it('renders gauges, set up and down, and separates families by a blank line', async () => {
    const r = new Registry();
    const a = new Gauge({ name: 'a', help: 'first', registers: [r] });
    const b = new Gauge({ name: 'b', help: 'second', labelNames: ['backend'], registers: [r] });
    a.set(5);
    a.set(-1.5);
    b.set({ backend: 'vxlan' }, 2);
    b.set({ backend: 'host-gw' }, 0);
    b.set({ backend: 'vxlan' }, 7);
    expect(await r.metrics()).toBe(
      [
        '# HELP a first',
        '# TYPE a gauge',
        'a -1.5',
        '',
        '# HELP b second',
        '# TYPE b gauge',
        'b{backend="vxlan"} 7',
        'b{backend="host-gw"} 0',
        '',
      ].join('\n'),
    );
  });

  it('escapes a label value with a quote, a backslash and a newline, and the help text', async () => {
    const r = new Registry();
    const g = new Gauge({
      name: 'info',
      help: 'line one\nline "two" \\ three',
      labelNames: ['version'],
      registers: [r],
    });
    g.set({ version: 'v"1\\\n2' }, 1);
    g.set({ version: 'v"1\\n2' }, 2);
    expect(await r.metrics()).toBe(
      [
        '# HELP info line one\\nline "two" \\\\ three',
        '# TYPE info gauge',
        'info{version="v\\"1\\\\\\n2"} 1',
        // a backslash followed by n is not a newline: a series of its own
        'info{version="v\\"1\\\\n2"} 2',
        '',
      ].join('\n'),
    );
  });

  it('renders a histogram: cumulative buckets, +Inf, _sum and _count', async () => {
    const r = new Registry();
    const h = new Histogram({
      name: 'd_seconds',
      help: 'h',
      buckets: [0.01, 0.1, 1],
      registers: [r],
    });
    const empty = [
      '# HELP d_seconds h',
      '# TYPE d_seconds histogram',
      'd_seconds_bucket{le="0.01"} 0',
      'd_seconds_bucket{le="0.1"} 0',
      'd_seconds_bucket{le="1"} 0',
      'd_seconds_bucket{le="+Inf"} 0',
      'd_seconds_sum 0',
      'd_seconds_count 0',
      '',
    ];
    expect(await r.metrics()).toBe(empty.join('\n'));
    // on a bound counts in that bucket (le is "less than or equal")
    for (const v of [0.01, 0.05, 0.1, 0.5, 5, 0.001]) h.observe(v);
    expect(await r.metrics()).toBe(
      [
        '# HELP d_seconds h',
        '# TYPE d_seconds histogram',
        'd_seconds_bucket{le="0.01"} 2',
        'd_seconds_bucket{le="0.1"} 4',
        'd_seconds_bucket{le="1"} 5',
        'd_seconds_bucket{le="+Inf"} 6',
        `d_seconds_sum ${0.01 + 0.05 + 0.1 + 0.5 + 5 + 0.001}`,
        'd_seconds_count 6',
        '',
      ].join('\n'),
    );
  });

  it('puts le after a labelled histogram series own labels, and _sum/_count with them', async () => {
    const r = new Registry();
    const h = new Histogram({
      name: 'h',
      help: 'x',
      labelNames: ['op'],
      buckets: [1],
      registers: [r],
    });
    h.observe({ op: 'a"b' }, 2);
    expect(await r.metrics()).toBe(
      [
        '# HELP h x',
        '# TYPE h histogram',
        'h_bucket{op="a\\"b",le="1"} 0',
        'h_bucket{op="a\\"b",le="+Inf"} 1',
        'h_sum{op="a\\"b"} 2',
        'h_count{op="a\\"b"} 1',
        '',
      ].join('\n'),
    );
  });

  it('names the 0.0.4 text content type', () => {
    expect(new Registry().contentType).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect(PROMETHEUS_CONTENT_TYPE).toBe(new Registry().contentType);
  });
});

describe('what the registry refuses', () => {
  it('refuses a name registered twice and invalid names', () => {
    const r = new Registry();
    new Gauge({ name: 'g', help: 'h', registers: [r] });
    expect(() => new Counter({ name: 'g', help: 'h', registers: [r] })).toThrow(
      /registered already/,
    );
    expect(() => new Gauge({ name: '1g', help: 'h' })).toThrow(/invalid metric name/);
    expect(() => new Gauge({ name: 'g', help: 'h', labelNames: ['a-b'] })).toThrow(/label name/);
    expect(() => new Gauge({ name: 'g', help: 'h', labelNames: ['__x'] })).toThrow(/label name/);
    expect(() => new Histogram({ name: 'h', help: 'h', labelNames: ['le'], buckets: [1] })).toThrow(
      /label name/,
    );
  });

  it('refuses labels that are not exactly the label names', () => {
    const g = new Gauge({ name: 'g', help: 'h', labelNames: ['a', 'b'] });
    expect(() => g.set({ a: 'x' } as never, 1)).toThrow(/do not match/);
    expect(() => g.set({ a: 'x', b: 'y', c: 'z' } as never, 1)).toThrow(/do not match/);
    expect(() => g.set({ a: 'x', b: 1 } as never, 1)).toThrow(/do not match/);
    expect(() => g.set(1)).toThrow(/do not match/);
  });

  it('refuses a counter going down, and unsorted or infinite buckets', async () => {
    const c = new Counter({ name: 'c', help: 'h' });
    expect(() => c.inc(-1)).toThrow(/cannot go up by -1/);
    expect(() => c.inc(NaN)).toThrow(/cannot go up/);
    expect(() => new Histogram({ name: 'h', help: 'h', buckets: [1, 1] })).toThrow(/increasing/);
    expect(() => new Histogram({ name: 'h', help: 'h', buckets: [2, 1] })).toThrow(/increasing/);
    // a histogram refused is not left in its registry, where every scrape would trip on it
    const r = new Registry();
    expect(() => new Histogram({ name: 'h', help: 'h', buckets: [], registers: [r] })).toThrow(
      /increasing/,
    );
    expect(await r.metrics()).toBe('\n');
    expect(() => new Histogram({ name: 'h', help: 'h', buckets: [1, Infinity] })).toThrow(/finite/);
  });
});

/** family name -> [type, sample lines without their value] from an exposition */
function families(text: string): Map<string, { type: string; samples: string[] }> {
  const out = new Map<string, { type: string; samples: string[] }>();
  let current: { type: string; samples: string[] } | undefined;
  for (const line of text.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) out.set(t[1]!, (current = { type: t[2]!, samples: [] }));
    else if (line !== '' && !line.startsWith('#')) current?.samples.push(line.replace(/ \S+$/, ''));
  }
  return out;
}

describe("twill's metrics", () => {
  it('exposes every family under its name, type, labels and buckets', async () => {
    const m = new TwillMetrics({ version: '1.2.3' });
    m.peers.set({ backend: 'vxlan' }, 1);
    m.peersIpv6.set({ backend: 'vxlan' }, 1);
    m.ops.inc({ kind: 'route', action: 'add' });
    m.relists.inc({ reason: 'compacted' });
    const text = await m.registry.metrics();
    const f = families(text);
    expect([...f.keys()]).toStrictEqual([
      'twill_build_info',
      'twill_peers',
      'twill_peers_ipv6',
      'twill_lease_expiry_timestamp_seconds',
      'twill_reconcile_passes_total',
      'twill_reconcile_pass_duration_seconds',
      'twill_dataplane_ops_total',
      'twill_drift_repaired_total',
      'twill_store_watch_restarts_total',
      'twill_store_connected',
      'twill_refused_peers',
      'twill_ready',
      'process_cpu_user_seconds_total',
      'process_cpu_system_seconds_total',
      'process_cpu_seconds_total',
      'process_start_time_seconds',
      'process_resident_memory_bytes',
      'process_open_fds',
      'nodejs_heap_size_total_bytes',
      'nodejs_heap_size_used_bytes',
      'nodejs_external_memory_bytes',
    ]);
    expect(text).toContain(
      `twill_build_info{version="1.2.3",node_version="${process.versions.node}"} 1\n`,
    );
    expect(f.get('twill_reconcile_pass_duration_seconds')).toStrictEqual({
      type: 'histogram',
      samples: [
        ...[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, '+Inf'].map(
          (le) => `twill_reconcile_pass_duration_seconds_bucket{le="${le}"}`,
        ),
        'twill_reconcile_pass_duration_seconds_sum',
        'twill_reconcile_pass_duration_seconds_count',
      ],
    });
    expect(f.get('twill_reconcile_passes_total')?.samples).toStrictEqual(
      ['converged', 'changed', 'failed'].map((r) => `twill_reconcile_passes_total{result="${r}"}`),
    );
    expect(f.get('twill_drift_repaired_total')?.samples).toHaveLength(5);
    expect(f.get('twill_refused_peers')?.samples).toHaveLength(11);
    expect(f.get('twill_dataplane_ops_total')?.samples).toStrictEqual([
      'twill_dataplane_ops_total{kind="route",action="add"}',
    ]);
    expect(f.get('twill_store_watch_restarts_total')?.samples).toStrictEqual([
      'twill_store_watch_restarts_total{reason="compacted"}',
    ]);
    for (const [name, type] of [
      ['twill_build_info', 'gauge'],
      ['twill_peers', 'gauge'],
      ['twill_peers_ipv6', 'gauge'],
      ['twill_lease_expiry_timestamp_seconds', 'gauge'],
      ['twill_store_connected', 'gauge'],
      ['twill_refused_peers', 'gauge'],
      ['twill_ready', 'gauge'],
      ['twill_dataplane_ops_total', 'counter'],
      ['twill_drift_repaired_total', 'counter'],
      ['twill_store_watch_restarts_total', 'counter'],
      ['process_cpu_seconds_total', 'counter'],
      ['process_resident_memory_bytes', 'gauge'],
    ])
      expect(f.get(name!)?.type, name).toBe(type);
  });

  it('reads the process metrics when scraped', async () => {
    const m = new TwillMetrics({ version: 'x' });
    const value = (text: string, name: string): number =>
      Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
    const before = await m.registry.metrics();
    // burn some CPU: the counters are read at scrape time, not sampled on a timer
    const until = performance.now() + 30;
    while (performance.now() < until);
    const after = await m.registry.metrics();
    expect(value(after, 'process_cpu_seconds_total')).toBeGreaterThan(
      value(before, 'process_cpu_seconds_total'),
    );
    expect(value(after, 'process_cpu_seconds_total')).toBeCloseTo(
      value(after, 'process_cpu_user_seconds_total') +
        value(after, 'process_cpu_system_seconds_total'),
      5,
    );
    const rss = value(after, 'process_resident_memory_bytes');
    expect(rss).toBeGreaterThan(10 * 2 ** 20);
    expect(rss).toBeLessThan(process.memoryUsage.rss() * 2);
    const start = value(after, 'process_start_time_seconds');
    expect(Math.abs(start - (Date.now() / 1000 - process.uptime()))).toBeLessThanOrEqual(1);
    expect(value(after, 'process_open_fds')).toBeGreaterThan(2);
    expect(value(after, 'nodejs_heap_size_used_bytes')).toBeLessThanOrEqual(
      value(after, 'nodejs_heap_size_total_bytes'),
    );
    expect(value(after, 'nodejs_external_memory_bytes')).toBeGreaterThan(0);
  });
});
