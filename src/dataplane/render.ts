// render: a plan (typed ops) as the text the kernel's tools read, pure. The
// one place that knows `ip -batch`, `bridge -batch` and iptables-restore
// syntax for what twill writes: diff and status work on typed ops, and this
// module turns them into at most four batches — ip (pre), bridge, ip (post),
// iptables-restore --noflush — in that order.
import { ROUTE_PROTOCOL, type Op, type Phase, type RouteSpec } from './model.ts';

export interface Batch {
  readonly phase: Phase;
  readonly file: string;
  readonly args: readonly string[];
  readonly input: string;
  /** the input's lines, to map a failure report ("line 3") back to what failed */
  readonly lines: readonly string[];
}

const BATCH_ARGS = ['-force', '-batch', '-'];

function routeText(r: RouteSpec): string {
  return `${r.dst} via ${r.via} dev ${r.dev}${r.onlink ? ' onlink' : ''} proto ${ROUTE_PROTOCOL}`;
}

/**
 * The op's lines: one `ip`/`bridge` command without the program name, or the iptables-restore
 * lines (without the *table / COMMIT frame).
 */
export function opLines(op: Op): string[] {
  switch (op.kind) {
    case 'link': {
      if (op.action === 'delete') return [`link del ${op.name}`];
      if (op.action === 'change') {
        const s = op.set;
        const what = 'up' in s ? 'up' : 'mac' in s ? `address ${s.mac}` : `mtu ${s.mtu}`;
        return [`link set ${op.name} ${what}`];
      }
      const d = op.device;
      const flags = `${d.learning ? '' : ' nolearning'}${d.gbp ? ' gbp' : ''}`;
      return [
        `link add ${d.name} mtu ${d.mtu} address ${d.mac} type vxlan id ${d.vni} local ${d.local} dev ${d.underlay} dstport ${d.port}${flags}`,
      ];
    }
    case 'addr':
      return [`addr ${op.action === 'add' ? 'add' : 'del'} ${op.address} dev ${op.dev}`];
    case 'route': {
      const verb = op.action === 'add' ? 'add' : op.action === 'change' ? 'replace' : 'del';
      return [`route ${verb} ${routeText(op.route)}`];
    }
    case 'neigh': {
      const n = op.neigh;
      if (op.action === 'delete') return [`neigh del ${n.ip} dev ${n.dev}`];
      return [`neigh replace ${n.ip} lladdr ${n.mac} dev ${n.dev} nud permanent`];
    }
    case 'fdb': {
      const f = op.fdb;
      if (op.action === 'add')
        return [`fdb append ${f.mac} dev ${f.dev} dst ${f.dst} self permanent`];
      return [`fdb del ${f.mac} dev ${f.dev}${f.dst === undefined ? '' : ` dst ${f.dst}`} self`];
    }
    case 'chain':
      // declaring a chain that exists empties it
      if (op.action === 'delete') return [`:${op.chain} - [0:0]`, `-X ${op.chain}`];
      return [`:${op.chain} - [0:0]`, ...op.rules];
    case 'jump':
      return [`${op.action === 'add' ? '-A' : '-D'} ${op.parent} ${op.rule}`];
  }
}

/** Frames the iptables ops into one iptables-restore --noflush payload ('' when none). */
export function renderRestore(ops: readonly Op[]): string {
  const parts: string[] = [];
  for (const table of ['nat', 'filter'] as const) {
    const lines = ops.flatMap((o) =>
      (o.kind === 'chain' || o.kind === 'jump') && o.table === table ? opLines(o) : [],
    );
    if (lines.length > 0) parts.push(`*${table}`, ...lines, 'COMMIT');
  }
  return parts.length === 0 ? '' : `${parts.join('\n')}\n`;
}

/** The batches for a plan, in run order; phases without ops are left out. */
export function renderBatches(ops: readonly Op[]): Batch[] {
  const batches: Batch[] = [];
  const lined = (phase: Phase, file: string): void => {
    const lines = ops.filter((o) => o.phase === phase).flatMap(opLines);
    if (lines.length > 0)
      batches.push({ phase, file, args: BATCH_ARGS, input: `${lines.join('\n')}\n`, lines });
  };
  lined('ip-pre', 'ip');
  lined('bridge', 'bridge');
  lined('ip-post', 'ip');
  const restore = renderRestore(ops);
  if (restore !== '')
    batches.push({
      phase: 'iptables',
      file: 'iptables-restore',
      args: ['--noflush', '-w', '5'],
      input: restore,
      lines: restore.trimEnd().split('\n'),
    });
  return batches;
}
