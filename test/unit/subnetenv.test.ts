// Unit tests of subnet.env: flannel's exact text (IPv4 only, dual-stack, IPv6
// only), strict parsing, and the atomic write in a temporary directory.
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TwillError } from '../../src/errors.ts';
import { parseCidr, type Cidr } from '../../src/net/ipv4.ts';
import { parseCidr6, type Cidr6 } from '../../src/net/ipv6.ts';
import {
  parseSubnetEnv,
  readSubnetEnv,
  renderSubnetEnv,
  subnetFamilies,
  writeSubnetEnv,
  type SubnetEnv,
} from '../../src/subnetenv.ts';

function cidr(text: string): Cidr {
  const c = parseCidr(text, { strict: true });
  if (!c) throw new Error(`test setup: ${text} is not a network CIDR`);
  return c;
}

const ENV: SubnetEnv = {
  network: cidr('10.244.0.0/16'),
  subnet: cidr('10.244.3.0/24'),
  mtu: 1450,
  ipMasq: true,
};
const TEXT =
  'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n';

function failure(text: string): TwillError {
  try {
    parseSubnetEnv(text, '/run/twill/subnet.env');
  } catch (err) {
    if (err instanceof TwillError) return err;
    throw err;
  }
  throw new Error(`expected an error, but ${JSON.stringify(text)} was accepted`);
}

describe('renderSubnetEnv', () => {
  it("writes flannel's variables in flannel's order", () => {
    expect(renderSubnetEnv(ENV)).toBe(TEXT);
  });

  it('writes the first host of a small subnet and ipMasq false', () => {
    const env: SubnetEnv = {
      network: cidr('10.1.0.0/28'),
      subnet: cidr('10.1.0.8/30'),
      mtu: 1500,
      ipMasq: false,
    };
    expect(renderSubnetEnv(env)).toBe(
      'FLANNEL_NETWORK=10.1.0.0/28\nFLANNEL_SUBNET=10.1.0.9/30\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n',
    );
  });
});

describe('parseSubnetEnv', () => {
  it('parses the rendered text back', () => {
    expect(parseSubnetEnv(TEXT, 'subnet.env')).toStrictEqual(ENV);
  });

  it('round-trips ipMasq false', () => {
    const env: SubnetEnv = { ...ENV, ipMasq: false, mtu: 9000 };
    expect(parseSubnetEnv(renderSubnetEnv(env), 'subnet.env')).toStrictEqual(env);
  });

  it('skips blank lines, comments and surrounding whitespace, in any order', () => {
    const text =
      '# written by flannel\n\nFLANNEL_IPMASQ=true\n  FLANNEL_MTU=1450  \nFLANNEL_SUBNET=10.244.3.1/24\r\nFLANNEL_NETWORK=10.244.0.0/16';
    expect(parseSubnetEnv(text, 'subnet.env')).toStrictEqual(ENV);
  });

  const without = (name: string): string =>
    TEXT.split('\n')
      .filter((l) => !l.startsWith(name))
      .join('\n');
  const replace = (name: string, value: string): string =>
    TEXT.replace(new RegExp(`${name}=[^\\n]*`), `${name}=${value}`);

  it.each([
    ['FLANNEL_NETWORK missing', without('FLANNEL_NETWORK'), ['FLANNEL_NETWORK', 'missing']],
    ['FLANNEL_SUBNET missing', without('FLANNEL_SUBNET'), ['FLANNEL_SUBNET', 'missing']],
    ['FLANNEL_MTU missing', without('FLANNEL_MTU'), ['FLANNEL_MTU', 'missing']],
    ['FLANNEL_IPMASQ missing', without('FLANNEL_IPMASQ'), ['FLANNEL_IPMASQ', 'missing']],
    [
      'FLANNEL_NETWORK with host bits',
      replace('FLANNEL_NETWORK', '10.244.3.1/16'),
      ['FLANNEL_NETWORK', '10.244.3.1/16'],
    ],
    [
      'FLANNEL_NETWORK not a CIDR',
      replace('FLANNEL_NETWORK', '10.244.0.0'),
      ['FLANNEL_NETWORK', '10.244.0.0'],
    ],
    [
      'FLANNEL_SUBNET not a CIDR',
      replace('FLANNEL_SUBNET', '10.244.3.1'),
      ['FLANNEL_SUBNET', '10.244.3.1'],
    ],
    ['FLANNEL_SUBNET garbage', replace('FLANNEL_SUBNET', 'banana'), ['FLANNEL_SUBNET', 'banana']],
    ['FLANNEL_MTU not a number', replace('FLANNEL_MTU', 'big'), ['FLANNEL_MTU', 'big']],
    ['FLANNEL_MTU too small', replace('FLANNEL_MTU', '67'), ['FLANNEL_MTU', '67']],
    ['FLANNEL_MTU too large', replace('FLANNEL_MTU', '65536'), ['FLANNEL_MTU', '65536']],
    ['FLANNEL_MTU a fraction', replace('FLANNEL_MTU', '1450.5'), ['FLANNEL_MTU', '1450.5']],
    ['FLANNEL_MTU empty', replace('FLANNEL_MTU', ''), ['FLANNEL_MTU']],
    ['FLANNEL_IPMASQ yes', replace('FLANNEL_IPMASQ', 'yes'), ['FLANNEL_IPMASQ', 'yes']],
    ['FLANNEL_IPMASQ True', replace('FLANNEL_IPMASQ', 'True'), ['FLANNEL_IPMASQ', 'True']],
    ['a line without =', `${TEXT}garbage\n`, ['garbage', 'KEY=VALUE']],
    ['a line starting with =', `${TEXT}=1\n`, ['=1', 'KEY=VALUE']],
  ])('%s', (_name, text, parts) => {
    const err = failure(text);
    expect(err.code).toBe('SUBNET_ENV_INVALID');
    expect(err.message).toMatch(/^\/run\/twill\/subnet\.env: /);
    for (const part of parts) expect(err.message).toContain(part);
  });
});

describe('writeSubnetEnv and readSubnetEnv', () => {
  let dir = '';

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'twill-subnetenv-'));
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('writes the exact text, creating missing directories', async () => {
    const path = join(dir, 'run', 'twill', 'subnet.env');
    await writeSubnetEnv(path, ENV);
    expect(await readFile(path, 'utf8')).toBe(TEXT);
    expect(await readSubnetEnv(path)).toStrictEqual(ENV);
  });

  it('leaves no temporary file next to the file', async () => {
    const path = join(dir, 'subnet.env');
    await writeSubnetEnv(path, ENV);
    await writeSubnetEnv(path, { ...ENV, mtu: 1400 });
    expect(await readdir(dir)).toStrictEqual(['subnet.env']);
  });

  it('replaces an existing file', async () => {
    const path = join(dir, 'subnet.env');
    await writeFile(path, 'FLANNEL_NETWORK=10.0.0.0/8\n');
    const env: SubnetEnv = { ...ENV, subnet: cidr('10.244.200.0/24'), ipMasq: false };
    await writeSubnetEnv(path, env);
    expect(await readSubnetEnv(path)).toStrictEqual(env);
  });

  it('reads a missing file as undefined', async () => {
    expect(await readSubnetEnv(join(dir, 'subnet.env'))).toBeUndefined();
    expect(await readSubnetEnv(join(dir, 'no', 'such', 'subnet.env'))).toBeUndefined();
  });

  it('refuses a malformed file, naming the path', async () => {
    const path = join(dir, 'subnet.env');
    await writeFile(path, TEXT.replace('FLANNEL_MTU=1450', 'FLANNEL_MTU=x'));
    const err: unknown = await readSubnetEnv(path).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TwillError);
    expect((err as TwillError).code).toBe('SUBNET_ENV_INVALID');
    expect((err as TwillError).message).toContain(path);
    expect((err as TwillError).message).toContain('FLANNEL_MTU');
  });

  it('fails when the directory cannot be created, leaving nothing behind', async () => {
    const blocker = join(dir, 'file');
    await writeFile(blocker, '');
    await expect(writeSubnetEnv(join(blocker, 'subnet.env'), ENV)).rejects.toMatchObject({
      code: 'EEXIST',
    });
    expect(await readdir(dir)).toStrictEqual(['file']);
  });
});

describe('dual-stack subnet.env (FLANNEL_IPV6_NETWORK, FLANNEL_IPV6_SUBNET)', () => {
  function cidr6(text: string): Cidr6 {
    const c = parseCidr6(text, { strict: true });
    if (!c) throw new Error(`test setup: ${text} is not an IPv6 network CIDR`);
    return c;
  }
  const DUAL: SubnetEnv = {
    ...ENV,
    network6: cidr6('fd00:10:244::/56'),
    subnet6: cidr6('fd00:10:244:3::/64'),
  };
  // what flannel's WriteSubnetFile writes: the IPv6 pair after the IPv4 pair, the subnet as its
  // first host (the bridge's gateway)
  const DUAL_TEXT =
    'FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:3::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n';

  it("writes flannel's exact dual-stack text", () => {
    expect(renderSubnetEnv(DUAL)).toBe(DUAL_TEXT);
  });

  it('writes the canonical first host of a subnet with zero groups', () => {
    const env: SubnetEnv = {
      ...ENV,
      network6: cidr6('2001:db8::/32'),
      subnet6: cidr6('2001:db8:0:1:8000::/65'),
    };
    expect(renderSubnetEnv(env)).toContain(
      'FLANNEL_IPV6_NETWORK=2001:db8::/32\nFLANNEL_IPV6_SUBNET=2001:db8:0:1:8000::1/65\n',
    );
  });

  it('writes no IPv6 lines for an IPv4-only node (null or absent)', () => {
    expect(renderSubnetEnv({ ...ENV, network6: null, subnet6: null })).toBe(TEXT);
  });

  it('parses the dual-stack text back', () => {
    expect(parseSubnetEnv(DUAL_TEXT, '/run/flannel/subnet.env')).toStrictEqual(DUAL);
  });

  it('parses an IPv4-only file without IPv6 keys', () => {
    const env = parseSubnetEnv(TEXT, '/run/flannel/subnet.env');
    expect(env.network6).toBeUndefined();
    expect(env.subnet6).toBeUndefined();
  });

  it.each([
    [
      'only FLANNEL_IPV6_NETWORK',
      DUAL_TEXT.replace('FLANNEL_IPV6_SUBNET=fd00:10:244:3::1/64\n', ''),
      ['FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET', 'together'],
    ],
    [
      'only FLANNEL_IPV6_SUBNET',
      DUAL_TEXT.replace('FLANNEL_IPV6_NETWORK=fd00:10:244::/56\n', ''),
      ['FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET', 'together'],
    ],
    [
      'FLANNEL_IPV6_NETWORK with host bits',
      DUAL_TEXT.replace(
        'FLANNEL_IPV6_NETWORK=fd00:10:244::/56',
        'FLANNEL_IPV6_NETWORK=fd00:10:244::1/56',
      ),
      ['FLANNEL_IPV6_NETWORK', '"fd00:10:244::1/56"'],
    ],
    [
      'FLANNEL_IPV6_NETWORK an IPv4 CIDR',
      DUAL_TEXT.replace('FLANNEL_IPV6_NETWORK=fd00:10:244::/56', 'FLANNEL_IPV6_NETWORK=10.0.0.0/8'),
      ['FLANNEL_IPV6_NETWORK', '"10.0.0.0/8"'],
    ],
    [
      'FLANNEL_IPV6_SUBNET without a prefix',
      DUAL_TEXT.replace(
        'FLANNEL_IPV6_SUBNET=fd00:10:244:3::1/64',
        'FLANNEL_IPV6_SUBNET=fd00:10:244:3::1',
      ),
      ['FLANNEL_IPV6_SUBNET', '"fd00:10:244:3::1"'],
    ],
  ])('refuses %s, naming the file', (_name, text, parts) => {
    const err = failure(text);
    expect(err.code).toBe('SUBNET_ENV_INVALID');
    expect(err.message).toContain('/run/twill/subnet.env');
    for (const part of parts) expect(err.message).toContain(part);
  });
});

describe('IPv6-only subnet.env (EnableIPv4 false: no FLANNEL_NETWORK, FLANNEL_SUBNET)', () => {
  function cidr6(text: string): Cidr6 {
    const c = parseCidr6(text, { strict: true });
    if (!c) throw new Error(`test setup: ${text} is not an IPv6 network CIDR`);
    return c;
  }
  const V6ONLY: SubnetEnv = {
    network: null,
    subnet: null,
    network6: cidr6('fd00:10:244::/56'),
    subnet6: cidr6('fd00:10:244:3::/64'),
    mtu: 1430,
    ipMasq: true,
  };
  // what flannel's WriteSubnetFile writes with EnableIPv4 off: the IPv6 pair, then MTU and IPMASQ
  const V6ONLY_TEXT =
    'FLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:3::1/64\nFLANNEL_MTU=1430\nFLANNEL_IPMASQ=true\n';

  it("writes flannel's exact IPv6-only text", () => {
    expect(renderSubnetEnv(V6ONLY)).toBe(V6ONLY_TEXT);
  });

  it('parses it back with the IPv4 pair null', () => {
    expect(parseSubnetEnv(V6ONLY_TEXT, '/run/flannel/subnet.env')).toStrictEqual(V6ONLY);
  });

  it('writes and reads it atomically', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'twill-subnetenv6-'));
    try {
      const path = join(dir, 'subnet.env');
      await writeSubnetEnv(path, V6ONLY);
      expect(await readFile(path, 'utf8')).toBe(V6ONLY_TEXT);
      expect(await readSubnetEnv(path)).toStrictEqual(V6ONLY);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('tells the families of each kind of node apart', () => {
    expect(subnetFamilies(V6ONLY)).toEqual({
      v4: undefined,
      v6: { network: V6ONLY.network6, subnet: V6ONLY.subnet6 },
    });
    expect(subnetFamilies(ENV)).toEqual({
      v4: { network: ENV.network, subnet: ENV.subnet },
      v6: undefined,
    });
    const dual = { ...ENV, network6: V6ONLY.network6, subnet6: V6ONLY.subnet6 };
    expect(subnetFamilies(dual)).toEqual({
      v4: { network: ENV.network, subnet: ENV.subnet },
      v6: { network: V6ONLY.network6, subnet: V6ONLY.subnet6 },
    });
  });

  it('refuses to render a file that would describe no node, or half the IPv4 pair', () => {
    expect(() => renderSubnetEnv({ ...V6ONLY, network6: null, subnet6: null })).toThrow(
      'neither an IPv4 nor an IPv6 subnet',
    );
    expect(() => renderSubnetEnv({ ...V6ONLY, network: cidr('10.244.0.0/16') })).toThrow(
      'network and subnet must both be set or both be null',
    );
  });

  it.each([
    [
      'neither pair',
      'FLANNEL_MTU=1430\nFLANNEL_IPMASQ=true\n',
      [
        'FLANNEL_NETWORK and FLANNEL_SUBNET (IPv4) are missing',
        'FLANNEL_IPV6_NETWORK',
        'at least one family',
      ],
    ],
    ['an empty file', '', ['at least one family']],
    [
      'FLANNEL_NETWORK without FLANNEL_SUBNET beside the IPv6 pair',
      `FLANNEL_NETWORK=10.244.0.0/16\n${V6ONLY_TEXT}`,
      ['FLANNEL_SUBNET is missing', 'FLANNEL_NETWORK and FLANNEL_SUBNET must be given together'],
    ],
    [
      'FLANNEL_SUBNET without FLANNEL_NETWORK beside the IPv6 pair',
      `FLANNEL_SUBNET=10.244.3.1/24\n${V6ONLY_TEXT}`,
      ['FLANNEL_NETWORK is missing', 'FLANNEL_NETWORK and FLANNEL_SUBNET must be given together'],
    ],
    [
      'only FLANNEL_IPV6_SUBNET',
      V6ONLY_TEXT.replace('FLANNEL_IPV6_NETWORK=fd00:10:244::/56\n', ''),
      [
        'FLANNEL_IPV6_NETWORK is missing',
        'FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET must be given together',
      ],
    ],
    ['no FLANNEL_MTU', V6ONLY_TEXT.replace('FLANNEL_MTU=1430\n', ''), ['FLANNEL_MTU is missing']],
  ])('refuses %s, naming the file', (_name, text, parts) => {
    const err = failure(text);
    expect(err.code).toBe('SUBNET_ENV_INVALID');
    expect(err.message).toMatch(/^\/run\/twill\/subnet\.env: /);
    for (const part of parts) expect(err.message).toContain(part);
  });
});
