// The daemon's lease keeping on the in-memory store: when another node holds
// our subnet after our key vanished, runDaemon fails with LEASE_TAKEN (the
// CLI turns that into exit code 1); while the store is down the peer set is
// kept and renewal is retried.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeLeaseValue } from '../../src/lease/codec.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import { startTestDaemon, type TestNode } from '../helpers/daemon.ts';
import { waitFor } from '../../lab/kit/wait.ts';
import { vxlanAttrs } from './lease-store.ts';

let dir: string;
beforeAll(async () => (dir = await mkdtemp(join(tmpdir(), 'twill-mem-'))));
afterAll(() => rm(dir, { recursive: true, force: true }));

function start(kv: MemoryKv, ttlSeconds?: number): Promise<TestNode> {
  const store = new KvLeaseStore({ kv, prefix: '/n', ...(ttlSeconds ? { ttlSeconds } : {}) });
  return startTestDaemon({
    store,
    nodeName: 'm1',
    publicIp: '192.0.2.1',
    subnetFile: join(dir, 'subnet.env'),
    ipMasq: true,
  });
}

describe('daemon on the memory store', () => {
  it('takes the subnet recorded in subnet.env when nobody holds it', async () => {
    const kv = new MemoryKv();
    kv.putRaw('/n/config', '{"Network":"10.50.0.0/16"}');
    await writeFile(
      join(dir, 'subnet.env'),
      'FLANNEL_NETWORK=10.50.0.0/16\nFLANNEL_SUBNET=10.50.123.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n',
    );
    const d = await start(kv);
    await waitFor(() => d.state() !== undefined, { timeoutMs: 5000, what: 'lease' });
    expect(d.state()?.lease.key).toBe('10.50.123.0-24');
    await d.stop();
    await kv.close();
  });

  it('fails with LEASE_TAKEN when another node took our subnet', async () => {
    const kv = new MemoryKv();
    kv.putRaw('/n/config', '{"Network":"10.50.0.0/16"}');
    const d = await start(kv);
    await waitFor(() => d.state() !== undefined, { timeoutMs: 5000, what: 'lease' });
    expect(await readFile(join(dir, 'subnet.env'), 'utf8')).toContain('FLANNEL_IPMASQ=true');
    const key = `/n/subnets/${d.state()?.lease.key}`;
    kv.deleteRaw(key); // the delete event and the foreign put race, as in real life
    kv.putRaw(key, encodeLeaseValue(vxlanAttrs(77)));
    await expect(d.done).rejects.toMatchObject({
      code: 'LEASE_TAKEN',
      message: expect.stringContaining('held by node 192.0.2.77'),
    });
    await kv.close();
  });

  it('keeps its peers while the store is down and renews once it is back', async () => {
    const kv = new MemoryKv();
    kv.putRaw('/n/config', '{"Network":"10.50.0.0/16"}');
    kv.putRaw('/n/subnets/10.50.9.0-24', encodeLeaseValue(vxlanAttrs(9)));
    const d = await start(kv, 4); // renewal at half-life (2 s), well before expiry
    await waitFor(() => d.state()?.peers.length === 1, { timeoutMs: 5000, what: 'peer' });
    kv.setDown(true);
    await waitFor(() => d.log.lines.some((l) => l.msg === 'renewal failed; retrying'), {
      timeoutMs: 5000,
      what: 'failed renewal',
    });
    expect(d.state()?.peers.map((p) => p.key)).toEqual(['10.50.9.0-24']);
    kv.setDown(false);
    const renewedAfter = d.log.lines.length;
    await waitFor(() => d.log.lines.slice(renewedAfter).some((l) => l.msg === 'lease renewed'), {
      timeoutMs: 5000,
      what: 'renewal after outage',
    });
    await d.stop();
    await kv.close();
  });
});
