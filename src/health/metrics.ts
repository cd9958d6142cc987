// twill's Prometheus metrics, one registry per daemon (prom-text.ts): peers
// by backend (and those with an IPv6 subnet), lease expiry, reconcile
// passes and their duration, ops applied and drift repaired by kind, store
// watch re-lists and connectivity, peer leases refused (one gauge, by
// reason), readiness, build info, plus a few process metrics read when
// scraped (CPU, start time, RSS, open fds, V8 heap): no timer of their own.
import { readdirSync } from 'node:fs';
import { opLabel, type Op } from '../dataplane/model.ts';
import { REFUSAL_REASONS } from '../lease/admit.ts';
import { Counter, formatFamily, Gauge, Histogram, Registry, type Collector } from './prom-text.ts';

/** Drift kinds as operators think of them: an address on the device counts as the link. */
export function driftKind(op: Op): string {
  return op.kind === 'addr' ? 'link' : opLabel(op);
}

export class TwillMetrics {
  readonly registry = new Registry();
  readonly peers: Gauge<'backend'>;
  readonly peersIpv6: Gauge<'backend'>;
  readonly leaseExpiry: Gauge;
  readonly passes: Counter<'result'>;
  readonly passDuration: Histogram;
  readonly ops: Counter<'kind' | 'action'>;
  readonly drift: Counter<'kind'>;
  readonly relists: Counter<'reason'>;
  readonly storeConnected: Gauge;
  readonly refusedPeers: Gauge<'reason'>;
  readonly ready: Gauge;

  constructor(o: { version: string }) {
    const registers = [this.registry];
    new Gauge({
      name: 'twill_build_info',
      help: 'twill build: version and Node.js version (always 1)',
      labelNames: ['version', 'node_version'],
      registers,
    }).set({ version: o.version, node_version: process.versions.node }, 1);
    this.peers = new Gauge({
      name: 'twill_peers',
      help: 'valid peer leases, by backend type',
      labelNames: ['backend'],
      registers,
    });
    // a gauge of its own rather than a family label on twill_peers, whose series stay as they were
    this.peersIpv6 = new Gauge({
      name: 'twill_peers_ipv6',
      help: 'valid peer leases that carry an IPv6 subnet (dual-stack or IPv6 only), by backend type',
      labelNames: ['backend'],
      registers,
    });
    this.leaseExpiry = new Gauge({
      name: 'twill_lease_expiry_timestamp_seconds',
      help: 'when our subnet lease expires unless renewed (Unix time)',
      registers,
    });
    this.passes = new Counter({
      name: 'twill_reconcile_passes_total',
      help: 'dataplane passes, by result: converged (nothing to do), changed, failed',
      labelNames: ['result'],
      registers,
    });
    this.passDuration = new Histogram({
      name: 'twill_reconcile_pass_duration_seconds',
      help: 'duration of a dataplane pass (observe, diff, apply)',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    });
    this.ops = new Counter({
      name: 'twill_dataplane_ops_total',
      help: 'kernel changes applied, by kind (link, addr, route, neigh, fdb, masquerade) and action',
      labelNames: ['kind', 'action'],
      registers,
    });
    this.drift = new Counter({
      name: 'twill_drift_repaired_total',
      help: 'kernel changes made because the kernel drifted (not because leases changed), by kind: route, neigh, fdb, link, masquerade',
      labelNames: ['kind'],
      registers,
    });
    this.relists = new Counter({
      name: 'twill_store_watch_restarts_total',
      help: 'times the lease watch re-listed everything, by reason (etcd: compacted, wiped, reconnected; Kubernetes: gone (410); both: failed, periodic)',
      labelNames: ['reason'],
      registers,
    });
    this.storeConnected = new Gauge({
      name: 'twill_store_connected',
      help: '1 while the lease store watch is connected',
      registers,
    });
    this.refusedPeers = new Gauge({
      name: 'twill_refused_peers',
      help: 'peer leases refused right now (never programmed), by reason: malformed, subnet-size, outside-network, outside-range, overlaps-own, subnet-conflict, public-ip, backend-type, vni, vtep-mac, not-on-link',
      labelNames: ['reason'],
      registers,
    });
    for (const reason of REFUSAL_REASONS) this.refusedPeers.set({ reason }, 0);
    this.ready = new Gauge({ name: 'twill_ready', help: '1 when /readyz answers 200', registers });
    for (const kind of ['route', 'neigh', 'fdb', 'link', 'masquerade']) this.drift.inc({ kind }, 0);
    for (const result of ['converged', 'changed', 'failed']) this.passes.inc({ result }, 0);
    // no event-loop-delay monitor (prom-client's sampled every 10 ms by default: 100 wake-ups a
    // second, most of an idle daemon's CPU)
    this.registry.register(processMetrics());
  }
}

/** When this process started (Unix seconds), as prom-client and client_golang give it. */
const START_TIME = Math.round(Date.now() / 1000 - process.uptime());

/**
 * The process metrics, under the names and help texts of prom-client's defaults (dashboards built
 * on those keep working), each read once per scrape. CPU is the process's since it started.
 */
export function processMetrics(): Collector {
  return {
    names: [
      'process_cpu_user_seconds_total',
      'process_cpu_system_seconds_total',
      'process_cpu_seconds_total',
      'process_start_time_seconds',
      'process_resident_memory_bytes',
      'process_open_fds',
      'nodejs_heap_size_total_bytes',
      'nodejs_heap_size_used_bytes',
      'nodejs_external_memory_bytes',
    ],
    expose(): string {
      const cpu = process.cpuUsage();
      const mem = process.memoryUsage();
      const fds = openFds();
      return [
        formatFamily(
          'process_cpu_user_seconds_total',
          'Total user CPU time spent in seconds.',
          'counter',
          [cpu.user / 1e6],
        ),
        formatFamily(
          'process_cpu_system_seconds_total',
          'Total system CPU time spent in seconds.',
          'counter',
          [cpu.system / 1e6],
        ),
        formatFamily(
          'process_cpu_seconds_total',
          'Total user and system CPU time spent in seconds.',
          'counter',
          [(cpu.user + cpu.system) / 1e6],
        ),
        formatFamily(
          'process_start_time_seconds',
          'Start time of the process since unix epoch in seconds.',
          'gauge',
          [START_TIME],
        ),
        formatFamily('process_resident_memory_bytes', 'Resident memory size in bytes.', 'gauge', [
          mem.rss,
        ]),
        // no sample when /proc cannot be read (not Linux, or no /proc mounted)
        formatFamily(
          'process_open_fds',
          'Number of open file descriptors.',
          'gauge',
          fds === undefined ? [] : [fds],
        ),
        formatFamily(
          'nodejs_heap_size_total_bytes',
          'Process heap size from Node.js in bytes.',
          'gauge',
          [mem.heapTotal],
        ),
        formatFamily(
          'nodejs_heap_size_used_bytes',
          'Process heap size used from Node.js in bytes.',
          'gauge',
          [mem.heapUsed],
        ),
        formatFamily(
          'nodejs_external_memory_bytes',
          'Node.js external memory size in bytes.',
          'gauge',
          [mem.external],
        ),
      ].join('\n\n');
    },
  };
}

/**
 * Entries of /proc/self/fd, less the one the listing itself held open. Synchronous: /proc is
 * kernel state, not disk, and a daemon has a few dozen descriptors.
 */
function openFds(): number | undefined {
  try {
    return readdirSync('/proc/self/fd').length - 1;
  } catch {
    return undefined;
  }
}
