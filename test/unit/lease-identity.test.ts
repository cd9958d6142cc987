// Two live nodes never share one subnet (issue 14, identity): a lease names
// its node (`TwillNode`, a key flannel ignores), so a second node with the
// same PublicIP (behind one NAT address, or started with another node's
// --public-ip) is refused with IDENTITY_CONFLICT naming both, while the same
// node restarting gets its own subnet back, and a lease flannel wrote (no
// TwillNode) is still taken over by PublicIP, as a node moving from flannel
// needs.
import { describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { decodeLeaseValue, encodeLeaseValue } from '../../src/lease/codec.ts';
import { KvLeaseStore } from '../../src/lease/kv-store.ts';
import { MemoryKv } from '../../src/lease/memory-kv.ts';
import type { LeaseAttrs } from '../../src/lease/types.ts';

const CONFIG = parseNetConfig('{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}');
const ATTRS: LeaseAttrs = {
  publicIp: '192.0.2.7',
  publicIpv6: null,
  backendType: 'host-gw',
  backendData: null,
};

function store(kv: MemoryKv): KvLeaseStore {
  return new KvLeaseStore({ kv, prefix: '/id' });
}

describe('lease identity', () => {
  it('records the node with the lease, in JSON flannel still reads', async () => {
    const kv = new MemoryKv();
    const lease = await store(kv).acquireLease(
      { config: CONFIG, attrs: ATTRS, previous: undefined, nodeName: 'a' },
      AbortSignal.timeout(5_000),
    );
    const raw = (await kv.get(`/id/subnets/${lease.key}`))?.value ?? '';
    expect(JSON.parse(raw)).toEqual({
      PublicIP: '192.0.2.7',
      PublicIPv6: null,
      BackendType: 'host-gw',
      TwillNode: 'a',
    });
    expect(decodeLeaseValue(raw).node).toBe('a');
    expect(() =>
      decodeLeaseValue('{"PublicIP":"192.0.2.7","BackendType":"host-gw","TwillNode":7}'),
    ).toThrow(/TwillNode/);
  });

  it('refuses a second live node with the same PublicIP, naming both; the same node gets its subnet back', async () => {
    const kv = new MemoryKv();
    const a = await store(kv).acquireLease(
      { config: CONFIG, attrs: ATTRS, previous: undefined, nodeName: 'node-a' },
      AbortSignal.timeout(5_000),
    );
    const b = store(kv).acquireLease(
      { config: CONFIG, attrs: ATTRS, previous: undefined, nodeName: 'node-b' },
      AbortSignal.timeout(5_000),
    );
    await expect(b).rejects.toMatchObject({
      code: 'IDENTITY_CONFLICT',
      message: expect.stringMatching(
        /PublicIP 192\.0\.2\.7 is already held by live node node-a .*node-b/,
      ),
    });
    // node-a's lease is untouched
    expect(decodeLeaseValue((await kv.get(`/id/subnets/${a.key}`))?.value ?? '').node).toBe(
      'node-a',
    );
    const again = await store(kv).acquireLease(
      { config: CONFIG, attrs: ATTRS, previous: undefined, nodeName: 'node-a' },
      AbortSignal.timeout(5_000),
    );
    expect(a.subnet).not.toBeNull();
    expect(again.subnet).toStrictEqual(a.subnet);
  });

  it('takes over a lease flannel wrote (no TwillNode) by its PublicIP, and names itself in it', async () => {
    const kv = new MemoryKv();
    kv.putRaw('/id/subnets/10.244.42.0-24', encodeLeaseValue(ATTRS));
    const lease = await store(kv).acquireLease(
      { config: CONFIG, attrs: ATTRS, previous: undefined, nodeName: 'moved-from-flannel' },
      AbortSignal.timeout(5_000),
    );
    expect(lease.key).toBe('10.244.42.0-24');
    expect(decodeLeaseValue((await kv.get('/id/subnets/10.244.42.0-24'))?.value ?? '').node).toBe(
      'moved-from-flannel',
    );
  });

  it('a renewal finds another node in its key and says so (LEASE_TAKEN), never writes over it', async () => {
    const kv = new MemoryKv();
    const s = store(kv);
    const a = await s.acquireLease(
      { config: CONFIG, attrs: ATTRS, previous: undefined, nodeName: 'node-a' },
      AbortSignal.timeout(5_000),
    );
    kv.putRaw(`/id/subnets/${a.key}`, encodeLeaseValue({ ...ATTRS, node: 'intruder' }));
    await expect(s.renewLease(a, AbortSignal.timeout(5_000))).rejects.toMatchObject({
      code: 'LEASE_TAKEN',
      message: expect.stringContaining('intruder'),
    });
    expect(decodeLeaseValue((await kv.get(`/id/subnets/${a.key}`))?.value ?? '').node).toBe(
      'intruder',
    );
  });
});
