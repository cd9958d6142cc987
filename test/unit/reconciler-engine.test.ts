// The reconciler's engine, driven for real with a fake clock (vitest's fake
// timers: setTimeout, Date and process.hrtime; Math.random pinned, so back-off
// and resync jitter are exact) and a fake runner that answers the reads and
// runs the batches against an in-memory kernel: triggers coalesce, passes
// never overlap, failures back off (a success resets it), the resync timer
// runs full passes on its own, nothing runs before `ready`, and an abort ends
// the loop leaving no timer behind; on an IPv4-only node the first full pass
// alone reads what a dual-stack run may have left, and on an IPv6-only node
// what an IPv4 run may have left. Assertions are on runner calls, PassReport
// fields and the fake kernel, never on the ops themselves.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { desiredState } from '../../src/dataplane/desired.ts';
import { QUIET_MIN_ENTRIES, Reconciler } from '../../src/dataplane/reconciler.ts';
import type { PassReport } from '../../src/dataplane/pass-report.ts';
import { CommandError, type RunResult, type Runner } from '../../src/exec/runner.ts';
import type { Lease } from '../../src/lease/types.ts';
import { backendInput, peerLease } from '../helpers/dataplane.ts';
import { captureLog, type CapturedLog } from '../helpers/log.ts';

const SETTLE = 10;
const RESYNC = 60_000;
/** the first read of every observed pass */
const LINKS = 'ip -d -json addr show';
const ROUTES = 'ip -N -json route show table main';
const IP_BATCH = 'ip -force -batch -';
const PEER4_ROUTE = '10.244.4.0/24';

interface Link {
  readonly name: string;
  readonly vni: number;
  readonly local: string;
  readonly underlay: string;
  readonly port: number;
  readonly learning: boolean;
  readonly gbp: boolean;
  mtu: number;
  mac: string;
  up: boolean;
  addrs: string[];
}

interface Route {
  readonly dst: string;
  readonly via: string;
  readonly dev: string;
  readonly onlink: boolean;
  readonly proto: number;
  /** IPv4: the metric (0 when none is given) */
  readonly metric: number;
}

const BUILTIN = new Set(['POSTROUTING', 'FORWARD']);

/**
 * What the fake kernel holds: vxlan links, routes, permanent neighbours and FDB entries, and
 * iptables chains. It reads the batch text the way the tools do, as far as twill writes it.
 */
class Kernel {
  readonly links = new Map<string, Link>();
  readonly routes = new Map<string, Route>();
  /** "dev ip" → MAC */
  readonly neighs = new Map<string, string>();
  /** "dev mac dst" */
  readonly fdb = new Set<string>();
  /** "table chain" → its rules as `iptables -S` prints them */
  chains = new Map<string, string[]>([
    ['nat POSTROUTING', []],
    ['filter FORWARD', []],
  ]);
  /** the same for ip6tables */
  chains6 = new Map<string, string[]>([
    ['nat POSTROUTING', []],
    ['filter FORWARD', []],
  ]);

  /** One `ip -batch` line; an error message when the kernel refuses it. */
  ip(line: string): string | undefined {
    const [obj, verb, name = '', ...rest] = line.trim().split(/\s+/);
    const has = (k: string): boolean => rest.includes(k);
    const opt = (k: string): string => rest[rest.indexOf(k) + 1] ?? '';
    const link = this.links.get(name);
    switch (`${obj} ${verb}`) {
      case 'link add':
        if (link) return 'RTNETLINK answers: File exists';
        this.links.set(name, {
          name,
          vni: Number(opt('id')),
          local: opt('local'),
          underlay: opt('dev'),
          port: Number(opt('dstport')),
          learning: !has('nolearning'),
          gbp: has('gbp'),
          mtu: Number(opt('mtu')),
          mac: opt('address'),
          up: false,
          addrs: [],
        });
        return undefined;
      case 'link set':
        if (!link) return `Cannot find device "${name}"`;
        if (has('up')) link.up = true;
        if (has('address')) link.mac = opt('address');
        if (has('mtu')) link.mtu = Number(opt('mtu'));
        return undefined;
      case 'link del':
        if (!this.links.delete(name)) return `Cannot find device "${name}"`;
        // the device's routes, neighbours and FDB entries go with it
        for (const [k, r] of this.routes) if (r.dev === name) this.routes.delete(k);
        for (const k of this.neighs.keys()) if (k.startsWith(`${name} `)) this.neighs.delete(k);
        for (const k of this.fdb) if (k.startsWith(`${name} `)) this.fdb.delete(k);
        return undefined;
      case 'addr add':
      case 'addr del': {
        const dev = this.links.get(opt('dev'));
        if (!dev) return `Cannot find device "${opt('dev')}"`;
        dev.addrs = dev.addrs.filter((a) => a !== name);
        if (verb === 'add') dev.addrs.push(name);
        return undefined;
      }
      case 'route add':
      case 'route replace': {
        // the kernel keys a route by destination and metric: a second metric is a second route,
        // kept here under "dst#metric"
        const metric = has('metric') ? Number(opt('metric')) : 0;
        const key =
          this.routeKey(name, metric) ?? (this.routes.has(name) ? `${name}#${metric}` : name);
        if (verb === 'add' && this.routes.has(key)) return 'RTNETLINK answers: File exists';
        this.routes.set(key, {
          dst: name,
          via: opt('via'),
          dev: opt('dev'),
          onlink: has('onlink'),
          proto: Number(opt('proto')),
          metric,
        });
        return undefined;
      }
      case 'route del': {
        // no metric given: the first of that destination's routes, lowest metric first
        const key = has('metric')
          ? this.routeKey(name, Number(opt('metric')))
          : [...this.routes.entries()]
              .filter(([, r]) => r.dst === name)
              .sort(([, a], [, b]) => a.metric - b.metric)[0]?.[0];
        return key !== undefined && this.routes.delete(key)
          ? undefined
          : 'RTNETLINK answers: No such process';
      }
      case 'neigh replace':
        this.neighs.set(`${opt('dev')} ${name}`, opt('lladdr'));
        return undefined;
      case 'neigh del':
        return this.neighs.delete(`${opt('dev')} ${name}`)
          ? undefined
          : 'RTNETLINK answers: No such file or directory';
      default:
        return `fake kernel: cannot read "${line}"`;
    }
  }

  /** One `bridge -batch` line. */
  bridge(line: string): string | undefined {
    const [obj, verb, mac = '', ...rest] = line.trim().split(/\s+/);
    const opt = (k: string): string => rest[rest.indexOf(k) + 1] ?? '';
    const key = `${opt('dev')} ${mac} ${opt('dst')}`;
    if (obj === 'fdb' && verb === 'append') this.fdb.add(key);
    else if (obj === 'fdb' && verb === 'del') {
      if (!this.fdb.delete(key)) return 'RTNETLINK answers: No such file or directory';
    } else return `fake kernel: cannot read "${line}"`;
    return undefined;
  }

  /** An `iptables-restore --noflush` payload (ip6tables' with `v6`): each table all or nothing. */
  restore(input: string, v6 = false): string | undefined {
    const chains = new Map([...(v6 ? this.chains6 : this.chains)].map(([k, v]) => [k, [...v]]));
    let table = '';
    for (const line of input.split('\n')) {
      if (line === '' || line === 'COMMIT') continue;
      if (line.startsWith('*')) {
        table = line.slice(1);
        continue;
      }
      const declared = /^:(\S+) /.exec(line);
      // declaring a chain creates it, or empties it when it exists
      if (declared) {
        chains.set(`${table} ${declared[1] ?? ''}`, []);
        continue;
      }
      const [flag, chain = ''] = line.split(' ');
      const rules = chains.get(`${table} ${chain}`);
      if (rules === undefined) return `iptables-restore: chain ${chain} does not exist`;
      const rule = `-A ${line.slice(3)}`;
      if (flag === '-A') rules.push(rule);
      else if (flag === '-D' && rules.includes(rule)) rules.splice(rules.indexOf(rule), 1);
      else if (flag === '-X') chains.delete(`${table} ${chain}`);
      else return `iptables-restore: cannot apply "${line}"`;
    }
    if (v6) this.chains6 = chains;
    else this.chains = chains;
    return undefined;
  }

  /** `iptables -S <chain>` (ip6tables' with `v6`), or undefined when the chain does not exist. */
  listChain(table: string, chain: string, v6 = false): string | undefined {
    const rules = (v6 ? this.chains6 : this.chains).get(`${table} ${chain}`);
    if (rules === undefined) return undefined;
    const head = BUILTIN.has(chain) ? `-P ${chain} ACCEPT` : `-N ${chain}`;
    return [head, ...rules].map((l) => `${l}\n`).join('');
  }

  linksJson(): unknown {
    return [...this.links.values()].map((l) => ({
      ifname: l.name,
      mtu: l.mtu,
      address: l.mac,
      flags: l.up ? ['BROADCAST', 'MULTICAST', 'UP', 'LOWER_UP'] : ['BROADCAST', 'MULTICAST'],
      linkinfo: {
        info_kind: 'vxlan',
        info_data: {
          id: l.vni,
          local: l.local,
          link: l.underlay,
          port: l.port,
          learning: l.learning,
          ...(l.gbp ? { gbp: true } : {}),
        },
      },
      addr_info: l.addrs.map((a) => {
        const [local, len] = a.split('/');
        return a.includes(':')
          ? { family: 'inet6', local, prefixlen: Number(len), scope: 'global' }
          : { family: 'inet', local, prefixlen: Number(len) };
      }),
    }));
  }

  /** The key a route of this destination and metric is kept under, if there is one. */
  routeKey(dst: string, metric: number): string | undefined {
    for (const [k, r] of this.routes) if (r.dst === dst && r.metric === metric) return k;
    return undefined;
  }

  /**
   * The routes of one family (`ip -json route` lists IPv4's, `ip -6 -json route` IPv6's), of one
   * protocol or (undefined) all.
   */
  routesJson(proto: number | undefined, v6 = false): unknown {
    return [...this.routes.values()]
      .filter((r) => (proto === undefined || r.proto === proto) && r.dst.includes(':') === v6)
      .map((r) => ({
        dst: r.dst,
        gateway: r.via,
        dev: r.dev,
        protocol: String(r.proto),
        ...(r.metric ? { metric: r.metric } : {}),
        flags: r.onlink ? ['onlink'] : [],
      }));
  }

  neighsJson(dev: string): unknown {
    return [...this.neighs]
      .filter(([k]) => k.startsWith(`${dev} `))
      .map(([k, mac]) => ({ dst: k.slice(dev.length + 1), lladdr: mac, state: ['PERMANENT'] }));
  }

  fdbJson(dev: string): unknown {
    return [...this.fdb]
      .map((k) => k.split(' '))
      .filter(([d]) => d === dev)
      .map(([, mac, dst]) => ({ mac, dst, state: 'permanent' }));
  }
}

interface Call {
  /** the program and its arguments, joined by spaces */
  readonly cmd: string;
  readonly input: string | undefined;
  /** performance.now() (fake) when it was called */
  readonly at: number;
}

/** A call held until `release()` (or until its signal aborts). */
class Hold {
  reached = false;
  private resume: (() => void) | undefined;
  private released = false;

  wait(): Promise<void> {
    if (this.released) return Promise.resolve();
    return new Promise((resolve) => (this.resume = resolve));
  }

  release(): void {
    this.released = true;
    this.resume?.();
  }
}

const cancelled = (command: string[]): CommandError =>
  new CommandError({ command, exitCode: undefined, stderr: '', reason: 'cancelled' });

/**
 * The Runner a reconciler is given: answers from the fake kernel, records every call, fails on
 * demand, holds a call until released, or makes every call take a while (fake time). Like the real
 * runner, a call whose signal aborts is rejected as cancelled.
 */
class FakeHost {
  readonly kernel = new Kernel();
  readonly calls: Call[] = [];
  /** calls started and not yet settled */
  inFlight = 0;
  /** commands the fake does not know: each one fails the test */
  readonly unexpected: string[] = [];
  /** batches succeed but change nothing (something else undoes every change) */
  frozen = false;
  /** how long (fake ms) every call takes */
  latencyMs = 0;
  /** a kernel without IPv6 and no ip6tables: `ip -6` fails, ip6tables cannot be started */
  noIpv6 = false;
  /** no iptables (an IPv6-only node with only ip6tables): iptables cannot be started */
  noIptables = false;
  private failing: { match: (cmd: string) => boolean; times: number }[] = [];
  private holds: { match: (cmd: string) => boolean; hold: Hold }[] = [];

  readonly runner: Runner = async (file, args, opts = {}) => {
    const command = [file, ...args];
    const cmd = command.join(' ');
    this.calls.push({ cmd, input: opts.input, at: performance.now() });
    this.inFlight++;
    try {
      if (opts.signal?.aborted) throw cancelled(command);
      const held = this.holds.find((h) => !h.hold.reached && h.match(cmd))?.hold;
      if (held) held.reached = true;
      const delay = held ? held.wait() : this.latencyMs > 0 ? sleepFake(this.latencyMs) : null;
      if (delay) await abortable(delay, opts.signal, command);
      return this.answer(file, args, opts.input ?? '');
    } finally {
      this.inFlight--;
    }
  };

  /** Calls matching `match` fail (exit code 2), `times` times. */
  fail(match: (cmd: string) => boolean, times = Infinity): void {
    this.failing.push({ match, times });
  }

  heal(): void {
    this.failing = [];
  }

  /** The next call matching `match` waits until the returned hold is released. */
  hold(match: (cmd: string) => boolean): Hold {
    const hold = new Hold();
    this.holds.push({ match, hold });
    return hold;
  }

  private answer(file: string, args: readonly string[], input: string): RunResult {
    const command = [file, ...args];
    const cmd = command.join(' ');
    const rule = this.failing.find((f) => f.times > 0 && f.match(cmd));
    if (rule) {
      rule.times--;
      throw new CommandError({
        command,
        exitCode: 2,
        stderr: 'Error: injected failure',
        reason: 'exit code 2',
      });
    }
    const json = (v: unknown): RunResult => ({ stdout: JSON.stringify(v), stderr: '' });
    const a = args.join(' ');
    let m: RegExpExecArray | null;
    if (cmd === LINKS) return json(this.kernel.linksJson());
    // twill's routes (proto N), or with -N the whole table, protocols as numbers
    const proto = (m: RegExpExecArray): number | undefined =>
      m[1] === undefined ? undefined : Number(m[1]);
    if (file === 'ip' && (m = /^(?:-N )?-json route show table main(?: proto (\d+))?$/.exec(a)))
      return json(this.kernel.routesJson(proto(m)));
    // IPv6: its routes and ip6tables chains (none on an IPv4-only node), or no IPv6 at all
    if (
      file === 'ip' &&
      (m = /^-6 (?:-N )?-json route show table main(?: proto (\d+))?$/.exec(a))
    ) {
      if (this.noIpv6)
        throw new CommandError({
          command,
          exitCode: 2,
          stderr: 'RTNETLINK answers: Address family not supported by protocol\n',
          reason: 'exit code 2',
        });
      return json(this.kernel.routesJson(proto(m), true));
    }
    const notStarted = (tool: string): CommandError =>
      new CommandError({
        command,
        exitCode: undefined,
        stderr: '',
        reason: `spawn ${tool} ENOENT`,
      });
    if (file === 'ip6tables' && this.noIpv6) throw notStarted(file);
    if (file === 'iptables' && this.noIptables) throw notStarted(file);
    if (file === 'ip' && (m = /^-json neigh show dev (\S+)$/.exec(a)))
      return json(this.kernel.neighsJson(m[1] ?? ''));
    if (file === 'bridge' && (m = /^-json fdb show dev (\S+)$/.exec(a)))
      return json(this.kernel.fdbJson(m[1] ?? ''));
    if ((file === 'iptables' || file === 'ip6tables') && (m = /^-w 5 -t (\w+) -S (\S+)$/.exec(a))) {
      const listing = this.kernel.listChain(m[1] ?? '', m[2] ?? '', file === 'ip6tables');
      if (listing === undefined)
        throw new CommandError({
          command,
          exitCode: 1,
          stderr: `${file}: No chain/target/match by that name.\n`,
          reason: 'exit code 1',
        });
      return { stdout: listing, stderr: '' };
    }
    if ((file === 'ip' || file === 'bridge') && a === '-force -batch -') {
      // like `-force`: every line is tried, each failure reported with its line number
      let stderr = '';
      input
        .trimEnd()
        .split('\n')
        .forEach((line, i) => {
          if (this.frozen) return;
          const err = file === 'ip' ? this.kernel.ip(line) : this.kernel.bridge(line);
          if (err !== undefined) stderr += `${err}\nCommand failed -:${i + 1}\n`;
        });
      if (stderr !== '')
        throw new CommandError({ command, exitCode: 1, stderr, reason: 'exit code 1' });
      return { stdout: '', stderr: '' };
    }
    if (cmd === 'iptables-restore --noflush -w 5' || cmd === 'ip6tables-restore --noflush -w 5') {
      const v6 = file === 'ip6tables-restore';
      const err = this.frozen ? undefined : this.kernel.restore(input, v6);
      if (err !== undefined)
        throw new CommandError({ command, exitCode: 1, stderr: err, reason: 'exit code 1' });
      return { stdout: '', stderr: '' };
    }
    this.unexpected.push(cmd);
    throw new Error(`fake runner: unexpected ${cmd}`);
  }
}

function sleepFake(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** `p`, or a cancellation as soon as `signal` aborts. */
function abortable(
  p: Promise<void>,
  signal: AbortSignal | undefined,
  command: string[],
): Promise<void> {
  if (!signal) return p;
  return new Promise<void>((resolve, reject) => {
    const onAbort = (): void => reject(cancelled(command));
    signal.addEventListener('abort', onAbort, { once: true });
    void p.then(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    });
  });
}

/** A reconciler running on a FakeHost, with everything it reports recorded. */
class Loop {
  readonly host = new FakeHost();
  readonly log: CapturedLog = captureLog();
  readonly reports: PassReport[] = [];
  readonly errors: unknown[] = [];
  readonly ctl = new AbortController();
  readonly reconciler: Reconciler;
  readonly done: Promise<void>;
  /** peers of the desired state (ours is 10.244.3.0/24): change, then call leasesChanged() */
  peers: Lease[] = [peerLease(1, { vxlan: true }), peerLease(4, { vxlan: true })];
  /** passes begun (onPassStart) */
  starts = 0;
  /** passes begun while a process started earlier was still running */
  overlaps = 0;
  forwardingChecks = 0;
  /** the commands run inside each quietMonitors call (the `quiet` option) */
  readonly quietCalls: string[][] = [];
  finished = false;
  private markCalls = 0;
  private markReports = 0;

  constructor(
    o: {
      ready?: Promise<void>;
      /** ReconcilerOptions.entriesAfter (a cold start's early routes) */
      entriesAfter?: Promise<void>;
      /** what ensureForwarding does (default: finds forwarding on) */
      forwarding?: () => Promise<boolean>;
      forwardingSysctls?: readonly string[];
      /** IPv6 only ("EnableIPv4": false), with IPv6-only peers */
      ipv6Only?: boolean;
      /** give the reconciler quietMonitors, recording the calls made inside it */
      quiet?: boolean;
    } = {},
  ) {
    const family = o.ipv6Only ? { ipv6: true, ipv4: false } : {};
    if (o.ipv6Only) this.peers = [1, 4].map((n) => peerLease(n, { vxlan: true, ...family }));
    this.reconciler = new Reconciler({
      runner: this.host.runner,
      logger: this.log.logger,
      desired: () => desiredState(backendInput({ backend: 'vxlan', peers: this.peers, ...family })),
      ensureForwarding: async () => {
        this.forwardingChecks++;
        return o.forwarding ? o.forwarding() : false;
      },
      ...(o.forwardingSysctls ? { forwardingSysctls: o.forwardingSysctls } : {}),
      resyncMs: RESYNC,
      settleMs: SETTLE,
      ...(o.ready ? { ready: o.ready } : {}),
      ...(o.entriesAfter ? { entriesAfter: o.entriesAfter } : {}),
      onPass: (r) => this.reports.push(r),
      onPassStart: () => {
        this.starts++;
        if (this.host.inFlight > 0) this.overlaps++;
      },
      onPassError: (err) => this.errors.push(err),
      ...(o.quiet
        ? {
            quietMonitors: async <T>(f: () => Promise<T>): Promise<T> => {
              const from = this.host.calls.length;
              try {
                return await f();
              } finally {
                this.quietCalls.push(this.host.calls.slice(from).map((c) => c.cmd));
              }
            },
          }
        : {}),
    });
    this.done = this.reconciler.run(this.ctl.signal).then(() => void (this.finished = true));
  }

  /** Starts counting new calls and reports from here. */
  mark(): void {
    this.markCalls = this.host.calls.length;
    this.markReports = this.reports.length;
  }

  newCalls(): string[] {
    return this.callsSinceMark().map((c) => c.cmd);
  }

  callsSinceMark(): Call[] {
    return this.host.calls.slice(this.markCalls);
  }

  newReports(): PassReport[] {
    return this.reports.slice(this.markReports);
  }
}

const tick = (ms: number): Promise<unknown> => vi.advanceTimersByTimeAsync(ms);
/** when a pass began (fake epoch ms) */
const began = (r: PassReport): number => r.at - r.durationMs;
/** ms between the starts of consecutive items */
const gaps = (starts: readonly number[]): number[] =>
  starts.slice(1).map((s, i) => s - (starts[i] ?? 0));
const brief = (r: PassReport): unknown => ({
  kind: r.kind,
  converged: r.converged,
  trigger: r.stages.trigger,
});
const isBatch = (cmd: string): boolean =>
  cmd.includes('-batch') || cmd.startsWith('iptables-re') || cmd.startsWith('ip6tables-re');

let loop: Loop | undefined;

/** A loop that has made the (empty) kernel match: a full pass, then its verification. */
async function converged(o: { ready?: Promise<void>; quiet?: boolean } = {}): Promise<Loop> {
  const l = new Loop(o);
  loop = l;
  // the start pass runs at once, its verification after the settle wait
  await tick(SETTLE);
  expect(l.reports.map(brief)).toEqual([
    { kind: 'full', converged: false, trigger: 'start' },
    { kind: 'full', converged: true, trigger: 'verification' },
  ]);
  l.mark();
  return l;
}

beforeEach(() => {
  vi.useFakeTimers();
  // jitter pinned at its middle: back-off delays and the resync period are exact
  vi.spyOn(Math, 'random').mockReturnValue(0.5);
});

afterEach(async () => {
  const l = loop;
  loop = undefined;
  try {
    if (l) {
      expect(l.host.unexpected).toEqual([]);
      expect(l.overlaps).toBe(0);
      l.ctl.abort();
      await tick(0);
      expect(l.finished).toBe(true);
    }
  } finally {
    vi.useRealTimers();
    vi.restoreAllMocks();
  }
});

describe('the pass loop', () => {
  it('starts with a full pass at once (no event to wait for), verifies it once settled, then stays idle', async () => {
    const l = new Loop();
    loop = l;
    await tick(0);
    expect(l.reports.map(brief)).toEqual([{ kind: 'full', converged: false, trigger: 'start' }]);
    expect(l.reports[0]?.failures).toEqual([]);
    expect(l.reports[0]?.stages.waitedMs).toBe(0);
    await tick(SETTLE - 1);
    expect(l.reports).toHaveLength(1);
    await tick(1);
    expect(l.reports.map(brief)).toEqual([
      { kind: 'full', converged: false, trigger: 'start' },
      { kind: 'full', converged: true, trigger: 'verification' },
    ]);
    expect(gaps(l.reports.map(began))).toEqual([SETTLE]);
    l.mark();
    await tick(RESYNC / 2);
    expect(l.newCalls()).toEqual([]);
    expect(l.newReports()).toEqual([]);
  });

  it("a full pass starts the entries' batches before it reads a chain, and applies the chains after reading them", async () => {
    const l = new Loop();
    loop = l;
    await tick(0);
    const cmds = l.host.calls.map((c) => c.cmd);
    const first = (match: (cmd: string) => boolean): number => cmds.findIndex(match);
    const batch = first((c) => c === IP_BATCH);
    const chainRead = first((c) => c.startsWith('iptables -w 5 -t '));
    const restore = first((c) => c.startsWith('iptables-restore'));
    expect(first((c) => c === ROUTES)).toBeGreaterThan(-1);
    expect(batch).toBeGreaterThan(first((c) => c === ROUTES));
    expect(chainRead).toBeGreaterThan(batch);
    expect(restore).toBeGreaterThan(chainRead);
    // one pass made the kernel whole: its verification finds nothing to do in either lane
    await tick(SETTLE);
    expect(l.reports.map(brief)).toEqual([
      { kind: 'full', converged: false, trigger: 'start' },
      { kind: 'full', converged: true, trigger: 'verification' },
    ]);
  });
});

describe('forwarding', () => {
  /** The forwarding messages a loop logs while ensureForwarding sets, fails, then finds it on. */
  async function messages(forwardingSysctls?: readonly string[]): Promise<string[]> {
    const results: (boolean | Error)[] = [true, new Error('EROFS'), new Error('EROFS'), false];
    const l = new Loop({
      forwarding: async () => {
        const r = results.shift() ?? false;
        if (r instanceof Error) throw r;
        return r;
      },
      ...(forwardingSysctls ? { forwardingSysctls } : {}),
    });
    loop = l;
    // the first pass sets it; two observed passes fail (a failed pass backs off), a third finds
    // it on
    await tick(2 * SETTLE);
    for (const source of ['a', 'b']) {
      l.reconciler.trigger(source);
      await tick(1_000);
    }
    expect(results).toEqual([]);
    return l.log.lines.map((x) => x.msg).filter((m) => /forward|again/.test(m));
  }

  it("an IPv4-only node logs net.ipv4.ip_forward's messages as it always did", async () => {
    expect(await messages()).toEqual([
      'net.ipv4.ip_forward was 0; set it to 1',
      'cannot keep net.ipv4.ip_forward at 1; the rest of the dataplane is programmed, and every observed pass tries again',
      'net.ipv4.ip_forward is 1 again',
    ]);
  });

  it('a dual-stack node names both sysctls', async () => {
    expect(await messages(['net.ipv4.ip_forward', 'net.ipv6.conf.all.forwarding'])).toEqual([
      'net.ipv4.ip_forward or net.ipv6.conf.all.forwarding was 0; set it to 1',
      'cannot keep net.ipv4.ip_forward and net.ipv6.conf.all.forwarding at 1; the rest of the dataplane is programmed, and every observed pass tries again',
      'net.ipv4.ip_forward and net.ipv6.conf.all.forwarding are 1 again',
    ]);
  });
});

describe('IPv6 leftovers on an IPv4-only node', () => {
  const ipv6Reads = (calls: readonly string[]): string[] =>
    calls.filter((c) => c.startsWith('ip -6 ') || c.startsWith('ip6tables')).sort();

  it('only the first full pass reads what a dual-stack run may have left; later passes spawn what they always did', async () => {
    const l = new Loop();
    loop = l;
    await tick(0);
    expect(ipv6Reads(l.host.calls.map((c) => c.cmd))).toEqual([
      'ip -6 -N -json route show table main',
      'ip6tables -w 5 -t filter -S FORWARD',
      'ip6tables -w 5 -t filter -S TWILL-FWD',
      'ip6tables -w 5 -t nat -S POSTROUTING',
      'ip6tables -w 5 -t nat -S TWILL-POSTRTG',
    ]);
    l.mark();
    // the verification pass, a resync and a triggered full pass: IPv4's reads only
    await tick(SETTLE);
    await tick(RESYNC + SETTLE);
    l.reconciler.trigger('manual');
    await tick(SETTLE);
    expect(l.newReports().map((r) => r.kind)).toEqual(['full', 'full', 'full']);
    expect(ipv6Reads(l.newCalls())).toEqual([]);
    expect(l.newCalls().filter((c) => c === LINKS)).toHaveLength(3);
  });

  it('a kernel without IPv6 or ip6tables: the reads fail, the first pass does not', async () => {
    const l = new Loop();
    loop = l;
    l.host.noIpv6 = true;
    await tick(2 * SETTLE);
    expect(ipv6Reads(l.host.calls.map((c) => c.cmd))).toHaveLength(5);
    expect(l.errors).toEqual([]);
    expect(l.reports.map(brief)).toEqual([
      { kind: 'full', converged: false, trigger: 'start' },
      { kind: 'full', converged: true, trigger: 'verification' },
    ]);
    expect(l.reports.map((r) => r.failures)).toEqual([[], []]);
    // nothing there: not read again
    expect(ipv6Reads(l.host.calls.map((c) => c.cmd))).toHaveLength(5);
  });
});

describe('IPv4 leftovers on an IPv6-only node', () => {
  const ipv4Reads = (calls: readonly string[]): string[] =>
    calls.filter((c) => c.startsWith('ip -N -json route ') || c.startsWith('iptables ')).sort();
  const IPV4_READS = [
    ROUTES,
    'iptables -w 5 -t filter -S FORWARD',
    'iptables -w 5 -t filter -S TWILL-FWD',
    'iptables -w 5 -t nat -S POSTROUTING',
    'iptables -w 5 -t nat -S TWILL-POSTRTG',
  ];

  /** What an IPv4 vxlan run left: twill.1 with a peer's entries, and both iptables chains. */
  function leftFromIpv4(k: Kernel): void {
    for (const line of [
      'link add twill.1 mtu 1450 address 02:00:00:00:00:03 type vxlan id 1 local 10.123.0.2 dev eth0 dstport 8472 nolearning',
      'addr add 10.244.3.0/32 dev twill.1',
      'link set twill.1 up',
      'neigh replace 10.244.1.0 lladdr 02:00:00:00:00:01 dev twill.1 nud permanent',
      'route add 10.244.1.0/24 via 10.244.1.0 dev twill.1 onlink proto 151',
      // a host-gw route via the underlay, which no device deletion takes away
      'route add 10.244.9.0/24 via 10.123.0.9 dev eth0 proto 151',
    ])
      expect(k.ip(line), line).toBeUndefined();
    k.fdb.add('twill.1 02:00:00:00:00:01 10.123.0.1');
    const restore = [
      '*nat',
      ':TWILL-POSTRTG - [0:0]',
      '-A TWILL-POSTRTG -s 10.244.0.0/16 -j MASQUERADE',
      '-A POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG',
      'COMMIT',
      '*filter',
      ':TWILL-FWD - [0:0]',
      '-A TWILL-FWD -s 10.244.0.0/16 -j ACCEPT',
      '-A FORWARD -m comment --comment "twill forward" -j TWILL-FWD',
      'COMMIT',
    ].join('\n');
    expect(k.restore(restore)).toBeUndefined();
  }

  it('the first full pass removes what an IPv4 run left; later passes read no IPv4 route or iptables chain', async () => {
    const l = new Loop({ ipv6Only: true });
    loop = l;
    leftFromIpv4(l.host.kernel);
    await tick(0);
    expect(ipv4Reads(l.host.calls.map((c) => c.cmd))).toEqual(IPV4_READS);
    const k = l.host.kernel;
    expect([...k.links.keys()]).toEqual(['twill-v6.1']);
    expect([...k.routes.keys()].sort()).toEqual(['fd00:0:0:1::/64', 'fd00:0:0:4::/64']);
    expect([...k.fdb].every((f) => f.startsWith('twill-v6.1 '))).toBe(true);
    expect(k.chains).toEqual(
      new Map([
        ['nat POSTROUTING', []],
        ['filter FORWARD', []],
      ]),
    );
    expect(k.chains6.get('filter TWILL-FWD')).toEqual([
      '-A TWILL-FWD -s fd00::/48 -m comment --comment "twill forward" -j ACCEPT',
      '-A TWILL-FWD -d fd00::/48 -m comment --comment "twill forward" -j ACCEPT',
    ]);
    l.mark();
    // the verification pass, a resync and a triggered full pass: IPv6's reads only
    await tick(SETTLE);
    await tick(RESYNC + SETTLE);
    l.reconciler.trigger('manual');
    await tick(SETTLE);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'full', converged: true, trigger: 'verification' },
      { kind: 'full', converged: true, trigger: 'resync' },
      { kind: 'full', converged: true, trigger: 'manual' },
    ]);
    expect(ipv4Reads(l.newCalls())).toEqual([]);
    expect(l.newCalls().filter((c) => c === LINKS)).toHaveLength(3);
  });

  it('a node without iptables: the first pass reads fail, and it does not', async () => {
    const l = new Loop({ ipv6Only: true });
    loop = l;
    l.host.noIptables = true;
    await tick(2 * SETTLE);
    expect(ipv4Reads(l.host.calls.map((c) => c.cmd))).toEqual(IPV4_READS);
    expect(l.errors).toEqual([]);
    expect(l.reports.map(brief)).toEqual([
      { kind: 'full', converged: false, trigger: 'start' },
      { kind: 'full', converged: true, trigger: 'verification' },
    ]);
    expect(l.reports.map((r) => r.failures)).toEqual([[], []]);
    expect(l.host.calls.some((c) => c.cmd.startsWith('iptables-restore'))).toBe(false);
  });

  it('a chains pass looks at the ip6tables chains only', async () => {
    const l = new Loop({ ipv6Only: true });
    loop = l;
    await tick(2 * SETTLE);
    l.mark();
    l.host.kernel.chains6.set('filter TWILL-FWD', []);
    l.reconciler.touch('nft monitor', { kind: 'chains', tables: ['filter'] });
    await tick(SETTLE);
    expect(l.newReports().map((r) => r.kind)).toEqual(['chains']);
    expect(l.newCalls().filter((c) => !isBatch(c))).toEqual([
      'ip6tables -w 5 -t filter -S FORWARD',
      'ip6tables -w 5 -t filter -S TWILL-FWD',
    ]);
    expect(l.host.kernel.chains6.get('filter TWILL-FWD')).toHaveLength(2);
  });
});

describe('coalescing', () => {
  it('triggers arriving within the settle window make one pass', async () => {
    const l = await converged();
    l.reconciler.trigger('a');
    await tick(3);
    l.reconciler.touch('ip', { kind: 'all' });
    await tick(3);
    l.reconciler.trigger('c');
    await tick(3);
    l.reconciler.trigger('d');
    await tick(SETTLE * 10);
    expect(l.newReports().map(brief)).toEqual([{ kind: 'full', converged: true, trigger: 'a' }]);
    expect(l.newReports()[0]?.stages.waitedMs).toBe(SETTLE);
    // the others that asked are reported with it, each once
    expect(l.newReports()[0]?.stages.joined).toEqual(['ip', 'c', 'd']);
    expect(l.newCalls().filter((c) => c === LINKS)).toHaveLength(1);
  });

  it("the start's pass names no source that joined it (it reads everything anyway)", async () => {
    const l = await converged();
    const [start] = l.reports;
    expect(start?.stages.trigger).toBe('start');
    expect(start?.stages.joined).toBeUndefined();
  });

  it('a chains event alone is a chains pass; joined by an entries event, a full one naming both', async () => {
    const l = await converged();
    l.reconciler.touch('nft', { kind: 'chains', tables: ['nat'] });
    await tick(SETTLE * 10);
    const [alone] = l.newReports();
    expect(alone?.kind).toBe('chains');
    expect(alone?.stages.joined).toBeUndefined();
    l.mark();
    l.reconciler.touch('nft', { kind: 'chains', tables: ['nat'] });
    await tick(1);
    l.reconciler.touch('nft', { kind: 'chains', tables: ['filter'] });
    l.reconciler.touch('ip', { kind: 'all' });
    await tick(SETTLE * 10);
    expect(l.newReports().map((r) => [r.kind, r.stages.trigger, r.stages.joined])).toEqual([
      ['full', 'nft', ['ip']],
    ]);
  });

  it('any number of triggers while a pass runs make exactly one follow-up pass', async () => {
    const l = await converged();
    const held = l.host.hold((c) => c === LINKS);
    l.reconciler.trigger('a');
    await tick(SETTLE);
    expect(held.reached).toBe(true);
    for (let i = 0; i < 20; i++) {
      l.reconciler.trigger(`t${i}`);
      l.reconciler.touch('ip', { kind: 'all' });
      l.reconciler.touch('nft', { kind: 'chains', tables: ['nat'] });
      await tick(100);
    }
    expect(l.newReports()).toEqual([]);
    held.release();
    await tick(SETTLE);
    await tick(RESYNC / 2);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'full', converged: true, trigger: 'a' },
      { kind: 'full', converged: true, trigger: 't0' },
    ]);
    const [first, second] = l.newReports();
    // at most MAX_JOINED others are named
    expect(second?.stages.joined).toEqual(['ip', 'nft', 't1', 't2']);
    // the held pass took the 2 s it was held; the follow-up waited from t0 to its end, and settled
    expect(first?.durationMs).toBe(2_000);
    expect(first?.stages.observeMs).toBe(2_000);
    expect(second?.stages.waitedMs).toBe(2_000 + SETTLE);
    expect(l.newCalls().filter((c) => c === LINKS)).toHaveLength(2);
  });
});

describe('one pass at a time', () => {
  it('while a pass waits on a process, nothing starts another: triggers, leases, resync', async () => {
    const l = await converged();
    const held = l.host.hold((c) => c === ROUTES);
    l.reconciler.trigger('a');
    await tick(SETTLE);
    expect(held.reached).toBe(true);
    const startsBefore = l.starts;
    const callsBefore = l.host.calls.length;
    l.reconciler.trigger('b');
    l.peers = [...l.peers, peerLease(5, { vxlan: true })];
    l.reconciler.leasesChanged();
    l.reconciler.touch('ip', { kind: 'route', deleted: true, dst: PEER4_ROUTE, route: undefined });
    l.reconciler.touch('nft', { kind: 'chains', tables: ['filter'] });
    // past the resync deadline too
    await tick(RESYNC * 1.5);
    expect(l.starts).toBe(startsBefore);
    expect(l.host.calls.length).toBe(callsBefore);
    expect(l.newReports()).toEqual([]);
    held.release();
    await tick(SETTLE * 10);
    const kinds = l.newReports().map(brief);
    expect(kinds[0]).toEqual({ kind: 'full', converged: true, trigger: 'a' });
    expect(kinds[1]).toEqual({ kind: 'full', converged: false, trigger: 'b' });
    expect(kinds.at(-1)).toEqual({ kind: 'full', converged: true, trigger: 'verification' });
    expect(l.host.kernel.routes.has('10.244.5.0/24')).toBe(true);
  });

  it('with slow processes and a storm of triggers, each pass begins after the last one ended', async () => {
    const l = await converged();
    l.host.latencyMs = 50;
    // a phase of each kind of trigger, one every 7 ms, so every kind of pass runs
    const phases: (() => void)[] = [
      () => l.reconciler.trigger('storm'),
      () => l.reconciler.touch('ip', { kind: 'all' }),
      () => l.reconciler.touch('nft', { kind: 'chains', tables: ['nat'] }),
      () => {
        l.peers =
          l.peers.length === 2 ? [...l.peers, peerLease(5, { vxlan: true })] : l.peers.slice(0, 2);
        l.reconciler.leasesChanged();
      },
    ];
    let fired = 0;
    for (const fire of phases) {
      for (let t = 0; t < 1_000; t += 7) {
        fire();
        fired++;
        await tick(7);
      }
    }
    await tick(5_000);
    const passes = l.newReports();
    // many passes, far fewer than triggers, none overlapping another
    expect(passes.length).toBeGreaterThan(20);
    expect(passes.length).toBeLessThan(fired / 4);
    expect(new Set(passes.map((r) => r.kind))).toEqual(
      new Set(['full', 'entries', 'delta', 'chains']),
    );
    passes.slice(1).forEach((r, i) => {
      expect(began(r)).toBeGreaterThanOrEqual(passes[i]?.at ?? Infinity);
    });
    expect(l.overlaps).toBe(0);
    expect(passes.at(-1)?.converged).toBe(true);
    expect(l.host.kernel.routes.has('10.244.5.0/24')).toBe(l.peers.length === 3);
  });
});

describe('back-off', () => {
  /** The kernel lost a route and every batch fails: each pass finds work and fails to do it. */
  function breakBatches(l: Loop): void {
    l.host.kernel.routes.delete(PEER4_ROUTE);
    l.host.fail(isBatch);
  }

  it('after failing passes the next waits 200, 400, 800 … ms, capped at 5 s', async () => {
    const l = await converged();
    breakBatches(l);
    l.reconciler.trigger('drift');
    await tick(20_000);
    const failed = l.newReports();
    expect(failed).toHaveLength(8);
    for (const r of failed) {
      expect(r.kind).toBe('full');
      expect(r.converged).toBe(false);
      expect(r.failures.length).toBeGreaterThan(0);
    }
    // each wait is the back-off and the settle time
    expect(gaps(failed.map(began))).toEqual(
      [200, 400, 800, 1600, 3200, 5000, 5000].map((d) => d + SETTLE),
    );
    // once the kernel converged again, a new failure backs off from the start
    l.host.heal();
    await tick(20_000);
    expect(l.reports.at(-1)).toMatchObject({ converged: true, failures: [] });
    l.mark();
    breakBatches(l);
    l.reconciler.trigger('drift again');
    await tick(1_000);
    expect(gaps(l.newReports().map(began)).slice(0, 2)).toEqual([200 + SETTLE, 400 + SETTLE]);
  });

  it('a pass that succeeds resets the back-off', async () => {
    const l = await converged();
    breakBatches(l);
    l.reconciler.trigger('drift');
    await tick(SETTLE + 200 + SETTLE + 400 + SETTLE);
    expect(l.newReports()).toHaveLength(3);
    // backing off 800 ms; the pass after it succeeds, and its verification follows at once
    l.host.heal();
    await tick(800 + SETTLE + SETTLE);
    const passes = l.newReports();
    expect(passes.map(brief).slice(3)).toEqual([
      { kind: 'full', converged: false, trigger: 'verification' },
      { kind: 'full', converged: true, trigger: 'verification' },
    ]);
    expect(passes[3]?.failures).toEqual([]);
    expect(gaps(passes.map(began))).toEqual([200, 400, 800, 0].map((d) => d + SETTLE));
    // a new failure waits 200 ms again, not the 1.6 s the back-off had reached
    l.mark();
    breakBatches(l);
    l.reconciler.trigger('drift again');
    await tick(SETTLE + 200 + SETTLE);
    expect(gaps(l.newReports().map(began))).toEqual([200 + SETTLE]);
  });

  it('a pass that throws (a read fails) backs off the same way, then retries as a full pass', async () => {
    const l = await converged();
    l.host.fail((c) => c === ROUTES);
    l.reconciler.trigger('x');
    await tick(SETTLE + 200 + SETTLE + 400 + SETTLE + 800 + SETTLE + 1);
    expect(l.newReports()).toEqual([]);
    expect(l.errors).toHaveLength(4);
    expect(l.errors.every((e) => e instanceof CommandError)).toBe(true);
    const reads = l.callsSinceMark().filter((c) => c.cmd === LINKS);
    expect(gaps(reads.map((c) => c.at))).toEqual([200, 400, 800].map((d) => d + SETTLE));
    const retries = l.log.lines.filter((x) => x.msg === 'dataplane pass failed; retrying');
    expect(retries.map((x) => x.retryInMs)).toEqual([200, 400, 800, 1600]);
    l.host.heal();
    await tick(1_600 + SETTLE);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'full', converged: true, trigger: 'retry' },
    ]);
  });

  it("a chain read that fails after the entries' batches ran: the pass reports their ops and the read, then backs off to a full pass", async () => {
    const l = await converged();
    l.host.kernel.routes.delete(PEER4_ROUTE);
    l.host.fail((c) => c === 'iptables -w 5 -t nat -S POSTROUTING');
    l.reconciler.trigger('x');
    await tick(SETTLE + 1);
    const [failed] = l.newReports();
    expect(failed?.kind).toBe('full');
    expect(failed?.converged).toBe(false);
    expect(failed?.ops.map((op) => `${op.kind} ${op.action}`)).toEqual(['route add']);
    expect(failed?.failures).toEqual([expect.stringMatching(/^masquerade: .*POSTROUTING/)]);
    expect(l.host.kernel.routes.has(PEER4_ROUTE)).toBe(true);
    expect(l.errors).toEqual([]);
    const warned = l.log.lines.filter(
      (x) => x.msg === 'dataplane pass could not apply every change',
    );
    expect(warned.map((x) => x.ops)).toEqual([{ 'route add': 1 }]);
    // the retry waits out the back-off, then finds the route in place and the chains readable
    l.host.heal();
    await tick(200 + SETTLE);
    expect(l.newReports().slice(1).map(brief)).toEqual([
      { kind: 'full', converged: true, trigger: 'verification' },
    ]);
  });

  it('a chain read that fails with no entry to apply fails the pass, as any read', async () => {
    const l = await converged();
    l.host.fail((c) => c === 'iptables -w 5 -t nat -S POSTROUTING', 1);
    l.reconciler.trigger('x');
    await tick(SETTLE + 1);
    expect(l.newReports()).toEqual([]);
    expect(l.errors).toHaveLength(1);
    await tick(200 + SETTLE);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'full', converged: true, trigger: 'retry' },
    ]);
  });

  it('a trigger does not cut a back-off short; a lease change does', async () => {
    const l = await converged();
    breakBatches(l);
    l.reconciler.trigger('drift');
    await tick(SETTLE + 200 + SETTLE);
    expect(l.newReports()).toHaveLength(2);
    // backing off 400 ms: a trigger 100 ms in changes nothing
    await tick(100);
    l.reconciler.trigger('ignored');
    await tick(300 + SETTLE);
    expect(l.newReports()).toHaveLength(3);
    // backing off 800 ms: a lease change 100 ms in ends it
    await tick(100);
    l.reconciler.leasesChanged();
    await tick(SETTLE);
    const passes = l.newReports();
    expect(passes).toHaveLength(4);
    expect(gaps(passes.map(began))).toEqual([200 + SETTLE, 400 + SETTLE, 100 + SETTLE]);
  });

  it('passes that keep finding work without failing back off from the fifth in a row', async () => {
    const l = await converged();
    l.host.frozen = true;
    l.host.kernel.routes.delete(PEER4_ROUTE);
    l.reconciler.trigger('drift');
    await tick(1_000);
    const passes = l.newReports().slice(0, 7);
    for (const r of passes) {
      expect(r).toMatchObject({ kind: 'full', converged: false, drift: true, failures: [] });
    }
    expect(gaps(passes.map(began))).toEqual([0, 0, 0, 0, 200, 400].map((d) => d + SETTLE));
  });
});

describe('the resync timer', () => {
  it.each([0, 0.5, 0.999])(
    'with random() = %s, runs a full pass every resyncMs × (0.9 + 0.2 random) with no trigger',
    async (random) => {
      vi.mocked(Math.random).mockReturnValue(random);
      const period = Math.round(RESYNC * (0.9 + 0.2 * random));
      const l = await converged();
      for (let cycle = 0; cycle < 3; cycle++) {
        l.mark();
        // the timer is set when the last full pass began, the pass follows after the settle wait
        await tick(period + SETTLE - 1);
        expect(l.newCalls()).toEqual([]);
        await tick(1);
        expect(l.newReports().map(brief)).toEqual([
          { kind: 'full', converged: true, trigger: 'resync' },
        ]);
        // a full pass: it reads the chains too
        expect(l.newCalls().filter((c) => c.startsWith('iptables '))).toHaveLength(4);
      }
    },
  );

  it('only a full pass moves the resync deadline', async () => {
    const l = await converged();
    await tick(RESYNC / 3);
    l.reconciler.touch('ip', { kind: 'all' });
    await tick(RESYNC / 3);
    l.reconciler.touch('nft', { kind: 'chains', tables: ['filter'] });
    await tick(RESYNC / 3 + SETTLE - 1);
    expect(l.newReports().map((r) => r.kind)).toEqual(['entries', 'chains']);
    await tick(1);
    expect(l.newReports().map(brief).at(-1)).toEqual({
      kind: 'full',
      converged: true,
      trigger: 'resync',
    });
    // a triggered full pass puts the next resync a period after it
    await tick(RESYNC / 2);
    l.mark();
    l.reconciler.trigger('manual');
    await tick(SETTLE + RESYNC + SETTLE - 1);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'full', converged: true, trigger: 'manual' },
    ]);
    await tick(1);
    expect(l.newReports().map((r) => r.stages.trigger)).toEqual(['manual', 'resync']);
  });
});

describe('ready', () => {
  it('runs no pass, process or sysctl check before ready resolves, whatever triggers arrive', async () => {
    const ready = Promise.withResolvers<void>();
    const l = new Loop({ ready: ready.promise });
    loop = l;
    await tick(RESYNC * 2);
    l.reconciler.trigger('early');
    l.reconciler.leasesChanged();
    l.reconciler.touch('ip', { kind: 'all' });
    await tick(RESYNC * 2);
    expect(l.host.calls).toEqual([]);
    expect(l.starts).toBe(0);
    expect(l.forwardingChecks).toBe(0);
    ready.resolve();
    await tick(0);
    expect(l.reports.map(brief)).toEqual([{ kind: 'full', converged: false, trigger: 'start' }]);
    expect(l.forwardingChecks).toBe(1);
  });

  it('an abort before ready ends the loop without a pass', async () => {
    const l = new Loop({ ready: new Promise(() => undefined) });
    loop = l;
    await tick(RESYNC);
    l.ctl.abort();
    await tick(0);
    expect(l.finished).toBe(true);
    expect(l.host.calls).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });
});

describe('entriesAfter', () => {
  it('the first pass writes the masquerade at once, and reads the entries only once it settles', async () => {
    const after = Promise.withResolvers<void>();
    const l = new Loop({ entriesAfter: after.promise });
    loop = l;
    await tick(RESYNC / 2);
    const cmds = (): string[] => l.host.calls.map((c) => c.cmd);
    expect(cmds().some((c) => c.startsWith('iptables-restore'))).toBe(true);
    expect(cmds()).not.toContain(LINKS);
    expect(cmds()).not.toContain(ROUTES);
    expect(l.reports).toEqual([]);
    after.resolve();
    await tick(SETTLE);
    expect(cmds()).toContain(ROUTES);
    // one pass wrote the entries and the masquerade; its verification found nothing to do, and
    // wrote no masquerade twice
    expect(l.reports.map(brief)).toEqual([
      { kind: 'full', converged: false, trigger: 'start' },
      { kind: 'full', converged: true, trigger: 'verification' },
    ]);
    expect(cmds().filter((c) => c.startsWith('iptables-restore'))).toHaveLength(1);
    expect(l.host.kernel.routes.has(PEER4_ROUTE)).toBe(true);
  });
});

describe('quiet monitors', () => {
  it(`a plan of ${QUIET_MIN_ENTRIES} entries or more is applied inside quietMonitors, a smaller one outside`, async () => {
    const l = await converged({ quiet: true });
    // the start: two peers, six entries
    expect(l.quietCalls).toEqual([]);
    // 334 new vxlan peers: a route, a neighbour and an FDB entry each
    const many = Array.from({ length: 337 }, (_, i) => i + 1).filter((n) => n !== 3);
    l.peers = many.map((n) => peerLease(n, { vxlan: true }));
    l.reconciler.leasesChanged();
    await tick(2 * SETTLE);
    const big = l.newReports()[0];
    expect(big?.ops.length).toBeGreaterThanOrEqual(QUIET_MIN_ENTRIES);
    expect(l.quietCalls).toHaveLength(1);
    expect(l.quietCalls[0]?.filter(isBatch).length).toBeGreaterThan(0);
    // every batch of that pass ran inside it
    const batches = l
      .callsSinceMark()
      .map((c) => c.cmd)
      .filter(isBatch);
    expect(l.quietCalls[0]?.filter(isBatch)).toEqual(batches);
    expect(l.host.kernel.routes.size).toBe(many.length);
    // one more peer: three entries, outside
    l.mark();
    l.peers = [...l.peers, peerLease(400, { vxlan: true })];
    l.reconciler.leasesChanged();
    await tick(2 * SETTLE);
    expect(l.newCalls().filter(isBatch).length).toBeGreaterThan(0);
    expect(l.quietCalls).toHaveLength(1);
  });
});

describe('abort', () => {
  it('while idle: run() resolves at once and leaves no timer', async () => {
    const l = await converged();
    expect(vi.getTimerCount()).toBe(1);
    l.ctl.abort();
    await tick(0);
    expect(l.finished).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('during a pass: the running process is cancelled; the loop ends without an error or a retry', async () => {
    const l = await converged();
    const held = l.host.hold((c) => c === LINKS);
    l.reconciler.trigger('a');
    await tick(SETTLE);
    expect(held.reached).toBe(true);
    l.ctl.abort();
    await tick(0);
    expect(l.finished).toBe(true);
    expect(l.host.inFlight).toBe(0);
    expect(l.errors).toEqual([]);
    expect(l.log.lines.filter((x) => x.msg === 'dataplane pass failed; retrying')).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
    await tick(RESYNC * 2);
    expect(l.newCalls()).toEqual([LINKS]);
    expect(l.newReports()).toEqual([]);
  });

  it('during a back-off: the loop ends, no further pass', async () => {
    const l = await converged();
    l.host.kernel.routes.delete(PEER4_ROUTE);
    l.host.fail(isBatch);
    l.reconciler.trigger('drift');
    await tick(SETTLE + 50);
    expect(l.newReports()).toHaveLength(1);
    l.ctl.abort();
    await tick(0);
    expect(l.finished).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
    const calls = l.host.calls.length;
    await tick(RESYNC * 2);
    expect(l.host.calls.length).toBe(calls);
  });

  it('during the settle wait: the loop ends before the pass begins', async () => {
    const l = await converged();
    const starts = l.starts;
    l.reconciler.trigger('a');
    await tick(SETTLE - 1);
    l.ctl.abort();
    await tick(0);
    expect(l.finished).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
    await tick(RESYNC * 2);
    expect(l.starts).toBe(starts);
    expect(l.newCalls()).toEqual([]);
  });
});

describe('which pass a trigger asks for', () => {
  it('a kernel event twill cannot pin down: an entries pass, which leaves the chains alone', async () => {
    const l = await converged();
    l.reconciler.touch('ip', { kind: 'all' });
    await tick(SETTLE);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'entries', converged: true, trigger: 'ip' },
    ]);
    expect(l.newCalls()).toContain(LINKS);
    expect(l.newCalls().filter((c) => c.startsWith('iptables'))).toEqual([]);
  });

  it("a rule event: only that table's chains are read, and rewritten when they drifted", async () => {
    const l = await converged();
    l.reconciler.touch('nft', { kind: 'chains', tables: ['nat'] });
    await tick(SETTLE);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'chains', converged: true, trigger: 'nft' },
    ]);
    expect(l.newCalls().sort()).toEqual([
      'iptables -w 5 -t nat -S POSTROUTING',
      'iptables -w 5 -t nat -S TWILL-POSTRTG',
    ]);
    l.mark();
    l.host.kernel.chains.set('nat TWILL-POSTRTG', []);
    l.reconciler.touch('nft', { kind: 'chains', tables: ['nat'] });
    await tick(2 * SETTLE);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'chains', converged: false, trigger: 'nft' },
      { kind: 'chains', converged: true, trigger: 'verification' },
    ]);
    expect(l.newCalls().filter((c) => !c.startsWith('iptables -w 5 -t nat -S '))).toEqual([
      'iptables-restore --noflush -w 5',
    ]);
  });

  it('a lease change on a kernel known to match: a delta pass, batches only', async () => {
    const l = await converged();
    l.peers = [...l.peers, peerLease(5, { vxlan: true })];
    l.reconciler.leasesChanged();
    await tick(SETTLE);
    await tick(RESYNC / 2);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'delta', converged: true, trigger: 'leases' },
    ]);
    expect(l.newCalls().length).toBeGreaterThan(0);
    expect(l.newCalls().filter((c) => !isBatch(c))).toEqual([]);
    expect(l.host.kernel.routes.has('10.244.5.0/24')).toBe(true);
  });

  /** Advances the fake clock 1 ms at a time until a pass begins (at most `ms`). */
  async function untilPassBegins(l: Loop, ms: number): Promise<void> {
    const before = l.starts;
    for (let i = 0; i < ms && l.starts === before; i++) await tick(1);
    expect(l.starts).toBeGreaterThan(before);
  }

  it('a lease change while a resync pass reads the kernel: the delta goes first, then the resync pass', async () => {
    const l = await converged();
    l.host.latencyMs = 50;
    await tick(RESYNC - 200);
    await untilPassBegins(l, 1_000);
    // the resync pass is reading (each read takes 50 ms)
    await tick(20);
    l.mark();
    l.peers = [...l.peers, peerLease(5, { vxlan: true })];
    l.reconciler.leasesChanged();
    // the lease's settle (1 ms), then one bridge and one ip batch of 50 ms each
    await tick(1 + 2 * 50 + 5);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'delta', converged: true, trigger: 'leases' },
    ]);
    expect(l.host.kernel.routes.has('10.244.5.0/24')).toBe(true);
    expect(l.newCalls().filter(isBatch)).toEqual(['bridge -force -batch -', IP_BATCH]);
    await tick(1_000);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'delta', converged: true, trigger: 'leases' },
      { kind: 'full', converged: true, trigger: 'resync' },
    ]);
  });

  it('a resync pass that also carries a kernel event does not give way (a drift may be pending)', async () => {
    const l = await converged();
    l.host.latencyMs = 50;
    // the safety net's pass and a kernel event it cannot pin down, taken by one pass
    l.reconciler.trigger('resync');
    l.reconciler.touch('ip', { kind: 'all' });
    await untilPassBegins(l, 1_000);
    await tick(20);
    l.mark();
    l.peers = [...l.peers, peerLease(5, { vxlan: true })];
    l.reconciler.leasesChanged();
    await tick(2_000);
    // the observed pass read to the end first; the lease came after it (a delta, or folded into
    // its verification)
    expect(l.newReports().map((r) => r.kind)[0]).toBe('full');
    expect(l.host.kernel.routes.has('10.244.5.0/24')).toBe(true);
  });

  it('leases changing all the time: a resync pass gives way three times in a row, then reads to the end', async () => {
    const l = await converged();
    l.host.latencyMs = 50;
    await tick(RESYNC - 200);
    await untilPassBegins(l, 1_000);
    l.mark();
    // a lease change every 30 ms for 3 s: never 50 ms of quiet for a read to finish
    for (let n = 5; n < 105; n++) {
      l.peers = [...l.peers, peerLease(n, { vxlan: true })];
      l.reconciler.leasesChanged();
      await tick(30);
    }
    await tick(2_000);
    const kinds = l.newReports().map((r) => r.kind);
    const full = kinds.indexOf('full');
    expect(full).toBeGreaterThan(0);
    // three deltas went before it, the fourth resync attempt read to the end
    expect(kinds.slice(0, full)).toEqual(['delta', 'delta', 'delta']);
    // the leases that came while it read are applied (by it or after it), and all is converged
    expect(l.newReports().at(-1)?.converged).toBe(true);
    expect(l.host.kernel.routes.has('10.244.104.0/24')).toBe(true);
  });

  it('the echo of a delta, judged while the next lease change waits: no observed pass', async () => {
    const l = await converged();
    l.peers = [...l.peers, peerLease(5, { vxlan: true })];
    l.reconciler.leasesChanged();
    await tick(SETTLE);
    // peer 6 comes before the monitor has shown peer 5's route coming back
    l.peers = [...l.peers, peerLease(6, { vxlan: true })];
    l.reconciler.leasesChanged();
    // (its metric: 10.244.5.0/24's block number)
    const route = {
      dst: '10.244.5.0/24',
      via: '10.244.5.0',
      dev: 'twill.1',
      onlink: true,
      metric: 717829,
    };
    l.reconciler.touch('ip', { kind: 'route', deleted: false, dst: route.dst, route });
    await tick(SETTLE);
    await tick(RESYNC / 2);
    expect(l.newReports().map((r) => r.kind)).toEqual(['delta', 'delta']);
    expect(l.host.kernel.routes.has('10.244.6.0/24')).toBe(true);
  });

  it("one of twill's routes deleted: a repair pass, one batch", async () => {
    const l = await converged();
    l.host.kernel.routes.delete(PEER4_ROUTE);
    l.reconciler.touch('ip', { kind: 'route', deleted: true, dst: PEER4_ROUTE, route: undefined });
    await tick(SETTLE);
    await tick(RESYNC / 2);
    expect(l.newReports().map(brief)).toEqual([{ kind: 'repair', converged: true, trigger: 'ip' }]);
    expect(l.newCalls()).toEqual([IP_BATCH]);
    expect(l.host.kernel.routes.has(PEER4_ROUTE)).toBe(true);
  });

  it("a new peer whose subnet another program's route holds: the delta writes its route at metric 0, as an observed pass would, and the add fails", async () => {
    const l = new Loop();
    loop = l;
    // another program's route to peer 5's subnet, there before the first pass reads the kernel
    l.host.kernel.routes.set('10.244.5.0/24', {
      dst: '10.244.5.0/24',
      via: '10.123.0.55',
      dev: 'eth0',
      onlink: false,
      proto: 4,
      metric: 0,
    });
    await tick(SETTLE);
    l.mark();
    l.peers = [...l.peers, peerLease(5, { vxlan: true })];
    l.reconciler.leasesChanged();
    await tick(SETTLE);
    const reports = l.newReports();
    expect(reports.map(brief)[0]).toEqual({ kind: 'entries', converged: false, trigger: 'leases' });
    expect(reports[0]?.failures.join('\n')).toContain(
      'route add 10.244.5.0/24 via 10.244.5.0 dev twill.1 onlink proto 151: RTNETLINK answers: File exists',
    );
    // no route of twill's own metric went in beside it, where the other one would win in silence
    const ours = [...l.host.kernel.routes.values()].filter(
      (r) => r.dst === '10.244.5.0/24' && r.proto === 151,
    );
    expect(ours).toEqual([]);
  });

  it('a lease change whose delta fails: an entries pass decides, in the same turn', async () => {
    const l = await converged();
    l.host.fail(isBatch, 1);
    l.peers = [...l.peers, peerLease(5, { vxlan: true })];
    l.reconciler.leasesChanged();
    await tick(SETTLE);
    expect(l.newReports().map(brief)).toEqual([
      { kind: 'entries', converged: false, trigger: 'leases' },
    ]);
    await tick(SETTLE);
    expect(l.newReports().map(brief).at(-1)).toEqual({
      kind: 'entries',
      converged: true,
      trigger: 'verification',
    });
  });
});
