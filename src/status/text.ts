// `twill status` as text for people (the JSON form is the report itself). A
// dual-stack node gets an IPv6 line for the lease, IPv6 columns in the peer
// table and a line for the ip6tables chains. An IPv6-only node's lease line
// says IPv4 is off, its peer table has the IPv6 columns alone, and its
// masquerade line says IPv4 is off. A mode line says where the masquerade
// lives; in nftables mode the masquerade line names twill's tables, and
// twill's chains get a line only when some are left (an iptables-mode run's);
// in iptables mode twill's tables get one only when some are left.
import type { PeerRow, StatusReport } from './report.ts';

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
  const v4 = r.masquerade !== null;
  const v6 = r.masquerade6 !== null;
  const vtep = l?.vtepMac ? `, VtepMAC ${l.vtepMac}` : '';
  out.push(
    !l
      ? 'lease:      none found in the store for this node'
      : v4
        ? `lease:      ${l.subnet ?? 'no IPv4 subnet'} (${l.key}), public IP ${l.publicIp ?? 'none'}, ${l.backend}${vtep}, expires ${l.expiresAt ?? 'unknown'}`
        : `lease:      IPv4 off (${l.key}), ${l.backend}, expires ${l.expiresAt ?? 'unknown'}`,
  );
  if (l && v6)
    out.push(
      `lease IPv6: ${l.subnet6 ?? 'none'}, public IPv6 ${l.publicIpv6 ?? 'none'}${l.vtepMac6 ? `, VtepMAC ${l.vtepMac6}` : ''}`,
    );
  out.push(`peers:      ${r.peers.length}`);
  const head4 = ['subnet', 'public IP', 'VtepMAC', 'kernel'];
  const head6 = ['IPv6 subnet', 'public IPv6', 'VtepMAC v6', 'kernel v6'];
  const cells4 = (p: PeerRow): string[] => [
    p.subnet ?? '-',
    p.publicIp ?? '-',
    p.vtepMac ?? '-',
    p.kernel ?? '-',
  ];
  const cells6 = (p: PeerRow): string[] => [
    p.subnet6 ?? '-',
    p.publicIpv6 ?? '-',
    p.vtepMac6 ?? '-',
    p.kernel6 ?? '-',
  ];
  if (r.peers.length > 0)
    out.push(
      ...table(
        [...(v4 ? head4 : []), ...(v6 ? head6 : [])],
        r.peers.map((p) => [...(v4 ? cells4(p) : []), ...(v6 ? cells6(p) : [])]),
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
  out.push(...(r.mode === 'nftables' ? nftLines(r) : iptablesLines(r)));
  return `${out.join('\n')}\n`;
}

type Chains = { readonly postrouting: string; readonly forward: string };
const chainsText = (c: Chains): string => `TWILL-POSTRTG ${c.postrouting}; TWILL-FWD ${c.forward}`;
const TABLE4 = 'table ip twill-ipv4';
const TABLE6 = 'table ip6 twill-ipv6';

/** iptables mode: the chains, as ever, and twill's tables only when one is left. */
function iptablesLines(r: StatusReport): string[] {
  const out = [
    'mode:       iptables (twill keeps the masquerade in its chains)',
    r.masquerade
      ? `masquerade: ${chainsText(r.masquerade)}`
      : 'masquerade: IPv4 off (twill keeps no iptables chain)',
  ];
  if (r.masquerade6) out.push(`ip6tables:  ${chainsText(r.masquerade6)}`);
  const left = [
    ...(r.nftables.ipv4 === 'extra' ? [TABLE4] : []),
    ...(r.nftables.ipv6 === 'extra' ? [TABLE6] : []),
  ];
  if (left.length > 0)
    out.push(`nftables:   ${left.join('; ')} extra (an nftables-mode run's; twill run removes it)`);
  return out;
}

/** nftables mode: twill's tables, and its chains only when some are left (or cannot be told). */
function nftLines(r: StatusReport): string[] {
  const tables = [
    r.masquerade ? `${TABLE4} ${r.nftables.ipv4}` : '',
    r.masquerade6 ? `${TABLE6} ${r.nftables.ipv6}` : '',
    // a family that is off: its table must not be there
    !r.masquerade && r.nftables.ipv4 !== 'none' ? `${TABLE4} ${r.nftables.ipv4} (IPv4 off)` : '',
    !r.masquerade6 && r.nftables.ipv6 !== 'none' ? `${TABLE6} ${r.nftables.ipv6} (IPv6 off)` : '',
  ].filter(Boolean);
  const out = [
    'mode:       nftables (EnableNFTables: twill keeps the masquerade in its tables)',
    `masquerade: ${tables.join('; ')}`,
  ];
  const left = (c: Chains | null): boolean =>
    c !== null && (c.postrouting !== 'ok' || c.forward !== 'ok');
  if (r.masquerade && left(r.masquerade)) out.push(`iptables:   ${chainsText(r.masquerade)}`);
  if (r.masquerade6 && left(r.masquerade6)) out.push(`ip6tables:  ${chainsText(r.masquerade6)}`);
  return out;
}
