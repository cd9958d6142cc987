// The daemon's start-up in nftables mode ("EnableNFTables": true): an nft that lists in JSON is
// required (without the command, with an nft built without JSON, or on a kernel without
// nf_tables, start-up stops, naming the key, what is wrong and what to do), iptables is not asked
// for, and the kernel monitors watch `nft monitor` even where iptables would be legacy.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseNetConfig } from '../../src/config/netconf.ts';
import { runDaemon } from '../../src/daemon.ts';
import { TwillError } from '../../src/errors.ts';
import { CommandError, type LineWatcher, type Runner } from '../../src/exec/runner.ts';
import type { Lease, LeaseStore } from '../../src/lease/types.ts';
import { parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { captureLog } from '../helpers/log.ts';

const IP_ADDR = JSON.stringify([
  {
    ifname: 'eth0',
    mtu: 1500,
    address: '02:fc:00:00:00:01',
    addr_info: [{ family: 'inet', local: '192.0.2.2', prefixlen: 24, scope: 'global' }],
  },
]);

function storeWith(config: string): LeaseStore {
  const never = (): Promise<never> => Promise.reject(new Error('not reached in this test'));
  return {
    description: 'test store',
    getNetworkConfig: async () => parseNetConfig(config),
    acquireLease: async (req): Promise<Lease> => ({
      key: '10.244.7.0-24',
      subnet: parseCidr('10.244.7.0/24', { strict: true }) as Cidr,
      attrs: req.attrs,
      expiresAt: Date.now() + 3_600_000,
      version: '1',
    }),
    renewLease: never,
    reclaimLease: never,
    // the store's watch ends start-up here: what came before it is what this test looks at
    watchLeases: () =>
      new Promise((_r, reject) =>
        setTimeout(() => reject(new Error('store closed by the test')), 200),
      ),
    close: async () => undefined,
  };
}

let dir = '';
beforeAll(async () => (dir = await mkdtemp(join(tmpdir(), 'twill-nftmode-'))));
afterAll(() => rm(dir, { recursive: true, force: true }));

/**
 * The nft command here: `ok`, not installed, built without JSON support, or on a kernel without
 * nf_tables.
 */
type Nft = 'ok' | 'missing' | 'no-json' | 'no-nf-tables';

async function start(o: { nft: Nft; config: string }): Promise<{
  err: unknown;
  calls: string[];
  watched: string[];
}> {
  const calls: string[] = [];
  const watched: string[] = [];
  const runner: Runner = async (file, args) => {
    const cmd = `${file} ${args.join(' ')}`;
    calls.push(cmd);
    // the interface choice's reads (the underlay's addresses; no twill device yet)
    if (file === 'ip' && cmd.endsWith(' addr show')) return { stdout: IP_ADDR, stderr: '' };
    if (file === 'ip' && cmd.includes(' link show')) return { stdout: '[]', stderr: '' };
    const fails = (exitCode: number, stderr: string): never => {
      throw new CommandError({ command: [file, ...args], exitCode, stderr, reason: 'exit code 1' });
    };
    if (file === 'nft' && o.nft === 'no-json' && args[0] === '-j')
      fails(1, 'JSON support not compiled-in\n');
    if (file === 'nft' && o.nft === 'no-nf-tables' && args.includes('list'))
      fails(1, 'Error: Could not process rule: Protocol not supported\n');
    if (cmd === 'nft --version' && o.nft !== 'missing')
      return { stdout: 'nftables v1.0.6', stderr: '' };
    if (cmd === 'nft -j list tables' && o.nft === 'ok')
      return { stdout: '{"nftables": [{"metainfo": {"json_schema_version": 1}}]}', stderr: '' };
    if (cmd === 'iptables --version') return { stdout: 'iptables v1.8.9 (legacy)', stderr: '' };
    throw new CommandError({
      command: [file, ...args],
      exitCode: undefined,
      stderr: '',
      reason: `spawn ${file} ENOENT`,
    });
  };
  const watch: LineWatcher = (file, args, opts) => {
    watched.push(`${file} ${args.join(' ')}`);
    return new Promise((r) => opts.signal.addEventListener('abort', () => r(), { once: true }));
  };
  const err = await runDaemon(
    {
      store: storeWith(o.config),
      runner,
      watch,
      logger: captureLog().logger,
      ensureForwarding: async () => false,
      bridgeNetfilterProblem: async () => undefined,
    },
    {
      nodeName: 'n1',
      iface: { iface: [], ifaceRegex: ['^192\\.0\\.2\\.'], publicIp: undefined },
      subnetFile: join(dir, `subnet-${o.nft}.env`),
      renewMarginMs: 3_600_000,
      ipMasq: true,
      resyncMs: 5_000,
    },
    AbortSignal.timeout(10_000),
  ).catch((e: unknown) => e);
  return { err, calls, watched };
}

const NFT_CONFIG = '{"Network":"10.244.0.0/16","EnableNFTables":true}';

describe('nftables mode start-up', () => {
  it.each([
    ['missing', 'the nft command is not installed: install nftables'],
    ['no-json', 'this nft cannot print JSON'],
    ['no-nf-tables', 'check that the kernel has nf_tables'],
  ] as const)(
    'stops when nft is %s, naming the key, the problem and the fix',
    async (nft, says) => {
      const { err, calls } = await start({ nft, config: NFT_CONFIG });
      expect(err).toBeInstanceOf(TwillError);
      expect((err as TwillError).code).toBe('CONFIG_UNSUPPORTED');
      expect((err as Error).message).toContain('"EnableNFTables" is true, but ');
      expect((err as Error).message).toContain(says);
      expect((err as Error).message).toContain('"EnableNFTables": false');
      // asked once, before anything is written
      expect(calls.filter((c) => c.startsWith('nft '))).toEqual(['nft -j list tables']);
      expect(calls).not.toContain('iptables --version');
    },
  );

  it('asks nft, not iptables, and watches `nft monitor` whatever iptables would be', async () => {
    const { err, calls, watched } = await start({ nft: 'ok', config: NFT_CONFIG });
    expect((err as Error).message).toBe('store closed by the test');
    expect(calls).toContain('nft -j list tables');
    expect(calls).not.toContain('iptables --version');
    expect(watched).toContain('nft monitor');
    // no chain poll: nothing asks iptables or ip6tables for twill's chains
    expect(calls.filter((c) => /^ip6?tables /.test(c))).toEqual([]);
  });

  it('iptables mode with iptables-legacy: polled chains, no nft monitor', async () => {
    const { calls, watched } = await start({
      nft: 'ok',
      config: '{"Network":"10.244.0.0/16"}',
    });
    expect(calls).toContain('iptables --version');
    expect(watched.filter((w) => w.startsWith('nft'))).toEqual([]);
  });
});
