// `twill status` as text for people (the JSON form is the report itself). A
// dual-stack node gets an IPv6 line for the lease, IPv6 columns in the peer
// table and a line for the ip6tables chains.
import type { StatusReport } from './report.ts';

function table(head: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    `  ${cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd()}`;
  return [line(head), ...rows.map(line)];
}

export function renderStatus(r: StatusReport): string {
  const out: string[] = [`daemon:     ${r.daemon.detail}`];
  const l = r.lease;
  out.push(
    l
      ? `lease:      ${l.subnet} (${l.key}), public IP ${l.publicIp}, ${l.backend}${l.vtepMac ? `, VtepMAC ${l.vtepMac}` : ''}, expires ${l.expiresAt ?? 'unknown'}`
      : 'lease:      none found in the store for this node',
  );
  const dual = r.masquerade6 !== null;
  if (l && dual)
    out.push(
      `lease IPv6: ${l.subnet6 ?? 'none'}, public IPv6 ${l.publicIpv6 ?? 'none'}${l.vtepMac6 ? `, VtepMAC ${l.vtepMac6}` : ''}`,
    );
  out.push(`peers:      ${r.peers.length}`);
  if (r.peers.length > 0 && !dual)
    out.push(
      ...table(
        ['subnet', 'public IP', 'VtepMAC', 'kernel'],
        r.peers.map((p) => [p.subnet, p.publicIp, p.vtepMac ?? '-', p.kernel]),
      ),
    );
  if (r.peers.length > 0 && dual)
    out.push(
      ...table(
        [
          'subnet',
          'public IP',
          'VtepMAC',
          'kernel',
          'IPv6 subnet',
          'public IPv6',
          'VtepMAC v6',
          'kernel v6',
        ],
        r.peers.map((p) => [
          p.subnet,
          p.publicIp,
          p.vtepMac ?? '-',
          p.kernel,
          p.subnet6 ?? '-',
          p.publicIpv6 ?? '-',
          p.vtepMac6 ?? '-',
          p.kernel6 ?? '-',
        ]),
      ),
    );
  const d = r.diff;
  const count = d.missing.length + d.extra.length + d.different.length;
  out.push(
    count === 0
      ? 'dataplane:  in sync (the kernel holds exactly the desired state)'
      : `dataplane:  ${count} difference(s) between desired and actual`,
  );
  for (const [what, lines] of [
    ['missing', d.missing],
    ['extra', d.extra],
    ['different', d.different],
  ] as const)
    for (const line of lines) out.push(`  ${what.padEnd(9)} ${line}`);
  out.push(
    `masquerade: TWILL-POSTRTG ${r.masquerade.postrouting}; TWILL-FWD ${r.masquerade.forward}`,
  );
  if (r.masquerade6)
    out.push(
      `ip6tables:  TWILL-POSTRTG ${r.masquerade6.postrouting}; TWILL-FWD ${r.masquerade6.forward}`,
    );
  return `${out.join('\n')}\n`;
}
