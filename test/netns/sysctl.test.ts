// `twill run --proc-sys-net` as the DaemonSet runs it, on a real two-node
// cluster: each node's twill reads and writes its sysctls through a bind
// mount of /proc/sys/net (what a hostPath volume is), which shows the
// node namespace's values. Read-write (deploy/'s mount): ip_forward reset to
// 0 is set back to 1 in the node's namespace, not the host's. Read-only (a
// container's own /proc/sys): every pass still programs the peers, /readyz
// says why ip_forward is not 1, /healthz stays 200, the warning is logged
// once however many passes fail, and it clears once ip_forward is 1; with
// ip_forward already 1, read-only changes nothing: everything is programmed
// and repaired.
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cluster, httpGetIn, type ClusterNode } from '../helpers/cluster.ts';
import { sweepStaleNetns } from '../../lab/kit/netns.ts';
import { slowBound, waitFor } from '../../lab/kit/wait.ts';
import { boundProcSysNet, type MountedDir } from '../helpers/sysctl.ts';

const PORT = 9810;
const c = new Cluster();
let rw: MountedDir;
let ro: MountedDir;
let n1: ClusterNode;
let n2: ClusterNode;

const get = (node: ClusterNode, path: string): Promise<{ status: number; body: string }> =>
  httpGetIn(c, node, PORT, path);

const ipForward = async (node: ClusterNode): Promise<string> =>
  (await c.sh(node.ns, 'sysctl', '-n', 'net.ipv4.ip_forward')).trim();
const logLines = async (node: ClusterNode): Promise<{ msg?: string; [k: string]: unknown }[]> =>
  (await c.logOf(node))
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { msg?: string });

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(name));
  return Number(line?.split(' ').at(-1));
}

beforeAll(async () => {
  await sweepStaleNetns();
  rw = await boundProcSysNet({ ro: false });
  ro = await boundProcSysNet({ ro: true });
  await c.start('{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}');
  const flags = (dir: string): string[] => [
    '--ip-masq',
    '--healthz-port',
    String(PORT),
    '--iptables-resync',
    '1',
    '--proc-sys-net',
    dir,
  ];
  n1 = await c.addNode(1, flags(rw.dir));
  n2 = await c.addNode(2, flags(ro.dir));
  await waitFor(
    async () => (await get(n1, '/readyz').catch(() => ({ status: 0 }))).status === 200,
    { timeoutMs: 15_000, what: 'n1 ready' },
  );
});
afterAll(async () => {
  await c.destroy();
  await rw?.remove();
  await ro?.remove();
});

describe('--proc-sys-net', () => {
  it('read-write (a hostPath of /proc/sys/net): ip_forward reset to 0 in the node is set back to 1 there, and the host is left alone', async () => {
    const host = (await readFile('/proc/sys/net/ipv4/ip_forward', 'utf8')).trim();
    await c.sh(n1.ns, 'sysctl', '-qw', 'net.ipv4.ip_forward=0');
    await waitFor(async () => (await ipForward(n1)) === '1', {
      timeoutMs: slowBound(3_000),
      what: 'ip_forward set back to 1',
    });
    expect(
      (await logLines(n1)).some((l) => l.msg === 'net.ipv4.ip_forward was 0; set it to 1'),
    ).toBe(true);
    expect((await readFile('/proc/sys/net/ipv4/ip_forward', 'utf8')).trim()).toBe(host);
    expect((await get(n1, '/readyz')).status).toBe(200);
  });

  it('read-only: the peers are still programmed, /readyz names the failure, /healthz stays 200, one warning, and it clears once ip_forward is 1', async () => {
    await c.sh(n2.ns, 'sysctl', '-qw', 'net.ipv4.ip_forward=0');
    await waitFor(
      async () =>
        (await get(n2, '/readyz').catch(() => ({ status: 0, body: '' }))).body.includes('EROFS'),
      { timeoutMs: slowBound(5_000), what: 'the sysctl failure in /readyz' },
    );
    const ready = await get(n2, '/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body).toBe(
      `dataplane does not match: 1 change(s) failed, first: sysctl: net.ipv4.ip_forward is 0, cannot set it to 1: EROFS: read-only file system, open '${ro.dir}/ipv4/ip_forward' (read-only: in a container that is not privileged, mount the host's /proc/sys/net and pass its path as --proc-sys-net)\n`,
    );
    expect(await get(n2, '/healthz')).toEqual({ status: 200, body: 'ok\n' });
    // the rest of the dataplane: n1's route, neighbour and FDB entry, and the chains
    const peer = (await c.subnetOf(n1)).key.replace('-', '/');
    await waitFor(
      async () => (await c.sh(n2.ns, 'ip', 'route', 'show', peer)).includes('proto 151'),
      { timeoutMs: slowBound(3_000), what: 'the route to n1' },
    );
    expect(
      await c.sh(n2.ns, 'ip', 'neigh', 'show', 'dev', 'twill.1', 'nud', 'permanent'),
    ).toContain(peer.split('/')[0]);
    expect(await c.sh(n2.ns, 'iptables', '-t', 'nat', '-S', 'TWILL-POSTRTG')).toContain(
      '-A TWILL-POSTRTG',
    );
    // pass after pass fails (the safety net every second), counted, and logged once
    await waitFor(
      async () =>
        metric((await get(n2, '/metrics')).body, 'twill_reconcile_passes_total{result="failed"}') >=
        3,
      { timeoutMs: slowBound(10_000), what: 'three failed passes' },
    );
    expect(
      (await logLines(n2)).filter((l) => l.msg?.startsWith('cannot keep net.ipv4.ip_forward at 1')),
    ).toHaveLength(1);
    // set by hand (as an init container would): the next pass finds it and /readyz recovers
    await c.sh(n2.ns, 'sysctl', '-qw', 'net.ipv4.ip_forward=1');
    await waitFor(async () => (await get(n2, '/readyz')).status === 200, {
      timeoutMs: slowBound(5_000),
      what: 'ready again',
    });
    expect((await logLines(n2)).some((l) => l.msg === 'net.ipv4.ip_forward is 1 again')).toBe(true);
  });

  it('read-only with ip_forward already 1 (a locked-down container on a prepared host): routes, neighbours and masquerade are programmed and repaired, and it is ready', async () => {
    expect(await ipForward(n2)).toBe('1');
    await waitFor(async () => (await get(n2, '/readyz')).status === 200, {
      timeoutMs: slowBound(5_000),
      what: 'n2 ready',
    });
    const peer = (await c.subnetOf(n1)).key.replace('-', '/');
    const gw = peer.split('/')[0] ?? '';
    await c.sh(n2.ns, 'ip', 'route', 'del', peer);
    await c.sh(n2.ns, 'ip', 'neigh', 'del', gw, 'dev', 'twill.1');
    await c.sh(n2.ns, 'iptables', '-t', 'nat', '-F', 'TWILL-POSTRTG');
    await waitFor(
      async () =>
        (await c.sh(n2.ns, 'ip', 'route', 'show', peer)).includes('proto 151') &&
        (await c.sh(n2.ns, 'ip', 'neigh', 'show', 'dev', 'twill.1', 'nud', 'permanent')).includes(
          gw,
        ) &&
        (await c.sh(n2.ns, 'iptables', '-t', 'nat', '-S', 'TWILL-POSTRTG'))
          .split('\n')
          .filter((l) => l.startsWith('-A')).length === 6,
      { timeoutMs: slowBound(2_000), what: 'route, neighbour and masquerade repaired' },
    );
    expect((await get(n2, '/readyz')).status).toBe(200);
  });
});
