// The lab in nftables mode (`npm run lab -- up --nftables`) without a lab: what it writes
// (EnableNFTables in the network config), which command lines take it, which monitor lines its
// drills time, how its masquerade drills break twill's tables (and, in iptables mode, its chain),
// and what its leftovers check finds, run against a canned three-node cluster whose commands are
// recorded.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { ROUTE_PROTOCOL } from '../../src/dataplane/model.ts';
import type { Cluster, LabNode, LabPod, Target } from '../../lab/cluster.ts';
import { brokeOn, leftovers, NFT_TABLES, ownState, type Family } from '../../lab/drill-kit.ts';
import { DRILLS } from '../../lab/drills.ts';
import {
  iptablesMasqChainDelete,
  nftMasqRuleDelete,
  renderBreak,
  type BreakCommand,
} from '../../lab/drills-kernel.ts';
import { concernsTwill } from '../../lab/kernel-watch.ts';
import { labNetConfig } from '../../lab/netns-kube.ts';
import { ANNOTATION_PREFIX, type NodeObject } from '../../lab/store-view.ts';
import { upConflict, type UpOptions } from '../../lab/up-options.ts';

const BASE: UpOptions = { nodes: 3, pods: 2, backend: 'vxlan', store: 'etcd' };

describe('up --nftables', () => {
  it('is taken by the netns lab with either store, with any family', () => {
    expect(upConflict({ ...BASE, nftables: true })).toBeUndefined();
    expect(upConflict({ ...BASE, nftables: true, dualStack: true })).toBeUndefined();
    expect(upConflict({ ...BASE, store: 'kube', nftables: true })).toBeUndefined();
    expect(upConflict({ ...BASE, store: 'kube', nftables: true, ipv6Only: true })).toBeUndefined();
    expect(upConflict({ ...BASE, backend: 'host-gw', nftables: true, slow: 3 })).toBeUndefined();
  });

  it('is refused by the kubelet lab (deploy/ as shipped) and the Vagrant lab', () => {
    expect(upConflict({ ...BASE, kubelet: true, nftables: true })).toMatch(
      /^--nftables is for the netns lab with either store .*not --kubelet/,
    );
    expect(upConflict({ ...BASE, vagrant: true, nftables: true })).toMatch(
      /^--vagrant runs the etcd lab on Vagrant machines: .*--nftables/,
    );
  });

  it("puts flannel's EnableNFTables in the network config, and nothing else changes", () => {
    expect(labNetConfig('vxlan', { nftables: true })).toEqual({
      Network: '10.244.0.0/16',
      EnableNFTables: true,
      Backend: { Type: 'vxlan' },
    });
    expect(labNetConfig('host-gw', { dualStack: true, nftables: true })).toMatchObject({
      Network: '10.244.0.0/16',
      EnableIPv6: true,
      EnableNFTables: true,
    });
    expect(labNetConfig('vxlan', { ipv6Only: true, nftables: true })).toMatchObject({
      EnableIPv4: false,
      EnableNFTables: true,
    });
    // twill's parser takes it, as a key it knows
    const parsed = parseNetConfig(JSON.stringify(labNetConfig('vxlan', { nftables: true })));
    expect(parsed).toMatchObject({ nftables: true, unknownKeys: [] });
    expect(parseNetConfig(JSON.stringify(labNetConfig('vxlan'))).nftables).toBe(false);
    expect(labNetConfig('vxlan')).not.toHaveProperty('EnableNFTables');
    expect(labNetConfig('vxlan', { nftables: false })).not.toHaveProperty('EnableNFTables');
  });
});

describe('the kernel monitors in nftables mode', () => {
  it("time the events about twill's tables, their chains and rules, in both families", () => {
    for (const line of [
      'add table ip twill-ipv4',
      'delete table ip twill-ipv4',
      'add chain ip twill-ipv4 postrtg { type nat hook postrouting priority srcnat; policy accept; }',
      'delete rule ip twill-ipv4 postrtg handle 7',
      'add rule ip twill-ipv4 forward ip saddr 10.244.0.0/16 accept',
      'add table ip6 twill-ipv6',
      // the IPv6 masquerade rule names ff00::/8, which in an ip monitor line is kernel churn
      'add rule ip6 twill-ipv6 postrtg ip6 saddr fd00:10:244::/56 ip6 daddr != ff00::/8 masquerade',
    ])
      expect(concernsTwill(line), line).toBe(true);
  });

  it('leave out the other tables, the probe and the kernel churn, as before', () => {
    for (const line of [
      'add table ip twlprobe',
      'add rule ip nat KUBE-SVC-ABC counter jump KUBE-SEP-XYZ',
      'add table ip twill-ipv4x',
      'add rule inet filter input ip saddr 10.0.0.1 comment "twill-ipv4" accept',
      'Deleted fe80::/64 dev twill.1 proto kernel metric 256 pref medium',
    ])
      expect(concernsTwill(line), line).toBe(false);
    // an ip6tables rule naming ff00::/8 counts now too (it is twill's, never kernel churn)
    expect(concernsTwill('add rule ip6 nat TWILL-POSTRTG ip6 daddr != ff00::/8 masquerade')).toBe(
      true,
    );
  });
});

const a = (key: string): string => `${ANNOTATION_PREFIX}/${key}`;

/** Node k of an IPv4 kube lab over host-gw, as twill annotates it. */
function v4Node(k: number): NodeObject {
  return {
    metadata: {
      name: `n${k}`,
      annotations: {
        [a('kube-subnet-manager')]: 'true',
        [a('backend-type')]: 'host-gw',
        [a('public-ip')]: `10.123.0.${10 + k}`,
      },
    },
    spec: { podCIDR: `10.244.${k}.0/24` },
  };
}

const POSTRTG = [
  'meta mark & 0x00004000 == 0x00004000 return',
  'ip saddr 10.244.1.0/24 ip daddr 10.244.0.0/16 return',
  'ip saddr 10.244.0.0/16 ip daddr 10.244.1.0/24 return',
  'ip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return',
  'ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random',
  'ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random',
];
const FORWARD = ['ip saddr 10.244.0.0/16 accept', 'ip daddr 10.244.0.0/16 accept'];

/** One node's masquerade as the canned lab keeps it: rules per chain of each twill table. */
interface NodeMasq {
  tables: Map<Family, Record<string, string[]>>;
  iptablesSave: string;
}

/**
 * A three-node IPv4 kube lab over host-gw in nftables mode (or iptables mode, `nftables` false),
 * whole: each node routes its two peers and holds `table ip twill-ipv4` with its rules, and no
 * iptables chain of twill's. Every command recorded.
 */
class CannedNftLab implements Cluster {
  readonly description = 'canned nftables lab';
  readonly outsideIp = '203.0.113.2';
  readonly etcdEndpoint = 'http://10.123.0.1:2379';
  readonly etcdPrefix = '/coreos.com/network';
  readonly store = 'kube';
  readonly mode = 'kube';
  readonly sent: string[] = [];
  readonly masq = new Map<string, NodeMasq>();
  readonly nftables: boolean;

  constructor(o: { nftables: boolean }) {
    this.nftables = o.nftables;
    for (const k of [1, 2, 3])
      this.masq.set(`n${k}`, {
        tables: new Map([[4, { postrtg: [...POSTRTG], forward: [...FORWARD] }]]),
        iptablesSave: '',
      });
  }

  async nodes(): Promise<LabNode[]> {
    return [1, 2, 3].map((k) => ({ name: `n${k}`, ip: `10.123.0.${10 + k}` }));
  }

  async pods(): Promise<LabPod[]> {
    return [1, 2, 3].map((k) => ({ name: `n${k}-p1`, node: `n${k}`, ip: `10.244.${k}.2` }));
  }

  async kubectl(args: readonly string[]): Promise<string> {
    if (args.join(' ') !== 'get nodes -o json') throw new Error(`kubectl ${args.join(' ')}`);
    return JSON.stringify({ items: [1, 2, 3].map(v4Node) });
  }

  async sh(t: Target, argv: readonly string[], opts: { input?: string } = {}): Promise<string> {
    const where = typeof t === 'string' ? t : 'node' in t ? t.node : t.pod;
    const cmd = argv.join(' ');
    this.sent.push(`${where}: ${cmd}${opts.input === undefined ? '' : ` <<< ${opts.input}`}`);
    const m = this.masq.get(where);
    const k = Number(where.slice(1));
    const absent = (): never => {
      throw new Error(`${cmd}: Error: No such file or directory`);
    };
    if (cmd === 'ip -4 route show table main')
      return [1, 2, 3]
        .filter((p) => p !== k)
        .map((p) => `10.244.${p}.0/24 via 10.123.0.${10 + p} dev eth0 proto ${ROUTE_PROTOCOL}\n`)
        .join('');
    if (cmd === 'nft list tables')
      return [...(m?.tables.keys() ?? [])]
        .map((f) => `table ${NFT_TABLES[f].family} ${NFT_TABLES[f].name}\n`)
        .join('');
    for (const f of [4, 6] as const) {
      const { family, name } = NFT_TABLES[f];
      const table = m?.tables.get(f);
      if (cmd === `nft -j list table ${family} ${name}`)
        return table === undefined ? absent() : nftJson(family, name, table);
      if (cmd === `nft list table ${family} ${name}`)
        return table === undefined ? absent() : nftText(family, name, table);
      if (cmd === `nft -a list chain ${family} ${name} postrtg`)
        return table?.postrtg === undefined
          ? absent()
          : nftText(family, name, { postrtg: table.postrtg }, { handles: true });
    }
    if (cmd === 'iptables-save') return m?.iptablesSave ?? '';
    if (cmd === 'iptables -w 5 -t nat -S POSTROUTING')
      return '-P POSTROUTING ACCEPT\n-A POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG\n';
    if (cmd.includes('TWILL-')) return absent();
    return '';
  }

  async watch(): Promise<void> {
    throw new Error('no monitors in this lab');
  }
  async startTwill(): Promise<void> {
    throw new Error('not in this lab');
  }
  async stopTwill(): Promise<void> {
    throw new Error('not in this lab');
  }
  async twillCpuMs(): Promise<number | undefined> {
    return undefined;
  }
  logPath(node: string): string {
    return `/nowhere/${node}.log`;
  }
  async twillLog(): Promise<string> {
    return '';
  }
  async stopApiServer(): Promise<void> {
    throw new Error('not in this lab');
  }
  async startApiServer(): Promise<void> {
    throw new Error('not in this lab');
  }
  async stopEtcd(): Promise<void> {
    throw new Error('not in this lab');
  }
  async startEtcd(): Promise<void> {
    throw new Error('not in this lab');
  }
  async addNodes(): Promise<void> {
    throw new Error('not in this lab');
  }
  async removeNode(): Promise<void> {
    throw new Error('not in this lab');
  }
}

/** `nft list table` (with `handles`: `nft -a`, handles from 1, rules after the chains). */
function nftText(
  family: string,
  name: string,
  chains: Record<string, string[]>,
  o: { handles?: boolean } = {},
): string {
  let handle = 1;
  const h = (): string => (o.handles === true ? ` # handle ${handle++}` : '');
  const body = Object.entries(chains).map(
    ([chain, rules]) =>
      `\tchain ${chain} {${h()}\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n${rules.map((r) => `\t\t${r}${h()}\n`).join('')}\t}\n`,
  );
  return `table ${family} ${name} {\n${body.join('')}}\n`;
}

/** `nft -j list table`: metainfo, the table, its chains, their rules. */
function nftJson(family: string, name: string, chains: Record<string, string[]>): string {
  const items: unknown[] = [{ metainfo: { version: '1.0.6' } }, { table: { family, name } }];
  for (const chain of Object.keys(chains))
    items.push({ chain: { family, table: name, name: chain } });
  for (const [chain, rules] of Object.entries(chains))
    for (const [i] of rules.entries())
      items.push({ rule: { family, table: name, chain, handle: i + 10, expr: [] } });
  return JSON.stringify({ nftables: items });
}

describe("the leftovers check in nftables mode: twill's tables, not its chains", () => {
  it('finds nothing on a whole lab', async () => {
    expect(await leftovers(new CannedNftLab({ nftables: true }))).toEqual([]);
  });

  it('finds a missing table, a chain short of rules, a table of a family the node lacks, and any TWILL-* chain or jump', async () => {
    const c = new CannedNftLab({ nftables: true });
    const get = (node: string): NodeMasq => {
      const m = c.masq.get(node);
      if (!m) throw new Error(node);
      return m;
    };
    get('n1').tables.delete(4);
    get('n2').tables.set(4, { postrtg: POSTRTG.slice(0, 4), forward: [...FORWARD] });
    get('n2').tables.set(6, { postrtg: [], forward: [] });
    get('n3').iptablesSave =
      '*nat\n:POSTROUTING ACCEPT [0:0]\n:TWILL-POSTRTG - [0:0]\n-A POSTROUTING -j TWILL-POSTRTG\nCOMMIT\n*filter\n-A FORWARD -j TWILL-FWD\nCOMMIT\n';
    expect(await leftovers(c)).toEqual([
      'n1: no table ip twill-ipv4',
      'n2: table ip twill-ipv4 holds 4 postrtg rule(s), want 6',
      'n2: table ip6 twill-ipv6 on a node without IPv6',
      'n3: iptables-save shows TWILL-POSTRTG in nftables mode',
      'n3: iptables-save shows TWILL-FWD in nftables mode',
    ]);
  });

  it("finds, in iptables mode, a twill nft table an nftables-mode run left, beside the chains' own check", async () => {
    const c = new CannedNftLab({ nftables: false });
    expect(await leftovers(c)).toEqual(
      [1, 2, 3].flatMap((k) => [
        `n${k}: iptables's TWILL-POSTRTG does not hold its 6 rules`,
        `n${k}: nftables table ip twill-ipv4 in iptables mode`,
      ]),
    );
  });

  it("sees a node whole again only when twill's table is as before", async () => {
    const c = new CannedNftLab({ nftables: true });
    const before = await ownState(c, 'n1');
    const m = c.masq.get('n1');
    m?.tables.set(4, { postrtg: POSTRTG.slice(1), forward: [...FORWARD] });
    expect(await ownState(c, 'n1')).not.toBe(before);
    m?.tables.delete(4);
    expect(await ownState(c, 'n1')).not.toBe(before);
    m?.tables.set(4, { postrtg: [...POSTRTG], forward: [...FORWARD] });
    expect(await ownState(c, 'n1')).toBe(before);
  });
});

describe('the masquerade drills, by mode', () => {
  const drill = (name: string): (typeof DRILLS)[number] => {
    const d = DRILLS.find((x) => x.name === name);
    if (!d) throw new Error(`no drill ${name}`);
    return d;
  };

  it('say what they break in each mode; the other kernel drills say the same in both', () => {
    const nft = { nftables: true };
    const ipt = {};
    expect(brokeOn(drill('masq-rule'), ipt)).toBe('MASQUERADE rule deleted');
    expect(brokeOn(drill('masq-rule'), nft)).toBe("masquerade rule deleted from twill's nft table");
    expect(brokeOn(drill('nat-flush'), ipt)).toBe('whole nat table flushed');
    expect(brokeOn(drill('nat-flush'), nft)).toBe("twill's nft table flushed");
    expect(brokeOn(drill('masq-table'), nft)).toBe("twill's nft table deleted");
    expect(brokeOn(drill('masq-table'), ipt)).toMatch(/^twill's masquerade chain deleted/);
    expect(brokeOn(drill('masq6-rule'), nft)).toMatch(/IPv6 .* twill's nft table$/);
    for (const name of ['peer-route', 'vxlan-device', 'kill-restart'])
      expect(brokeOn(drill(name), nft), name).toBe(drill(name).broke);
    // masq-table breaks IPv4 (an IPv6-only lab says n/a), on either store
    expect(drill('masq-table')).toMatchObject({ ipv4Only: true, stores: ['etcd', 'kube'] });
  });

  it('delete the masquerade rule of twill’s table by its handle (the 5th rule, as iptables -D … 5)', async () => {
    const c = new CannedNftLab({ nftables: true });
    expect(await nftMasqRuleDelete(4)(c, 'n2')).toEqual([
      'nft',
      'delete',
      'rule',
      'ip',
      'twill-ipv4',
      'postrtg',
      'handle',
      '6',
    ]);
    c.masq.get('n2')?.tables.delete(4);
    await expect(nftMasqRuleDelete(4)(c, 'n2')).rejects.toThrow(/No such file/);
    c.masq.get('n2')?.tables.set(4, { postrtg: POSTRTG.slice(0, 4), forward: [] });
    await expect(nftMasqRuleDelete(4)(c, 'n2')).rejects.toThrow(
      'n2: no masquerade rule in ip twill-ipv4 postrtg',
    );
  });

  it('delete twill’s iptables chain with its jump in one iptables-restore transaction', async () => {
    const c = new CannedNftLab({ nftables: false });
    const cmd = (await iptablesMasqChainDelete(c, 'n1')) as BreakCommand;
    expect(cmd.argv).toEqual(['iptables-restore', '-w', '5', '--noflush']);
    expect(cmd.input).toBe(
      '*nat\n-D POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG\n-F TWILL-POSTRTG\n-X TWILL-POSTRTG\nCOMMIT\n',
    );
    expect(renderBreak(cmd)).toBe(
      'iptables-restore -w 5 --noflush <<< *nat; -D POSTROUTING -m comment --comment "twill masq" -j TWILL-POSTRTG; -F TWILL-POSTRTG; -X TWILL-POSTRTG; COMMIT',
    );
    expect(renderBreak({ argv: ['nft', 'flush', 'table', 'ip', 'twill-ipv4'] })).toBe(
      'nft flush table ip twill-ipv4',
    );
  });
});
