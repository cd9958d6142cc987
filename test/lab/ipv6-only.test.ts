// The IPv6-only lab (`npm run lab -- up --store kube --ipv6-only`) without a lab: what it writes
// (net-conf.json, the Nodes' podCIDRs), how it reads IPv6-only leases (no IPv4 subnet, no
// PublicIP) from the Node objects, and what its drills and matrix check, run against a canned
// three-node IPv6-only kube cluster whose commands are recorded.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { ROUTE_PROTOCOL } from '../../src/dataplane/model.ts';
import { containsAddr6, parseCidr6, parseIpv6 } from '../../src/net/ipv6.ts';
import { CommandError } from '../../src/exec/runner.ts';
import type { Cluster, LabNode, LabPod, Target } from '../../lab/cluster.ts';
import { goneEverywhere, goneNode, leftovers } from '../../lab/drill-kit.ts';
import { DRILLS, drillsFor, familyNotApplicable, runDrill } from '../../lab/drills.ts';
import {
  duplicateSubnets,
  everyNodeRoutesEveryLease,
  neighbourBudget,
} from '../../lab/drills-store.ts';
import { connectivity, matrixTargets, renderMatrix } from '../../lab/matrix.ts';
import { LAB_IPV6_NETWORK, labNetConfig, labPodCidrs, nodeObject } from '../../lab/netns-kube.ts';
import {
  ANNOTATION_PREFIX,
  isLeaseOf,
  kubeLeaseViews,
  leaseOf,
  leases,
  type LeaseView,
  type NodeObject,
} from '../../lab/store-view.ts';

const IPV4_DRILLS = [
  'masq-rule',
  'nat-flush',
  'masq-table',
  'peer-route',
  'peer-neigh',
  'peer-fdb',
  'vxlan-device',
];
const IPV6_DRILLS = ['masq6-rule', 'peer-route6', 'peer-neigh6', 'peer-fdb6', 'vxlan6-device'];

const a = (key: string): string => `${ANNOTATION_PREFIX}/${key}`;

/** Node k of an IPv6-only cluster as twill annotates it (no public-ip, no backend-data). */
function v6Node(k: number): NodeObject {
  const cidr = `fd00:10:244:${k}::/64`;
  return {
    metadata: {
      name: `n${k}`,
      annotations: {
        [a('kube-subnet-manager')]: 'true',
        [a('backend-type')]: 'vxlan',
        [a('public-ipv6')]: `fd00:123::${10 + k}`,
        [a('backend-v6-data')]: JSON.stringify({ VNI: 1, VtepMAC: `7e:00:00:00:00:0${k}` }),
      },
    },
    spec: { podCIDR: cidr, podCIDRs: [cidr] },
  };
}

/**
 * A three-node IPv6-only kube lab over vxlan, whole: each node holds a route, a permanent
 * neighbour and an FDB entry on twill-v6.1 per peer and ip6tables' six masquerade rules; no
 * twill.1, no IPv4 chain (the commands for them fail, as on such a node). Every command recorded.
 */
class CannedIpv6OnlyLab implements Cluster {
  readonly description = 'canned IPv6-only lab';
  readonly outsideIp = '203.0.113.2';
  readonly outsideIp6 = '2001:db8:113::2';
  readonly ipv6Only = true;
  readonly etcdEndpoint = 'http://10.123.0.1:2379';
  readonly etcdPrefix = '/coreos.com/network';
  readonly store = 'kube';
  readonly mode = 'kube';
  readonly sent: string[] = [];
  /** routes per node, as `ip -6 route` shows them */
  readonly routes6 = new Map<string, string[]>();
  readonly neighs6 = new Map<string, string[]>();
  readonly fdb6 = new Map<string, string[]>();
  /** nodes on which a twill.1 device or IPv4 masquerade rules linger */
  readonly ipv4Leftovers = new Set<string>();
  readonly nodeObjects = [1, 2, 3].map(v6Node);

  constructor() {
    for (const k of [1, 2, 3]) {
      const peers = [1, 2, 3].filter((p) => p !== k);
      this.routes6.set(
        `n${k}`,
        peers.map(
          (p) =>
            `fd00:10:244:${p}::/64 via fd00:10:244:${p}:: dev twill-v6.1 proto ${ROUTE_PROTOCOL} metric 1024 onlink pref medium`,
        ),
      );
      this.neighs6.set(
        `n${k}`,
        peers.map((p) => `fd00:10:244:${p}:: lladdr 7e:00:00:00:00:0${p} PERMANENT`),
      );
      this.fdb6.set(
        `n${k}`,
        peers.map((p) => `7e:00:00:00:00:0${p} dst fd00:123::${10 + p} self permanent`),
      );
    }
  }

  async nodes(): Promise<LabNode[]> {
    return [1, 2, 3].map((k) => ({
      name: `n${k}`,
      ip: `10.123.0.${10 + k}`,
      ip6: `fd00:123::${10 + k}`,
    }));
  }

  async pods(): Promise<LabPod[]> {
    return [1, 2, 3].map((k) => {
      const ip = `fd00:10:244:${k}::2`;
      return { name: `n${k}-p1`, node: `n${k}`, ip, ip6: ip };
    });
  }

  async sh(t: Target, argv: readonly string[]): Promise<string> {
    const where = typeof t === 'string' ? t : 'node' in t ? t.node : t.pod;
    const cmd = argv.join(' ');
    this.sent.push(`${where}: ${cmd}`);
    const v4 = this.ipv4Leftovers.has(where);
    const gone = (): never => {
      throw new Error(`${cmd}: no such device or chain`);
    };
    if (cmd === 'ip -4 route show table main') return 'default via 10.123.0.254 dev eth0\n';
    if (cmd === 'ip -6 route show table main')
      return [...(this.routes6.get(where) ?? []), 'default via fd00:123::fe dev eth0 metric 1024']
        .map((l) => `${l}\n`)
        .join('');
    if (cmd === 'ip neigh show dev twill-v6.1 nud permanent')
      return (this.neighs6.get(where) ?? []).join('\n');
    if (cmd === 'bridge fdb show dev twill-v6.1') return (this.fdb6.get(where) ?? []).join('\n');
    if (cmd === 'ip6tables -t nat -S TWILL-POSTRTG')
      return ['-N TWILL-POSTRTG', ...Array.from({ length: 6 }, (_, i) => `-A TWILL-POSTRTG r${i}`)]
        .map((l) => `${l}\n`)
        .join('');
    if (cmd === 'iptables -t nat -S TWILL-POSTRTG')
      return v4 ? '-N TWILL-POSTRTG\n-A TWILL-POSTRTG -j RETURN\n' : gone();
    if (cmd.includes('twill.1')) return v4 ? '' : gone();
    return '';
  }

  async kubectl(args: readonly string[]): Promise<string> {
    if (args.join(' ') !== 'get nodes -o json') throw new Error(`kubectl ${args.join(' ')}`);
    return JSON.stringify({ items: this.nodeObjects });
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

describe('what the IPv6-only lab writes', () => {
  it("net-conf.json turns IPv4 off and has no Network, and twill's parser takes it as IPv6-only", () => {
    const conf = labNetConfig('vxlan', { ipv6Only: true });
    expect(conf).toEqual({
      EnableIPv4: false,
      EnableIPv6: true,
      IPv6Network: LAB_IPV6_NETWORK,
      Backend: { Type: 'vxlan' },
    });
    const parsed = parseNetConfig(JSON.stringify(conf));
    expect(parsed.ipv4).toBeNull();
    expect(parsed.ipv6?.network).toEqual(parseCidr6(LAB_IPV6_NETWORK, { strict: true }));
    expect(() => labNetConfig('vxlan', { ipv6Only: true, dualStack: true })).toThrow(/not both/);
    // the other labs' configs as they were
    expect(labNetConfig('host-gw')).toEqual({
      Network: '10.244.0.0/16',
      Backend: { Type: 'host-gw' },
    });
    expect(labNetConfig('vxlan', { dualStack: true })).toMatchObject({
      Network: '10.244.0.0/16',
      EnableIPv6: true,
    });
  });

  it('gives each Node one IPv6 podCIDR inside the IPv6 network, as spec.podCIDR too', () => {
    const network = parseCidr6(LAB_IPV6_NETWORK, { strict: true });
    if (!network) throw new Error('LAB_IPV6_NETWORK is no CIDR');
    for (const k of [1, 9, 10, 17, 200]) {
      const cidrs = labPodCidrs(k, { ipv6Only: true });
      expect(cidrs, String(k)).toEqual([`fd00:10:244:${k.toString(16)}::/64`]);
      const base = parseIpv6((cidrs[0] ?? '').split('/')[0] ?? '');
      expect(base !== undefined && containsAddr6(network, base), String(k)).toBe(true);
    }
    expect(JSON.parse(nodeObject('n12', labPodCidrs(12, { ipv6Only: true })))).toEqual({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'n12' },
      spec: { podCIDR: 'fd00:10:244:c::/64', podCIDRs: ['fd00:10:244:c::/64'] },
    });
    expect(labPodCidrs(3)).toEqual(['10.244.3.0/24']);
    expect(labPodCidrs(3, { dualStack: true })).toEqual(['10.244.3.0/24', 'fd00:10:244:3::/64']);
  });
});

describe('IPv6-only leases, from the Node objects', () => {
  it('have no IPv4 subnet and no PublicIP, and belong to their node by its IPv6 address', async () => {
    const c = new CannedIpv6OnlyLab();
    const all = await leases(c);
    expect(all).toEqual(
      [1, 2, 3].map((k) => ({
        key: `n${k}`,
        subnet: null,
        publicIp: null,
        subnet6: `fd00:10:244:${k}::/64`,
        publicIp6: `fd00:123::${10 + k}`,
      })),
    );
    const [, n2] = await c.nodes();
    expect((await leaseOf(c, n2))?.key).toBe('n2');
    // its IPv4 underlay address (the lab's plumbing) names no lease: none has a PublicIP
    expect(all.some((l) => isLeaseOf(l, { ip: '10.123.0.12' }))).toBe(false);
  });

  it('read IPv4 and dual-stack Nodes as before, and skip Nodes twill has not annotated', () => {
    const v4: NodeObject = {
      metadata: {
        name: 'a',
        annotations: { [a('kube-subnet-manager')]: 'true', [a('public-ip')]: '10.123.0.11' },
      },
      spec: { podCIDR: '10.244.1.0/24' },
    };
    const dual: NodeObject = {
      metadata: {
        name: 'b',
        annotations: {
          [a('kube-subnet-manager')]: 'true',
          [a('public-ip')]: '10.123.0.12',
          [a('public-ipv6')]: 'fd00:123::12',
        },
      },
      spec: { podCIDR: '10.244.2.0/24', podCIDRs: ['10.244.2.0/24', 'fd00:10:244:2::/64'] },
    };
    const bare: NodeObject = { metadata: { name: 'c' }, spec: { podCIDR: '10.244.3.0/24' } };
    const unannotated = { ...v6Node(4), metadata: { name: 'n4' } };
    expect(kubeLeaseViews([v4, dual, bare, unannotated])).toEqual([
      { key: 'a', subnet: '10.244.1.0/24', publicIp: '10.123.0.11' },
      {
        key: 'b',
        subnet: '10.244.2.0/24',
        publicIp: '10.123.0.12',
        subnet6: 'fd00:10:244:2::/64',
        publicIp6: 'fd00:123::12',
      },
    ]);
  });

  it('count no duplicate subnet for their null IPv4 halves', () => {
    const v6 = (k: number): LeaseView => ({
      key: `n${k}`,
      subnet: null,
      publicIp: null,
      subnet6: `fd00:10:244:${k}::/64`,
    });
    expect(duplicateSubnets([v6(1), v6(2), v6(3)])).toBe(0);
    expect(duplicateSubnets([v6(1), v6(2), v6(2)])).toBe(1);
    expect(
      duplicateSubnets([
        { key: 'x', subnet: '10.244.1.0/24', publicIp: '10.123.0.11' },
        { key: 'y', subnet: '10.244.1.0/24', publicIp: '10.123.0.12' },
      ]),
    ).toBe(1);
  });
});

describe('the drills on an IPv6-only lab', () => {
  it('find nothing left over on a whole lab, by the IPv6 entries alone', async () => {
    const c = new CannedIpv6OnlyLab();
    expect(await leftovers(c)).toEqual([]);
    expect(await everyNodeRoutesEveryLease(c)).toBe(true);
  });

  it('find a missing IPv6 route, and an IPv4 device or rule that should not be there', async () => {
    const c = new CannedIpv6OnlyLab();
    c.routes6.set('n1', (c.routes6.get('n1') ?? []).slice(1));
    c.ipv4Leftovers.add('n3');
    expect(await everyNodeRoutesEveryLease(c)).toBe(false);
    expect(await leftovers(c)).toEqual([
      'n1: no route to fd00:10:244:2::/64',
      'n3: 1 IPv4 masquerade rule(s) on a node without IPv4',
      'n3: twill.1 on a node without IPv4',
    ]);
  });

  it('see a node gone only once no peer holds its IPv6 route, neighbour or FDB entry', async () => {
    const c = new CannedIpv6OnlyLab();
    const nodes = await c.nodes();
    const n3 = nodes[2];
    const lease = await leaseOf(c, n3);
    if (!n3 || !lease) throw new Error('no n3 lease');
    const victim = goneNode(n3, lease);
    expect(victim).toEqual({
      name: 'n3',
      ip: '10.123.0.13',
      ip6: 'fd00:123::13',
      subnet: null,
      subnet6: 'fd00:10:244:3::/64',
    });
    const drop = (m: Map<string, string[]>, text: string): void => {
      for (const [k, v] of m)
        m.set(
          k,
          v.filter((l) => !l.includes(text)),
        );
    };
    expect(await goneEverywhere(c, victim)).toBe(false);
    drop(c.routes6, 'fd00:10:244:3::/64');
    expect(await goneEverywhere(c, victim)).toBe(false);
    drop(c.neighs6, 'fd00:10:244:3:: ');
    expect(await goneEverywhere(c, victim)).toBe(false);
    drop(c.fdb6, 'dst fd00:123::13 ');
    expect(await goneEverywhere(c, victim)).toBe(true);
  });

  it('say n/a for every IPv4 break, with a note, and send nothing to a node', async () => {
    const c = new CannedIpv6OnlyLab();
    for (const name of IPV4_DRILLS) {
      const d = DRILLS.find((x) => x.name === name);
      if (!d) throw new Error(`no drill ${name}`);
      const r = await runDrill(c, d);
      expect(r, name).toMatchObject({ pass: true, healedMs: null, met: null });
      expect(r.notes, name).toEqual([
        expect.stringMatching(/^n\/a: breaks IPv4, and an IPv6-only lab has none/),
      ]);
    }
    expect(c.sent).toEqual([]);
  });

  it('run the IPv6 breaks and every store drill of the kube set, on either backend', () => {
    const lab = { outsideIp6: '2001:db8:113::2', ipv6Only: true };
    const applies = drillsFor('kube')
      .filter((d) => familyNotApplicable(d, lab) === undefined)
      .map((d) => d.name);
    expect(applies).toEqual([
      ...IPV6_DRILLS,
      'kill-restart',
      'apiserver-outage',
      'node-deleted',
      'node-added',
      'twenty-nodes',
    ]);
  });

  it('count on the shared IPv6 neighbour table when the nodes talk over IPv6, the router included', () => {
    const ipv6Only = { outsideIp6: '2001:db8:113::2', ipv6Only: true };
    const dual = { outsideIp6: '2001:db8:113::2' };
    // the vxlan tunnels of an IPv6-only lab run over IPv6: each peer's global and link-local
    // the router too: 23 nodes already need more than the default table (1,024)
    expect(neighbourBudget(ipv6Only, 'vxlan', 24)).toBe(1200);
    expect(neighbourBudget(ipv6Only, 'host-gw', 24)).toBe(1200);
    expect(neighbourBudget(ipv6Only, 'vxlan', 23)).toBe(1104);
    expect(neighbourBudget(dual, 'host-gw', 23)).toBe(1104);
    // a dual-stack vxlan lab tunnels over IPv4; an IPv4 lab has no IPv6 at all
    expect(neighbourBudget(dual, 'vxlan', 24)).toBeUndefined();
    expect(neighbourBudget({}, 'host-gw', 24)).toBeUndefined();
  });

  it('leave the family checks of the other labs as they were', () => {
    const byFamily = (lab: { outsideIp6?: string; ipv6Only?: boolean }): string[] =>
      DRILLS.filter((d) => familyNotApplicable(d, lab) !== undefined).map((d) => d.name);
    expect(byFamily({})).toEqual(IPV6_DRILLS);
    expect(byFamily({ outsideIp6: '2001:db8:113::2' })).toEqual([]);
    const ipv6Break = DRILLS.find((d) => d.name === 'peer-route6');
    if (!ipv6Break) throw new Error('no peer-route6');
    // the Vagrant lab's e2e test reads this prefix
    expect(familyNotApplicable(ipv6Break, {})).toMatch(/^n\/a: dual-stack lab only/);
  });
});

describe('the matrix of an IPv6-only lab', () => {
  it('has only IPv6 columns: every pod and the outside host, by IPv6', () => {
    const pods: LabPod[] = [1, 2].map((k) => ({
      name: `n${k}-p1`,
      node: `n${k}`,
      ip: `fd00:10:244:${k}::2`,
      ip6: `fd00:10:244:${k}::2`,
    }));
    const lab = { outsideIp: '203.0.113.2', outsideIp6: '2001:db8:113::2', ipv6Only: true };
    expect(matrixTargets(pods, lab)).toEqual([
      { name: 'n1-p1/6', ip: 'fd00:10:244:1::2', pod: 'n1-p1' },
      { name: 'n2-p1/6', ip: 'fd00:10:244:2::2', pod: 'n2-p1' },
      { name: 'outside/6', ip: '2001:db8:113::2' },
    ]);
    // a dual-stack lab keeps both families' columns
    const dual = pods.map((p, i) => ({ ...p, ip: `10.244.${i + 1}.2` }));
    expect(
      matrixTargets(dual, { outsideIp: '203.0.113.2', outsideIp6: '2001:db8:113::2' }).map(
        (t) => t.name,
      ),
    ).toEqual(['n1-p1', 'n2-p1', 'outside', 'n1-p1/6', 'n2-p1/6', 'outside/6']);
  });

  it('pings IPv6 addresses alone and says so in its summary line', async () => {
    const c = new CannedIpv6OnlyLab();
    const m = await connectivity(c);
    expect(m.columns).toEqual(['n1-p1/6', 'n2-p1/6', 'n3-p1/6', 'outside/6']);
    const pinged = c.sent.filter((s) => s.includes(' ping ')).map((s) => s.split(' ').at(-1));
    expect(pinged).toHaveLength(3 * 3);
    for (const ip of pinged) expect(ip, 'a ping target').toContain(':');
    const text = renderMatrix(m);
    expect(text).toContain(
      'full connectivity: 3 pods, every pod reaches every pod and outside, by IPv6 alone (an IPv6-only lab: no IPv4 columns)',
    );
    expect(text).toContain('columns: 1=n1-p1/6 2=n2-p1/6 3=n3-p1/6 4=outside/6');
  });
});

describe('a failed ping in the matrix', () => {
  it('tells a ping without reply from a command that could not run', async () => {
    class Failing extends CannedIpv6OnlyLab {
      override async sh(t: Target, argv: readonly string[]): Promise<string> {
        const ip = argv.at(-1) ?? '';
        const from = typeof t === 'object' && 'pod' in t ? t.pod : '';
        if (argv[0] === 'ping' && from === 'n1-p1' && ip === 'fd00:10:244:2::2')
          throw new CommandError({ command: argv, exitCode: 1, stderr: '', reason: 'exit code 1' });
        if (argv[0] === 'ping' && from === 'n3-p1')
          throw new CommandError({
            command: ['ssh', 'n3'],
            exitCode: 255,
            stderr: 'mux_client_request_session: read from master failed',
            reason: 'exit code 255',
          });
        return super.sh(t, argv);
      }
    }
    const m = await connectivity(new Failing());
    expect(m.failures).toEqual([
      'n1-p1 → n2-p1/6 (fd00:10:244:2::2)',
      'n3-p1 → n1-p1/6 (fd00:10:244:1::2): ssh n3: exit code 255: mux_client_request_session: read from master failed',
      'n3-p1 → n2-p1/6 (fd00:10:244:2::2): ssh n3: exit code 255: mux_client_request_session: read from master failed',
      'n3-p1 → outside/6 (2001:db8:113::2): ssh n3: exit code 255: mux_client_request_session: read from master failed',
    ]);
    expect(m.reach[0]).toEqual([null, false, true, true]);
  });
});
