// applyOps' order within the links' lane: the FDB batch (bridge) and the
// neighbour/route batch (ip, post) start together once the ip-pre batch is
// done, so a new peer waits for one process start instead of two; when the
// post batch deletes a device, the FDB batch (which may delete that device's
// entries) still finishes first. A runner that takes 30 ms a batch records
// when each started and ended.
import { describe, expect, it } from 'vitest';
import { applyOps } from '../../src/dataplane/apply.ts';
import type { Op } from '../../src/dataplane/model.ts';
import type { Runner } from '../../src/exec/runner.ts';

interface Span {
  readonly what: string;
  readonly start: number;
  readonly end: number;
}

function timedRunner(spans: Span[]): Runner {
  let clock = 0;
  return async (file, _args, opts) => {
    const start = clock++;
    await new Promise((r) => setTimeout(r, 30));
    const first = (opts?.input ?? '').split('\n')[0] ?? '';
    spans.push({ what: `${file}: ${first}`, start, end: clock++ });
    return { stdout: '', stderr: '' };
  };
}

const overlap = (a: Span, b: Span): boolean => a.start < b.end && b.start < a.end;
const spanOf = (spans: readonly Span[], prefix: string): Span => {
  const s = spans.find((x) => x.what.startsWith(prefix));
  if (!s) throw new Error(`no batch ${prefix}: ${spans.map((x) => x.what).join(', ')}`);
  return s;
};

const fdbAdd: Op = {
  kind: 'fdb',
  action: 'add',
  phase: 'bridge',
  fdb: { dev: 'twill.1', mac: '02:42:00:00:01:02', dst: '172.16.1.2' },
};
const neighAdd: Op = {
  kind: 'neigh',
  action: 'add',
  phase: 'ip-post',
  neigh: { ip: '10.1.2.0', mac: '02:42:00:00:01:02', dev: 'twill.1' },
};
const routeDelete: Op = {
  kind: 'route',
  action: 'delete',
  phase: 'ip-pre',
  route: { dst: '10.9.9.0/24', via: '10.9.9.0', dev: 'twill.1', onlink: true },
};

describe('applyOps, the links lane', () => {
  it('starts the FDB and the neighbour batches together, after the ip-pre batch', async () => {
    const spans: Span[] = [];
    const r = await applyOps(
      timedRunner(spans),
      [routeDelete, fdbAdd, neighAdd],
      new AbortController().signal,
    );
    expect(r).toEqual({ batches: 3, failures: [] });
    const pre = spanOf(spans, 'ip: route del');
    const bridge = spanOf(spans, 'bridge: fdb append');
    const post = spanOf(spans, 'ip: neigh replace');
    expect(pre.end).toBeLessThan(bridge.start);
    expect(pre.end).toBeLessThan(post.start);
    expect(overlap(bridge, post)).toBe(true);
  });

  it('keeps the FDB batch before a post batch that deletes a device', async () => {
    const spans: Span[] = [];
    const fdbDelete: Op = {
      kind: 'fdb',
      action: 'delete',
      phase: 'bridge',
      fdb: { dev: 'twill-v6.1', mac: '02:43:00:00:01:02', dst: 'fd00::2' },
    };
    const linkDelete: Op = { kind: 'link', action: 'delete', phase: 'ip-post', name: 'twill-v6.1' };
    await applyOps(timedRunner(spans), [fdbDelete, linkDelete], new AbortController().signal);
    const bridge = spanOf(spans, 'bridge: fdb del');
    const post = spanOf(spans, 'ip: link del');
    expect(bridge.end).toBeLessThan(post.start);
  });
});
