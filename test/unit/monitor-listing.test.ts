// The chain listing that stands in for a flooded `nft monitor`: what it
// lists, how its output is read (a changed table is an event, the first full
// round the baseline), the shell plumbing around one long-lived `nft -i` (run
// here with a stand-in `nft`), and the switch: once the listing has read every
// table a pass looks at them all (what changed before is seen by no listing),
// and the iptables poll takes over when the listing fails.
import { readFile, rm, mkdtemp, writeFile, chmod } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runMonitors } from '../../src/dataplane/monitor.ts';
import type { Touch } from '../../src/dataplane/kernel-event.ts';
import { listingInput, listingParts, listingReader } from '../../src/dataplane/nft-listing.ts';
import { watchLines, type LineWatcher, type WatchOptions } from '../../src/exec/runner.ts';
import { captureLog } from '../helpers/log.ts';
import { waitFor } from '../../lab/kit/wait.ts';

const END = 'payload expression, datatype integer (integer), 16 bits';

describe('listingParts', () => {
  it("lists the built-in chain and twill's, per table, in the node's families", () => {
    expect(listingParts()).toEqual([
      {
        table: 'nat',
        commands: ['list chain ip nat POSTROUTING', 'list chain ip nat TWILL-POSTRTG'],
      },
      {
        table: 'filter',
        commands: ['list chain ip filter FORWARD', 'list chain ip filter TWILL-FWD'],
      },
    ]);
    expect(listingParts({ ipv6: true })[0]?.commands).toEqual([
      'list chain ip nat POSTROUTING',
      'list chain ip nat TWILL-POSTRTG',
      'list chain ip6 nat POSTROUTING',
      'list chain ip6 nat TWILL-POSTRTG',
    ]);
    expect(listingParts({ ipv4: false, ipv6: true })[1]?.commands).toEqual([
      'list chain ip6 filter FORWARD',
      'list chain ip6 filter TWILL-FWD',
    ]);
  });
});

describe('listingReader', () => {
  const round = (nat: string[], filter: string[]): string[] => [...nat, END, ...filter, END];

  function reader(): {
    feed: (lines: string[]) => void;
    changed: string[];
    baselines: number;
    overflows: number;
  } {
    const out = { changed: [] as string[], baselines: 0, overflows: 0 };
    const onLine = listingReader(listingParts(), {
      changed: (t) => out.changed.push(t),
      baseline: () => out.baselines++,
      overflow: () => out.overflows++,
    });
    return {
      feed: (lines) => lines.forEach(onLine),
      get changed() {
        return out.changed;
      },
      get baselines() {
        return out.baselines;
      },
      get overflows() {
        return out.overflows;
      },
    };
  }

  const nat = [
    'table ip nat {',
    '\tchain TWILL-POSTRTG { # handle 3',
    '\t\tcounter masquerade # handle 9',
  ];
  const filter = ['table ip filter {', '\tchain TWILL-FWD { # handle 2'];

  it('takes the first round as the baseline, once every table is in', () => {
    const r = reader();
    r.feed([...nat, END]);
    expect(r.baselines).toBe(0);
    r.feed([...filter, END]);
    expect(r.baselines).toBe(1);
    expect(r.changed).toEqual([]);
    r.feed(round(nat, filter));
    expect(r.baselines).toBe(1);
    expect(r.changed).toEqual([]);
  });

  it('reports the table whose listing changed, against the round before', () => {
    const r = reader();
    r.feed(round(nat, filter));
    const natDeleted = nat.slice(0, 2);
    r.feed(round(natDeleted, filter));
    expect(r.changed).toEqual(['nat']);
    r.feed(round(natDeleted, filter));
    expect(r.changed).toEqual(['nat']);
    r.feed(round(natDeleted, ['Error: No such file or directory', 'list chain ip filter FORWARD']));
    expect(r.changed).toEqual(['nat', 'filter']);
    // put back: a change again
    r.feed(round(nat, filter));
    expect(r.changed).toEqual(['nat', 'filter', 'nat', 'filter']);
  });

  it('gives up on a part that never ends', () => {
    const r = reader();
    const line = `\t\t${'x'.repeat(1000)}`;
    for (let i = 0; i < 2000; i++) r.feed([line]);
    expect(r.overflows).toBe(1);
    r.feed([END, ...filter, END]);
    expect(r.baselines).toBe(0);
  });
});

describe('the listing fed to a stand-in nft', () => {
  let dir: string;
  const path = process.env.PATH;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'twill-listing-'));
    // answers as `nft -i` does: a line per command, the describe line for LISTING_END
    await writeFile(
      join(dir, 'nft'),
      [
        '#!/bin/sh',
        `echo "$$ $*" > ${dir}/nft.pid`,
        'while IFS= read -r l; do',
        '  case "$l" in describe*) echo "payload expression, stand-in" ;; *) echo "listed: $l" ;; esac',
        'done',
      ].join('\n'),
    );
    await chmod(join(dir, 'nft'), 0o755);
    process.env.PATH = `${dir}:${path ?? ''}`;
  });
  afterAll(async () => {
    process.env.PATH = path;
    await rm(dir, { recursive: true, force: true });
  });

  it('feeds one long-lived nft every round, and ends it on abort', async () => {
    const parts = listingParts();
    const ctl = new AbortController();
    const lines: string[] = [];
    const changed: string[] = [];
    let baselines = 0;
    const read = listingReader(parts, {
      changed: (t) => changed.push(t),
      baseline: () => baselines++,
      overflow: () => {},
    });
    const watching = watchLines('nft', ['-s', '-a', '-i'], {
      signal: ctl.signal,
      feed: { text: listingInput(parts), everyMs: 50 },
      onLine: (l) => {
        lines.push(l);
        read(l);
      },
    });
    await waitFor(() => lines.filter((l) => l.startsWith('payload')).length >= 6, {
      timeoutMs: 10_000,
      what: 'three rounds',
    });
    const [pid, ...args] = (await readFile(join(dir, 'nft.pid'), 'utf8')).trim().split(' ');
    expect(args).toEqual(['-s', '-a', '-i']);
    expect(lines.slice(0, 6)).toEqual([
      'listed: list chain ip nat POSTROUTING',
      'listed: list chain ip nat TWILL-POSTRTG',
      'payload expression, stand-in',
      'listed: list chain ip filter FORWARD',
      'listed: list chain ip filter TWILL-FWD',
      'payload expression, stand-in',
    ]);
    expect(baselines).toBe(1);
    expect(changed).toEqual([]);
    ctl.abort();
    await watching;
    // the one nft of every round is gone on abort
    await waitFor(
      async () =>
        !(await readFile(`/proc/${pid}/stat`, 'utf8').then(
          () => true,
          () => false,
        )),
      { timeoutMs: 5_000, what: 'the stand-in nft gone' },
    );
  });
});

/**
 * A LineWatcher playing `ip monitor` (quiet), `nft monitor` (one flood) and the listing (the given
 * rounds of lines, then quiet; or failing at once).
 */
function fakeWatch(o: { listing: string[][] | 'fails' }): {
  watch: LineWatcher;
  started: string[];
  monitorStopped: () => boolean;
  listingLines: (lines: string[]) => void;
} {
  const started: string[] = [];
  let monitorSignal: AbortSignal | undefined;
  let listing: WatchOptions | undefined;
  const untilAbort = (signal: AbortSignal): Promise<void> =>
    new Promise((r) => signal.addEventListener('abort', () => r(), { once: true }));
  const watch: LineWatcher = async (file, args, opts) => {
    started.push(`${file} ${args[0] ?? ''}`);
    if (file === 'nft' && args[0] === 'monitor') {
      monitorSignal = opts.signal;
      setTimeout(() => opts.onBytes?.(1_000_000), 10);
    }
    if (file === 'nft' && args.join(' ') === '-s -a -i') {
      if (!opts.feed?.text.includes('list chain ip nat TWILL-POSTRTG')) throw new Error('no feed');
      if (o.listing === 'fails') throw new Error('nft: interactive CLI not supported');
      listing = opts;
      for (const l of o.listing.flat()) opts.onLine(l);
    }
    await untilAbort(opts.signal);
  };
  return {
    watch,
    started,
    monitorStopped: () => monitorSignal?.aborted === true,
    listingLines: (lines) => lines.forEach((l) => listing?.onLine(l)),
  };
}

describe('a flooded nft monitor gives way to the listing', () => {
  const flood = { bytes: 1000, windowMs: 10_000, cooldownMs: 60_000 };
  const nat = ['table ip nat {', '\tcounter masquerade # handle 9'];
  const filter = ['table ip filter {'];

  function start(listing: string[][] | 'fails') {
    const fake = fakeWatch({ listing });
    const events: { source: string; touch?: Touch }[] = [];
    let polls = 0;
    const ctl = new AbortController();
    const log = captureLog();
    const running = runMonitors(
      {
        watch: fake.watch,
        logger: log.logger,
        ctx: { underlay: 'eth0' },
        nft: true,
        onEvent: (source, touch) => events.push({ source, ...(touch ? { touch } : {}) }),
        poll: async (s) => {
          polls++;
          await new Promise((r) => s.addEventListener('abort', r, { once: true }));
        },
        flood,
      },
      ctl.signal,
    );
    const listed = () => events.filter((e) => e.source.startsWith('nft listing'));
    return { fake, listed, polls: () => polls, log, stop: () => (ctl.abort(), running) };
  }

  it('looks at every table once the listing has read them all, then at the changed ones', async () => {
    const m = start([[...nat, END]]);
    await waitFor(() => m.fake.started.includes('nft -s'), { timeoutMs: 5_000, what: 'listing' });
    expect(m.fake.monitorStopped()).toBe(true);
    expect(m.log.lines.some((l) => l.msg.startsWith('nft monitor flooded'))).toBe(true);
    // the nat table is in, the filter table not yet: no baseline, nothing to look at
    expect(m.listed()).toEqual([]);
    m.fake.listingLines([...filter, END]);
    const all = { kind: 'chains', tables: ['nat', 'filter'] };
    expect(m.listed()).toEqual([{ source: 'nft listing started', touch: all }]);
    // the same round again: nothing; the nat table changed: an event over its chains
    m.fake.listingLines([...nat, END, ...filter, END]);
    m.fake.listingLines([nat[0] ?? '', END, ...filter, END]);
    expect(m.listed()).toEqual([
      { source: 'nft listing started', touch: all },
      { source: 'nft listing', touch: { kind: 'chains', tables: ['nat'] } },
    ]);
    expect(m.polls()).toBe(0);
    await m.stop();
  });

  it('falls back to the iptables poll when the listing fails', async () => {
    const m = start('fails');
    await waitFor(() => m.polls() === 1, { timeoutMs: 5_000, what: 'the poll' });
    expect(m.fake.monitorStopped()).toBe(true);
    expect(m.log.lines.some((l) => l.msg.startsWith("nft listing of twill's chains stopped"))).toBe(
      true,
    );
    await m.stop();
  });
});
