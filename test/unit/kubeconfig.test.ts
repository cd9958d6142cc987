// The kubeconfig and in-cluster config readers: the current context's
// cluster and user, relative paths against the kubeconfig's directory, -data
// fields (which win over their files), the refusals an operator can act on
// (exec and auth-provider users, impersonation, proxy-url, plain http without
// insecure-skip-tls-verify, half a client certificate, two credentials), and
// missing context, cluster and user named with the file.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inClusterTarget, loadKubeConfig, parseKubeconfig } from '../../src/lease/kubeconfig.ts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'twill-kubeconfig-'));
  await writeFile(join(dir, 'ca.pem'), 'CA FROM FILE');
  await writeFile(join(dir, 'client.pem'), 'CERT FROM FILE');
  await writeFile(join(dir, 'client.key'), 'KEY FROM FILE');
  await writeFile(join(dir, 'token'), 'tok-from-file\n');
});
afterAll(() => rm(dir, { recursive: true, force: true }));

const b64 = (s: string): string => Buffer.from(s).toString('base64');

/** A kubeconfig in YAML with one context `c` (cluster `k`, user `u`) and the given entries. */
function yaml(o: { cluster?: string; user?: string; extra?: string; current?: string }): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    `current-context: ${o.current ?? 'c'}`,
    'contexts:',
    '- name: other',
    '  context: {cluster: nowhere, user: nobody}',
    '- name: c',
    '  context:',
    '    cluster: k',
    '    user: u',
    'clusters:',
    '- name: k',
    '  cluster:',
    ...(o.cluster ?? '    server: https://10.0.0.1:6443/').split('\n'),
    'users:',
    '- name: u',
    '  user:',
    ...(o.user ?? '    token: abc').split('\n'),
    ...(o.extra ? o.extra.split('\n') : []),
  ].join('\n');
}

const parse = (text: string): ReturnType<typeof parseKubeconfig> =>
  parseKubeconfig(text, { dir, source: '--kubeconfig-file "/k"' });

function refused(text: string, message: string | RegExp): void {
  expect(() => parse(text)).toThrow(
    expect.objectContaining({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(
        typeof message === 'string'
          ? new RegExp(
              `^--kubeconfig-file "/k": .*${message.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`,
            )
          : message,
      ),
    }),
  );
}

describe('parseKubeconfig', () => {
  it("reads the current context's cluster and user, relative files against the kubeconfig's directory", () => {
    const t = parse(
      yaml({
        cluster: [
          '    server: https://api.example:6443/',
          '    certificate-authority: ca.pem',
          '    tls-server-name: kubernetes.default',
        ].join('\n'),
        user: [
          '    client-certificate: client.pem',
          `    client-key: ${join(dir, 'client.key')}`,
          '    token: "  abc  "',
        ].join('\n'),
      }),
    );
    expect({
      server: t.server,
      ca: t.ca?.toString(),
      cert: t.cert?.toString(),
      key: t.key?.toString(),
      tlsServerName: t.tlsServerName,
      insecure: t.insecure,
      auth: t.auth,
      source: t.source,
    }).toEqual({
      server: 'https://api.example:6443',
      ca: 'CA FROM FILE',
      cert: 'CERT FROM FILE',
      key: 'KEY FROM FILE',
      tlsServerName: 'kubernetes.default',
      insecure: false,
      auth: { kind: 'token', token: 'abc' },
      source: '--kubeconfig-file "/k"',
    });
  });

  it('decodes -data fields (line breaks allowed), which win over their files', () => {
    const t = parse(
      yaml({
        cluster: [
          '    server: https://[fd00::1]:6443',
          `    certificate-authority-data: ${b64('CA DATA')}`,
          '    certificate-authority: ca.pem',
        ].join('\n'),
        user: [
          `    client-certificate-data: "${b64('CERT DATA').slice(0, 4)}\\n${b64('CERT DATA').slice(4)}"`,
          `    client-key-data: ${b64('KEY DATA')}`,
        ].join('\n'),
      }),
    );
    expect([t.server, t.ca?.toString(), t.cert?.toString(), t.key?.toString()]).toEqual([
      'https://[fd00::1]:6443',
      'CA DATA',
      'CERT DATA',
      'KEY DATA',
    ]);
    expect(t.auth).toEqual({ kind: 'none' });
    refused(
      yaml({ user: '    client-key-data: "not base64!"\n    client-certificate: client.pem' }),
      'users["u"].user.client-key-data is not base64',
    );
  });

  it('reads JSON too (YAML holds it), a tokenFile relative to the kubeconfig, and basic auth', () => {
    const json = JSON.stringify({
      'current-context': 'c',
      contexts: [{ name: 'c', context: { cluster: 'k', user: 'u' } }],
      clusters: [
        { name: 'k', cluster: { server: 'https://h:1', 'insecure-skip-tls-verify': true } },
      ],
      users: [{ name: 'u', user: { tokenFile: 'token' } }],
    });
    const t = parse(json);
    expect([t.insecure, t.auth]).toEqual([true, { kind: 'tokenFile', path: join(dir, 'token') }]);
    expect(parse(yaml({ user: '    username: admin\n    password: "s3cret"' })).auth).toEqual({
      kind: 'basic',
      username: 'admin',
      password: 's3cret',
    });
    refused(
      yaml({ user: '    tokenFile: missing-token' }),
      `tokenFile ${join(dir, 'missing-token')}: ENOENT`,
    );
    refused(
      yaml({ user: '    token: abc\n    username: admin\n    password: x' }),
      'has both a token and a username/password',
    );
  });

  it('refuses exec and auth-provider users, impersonation and proxy-url, naming what to do', () => {
    refused(
      yaml({
        user: '    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws',
      }),
      /exec plugin .*which twill does not run; .*token, tokenFile or client certificate/,
    );
    refused(
      yaml({ user: '    auth-provider:\n      name: oidc' }),
      'auth-provider plugin, which twill does not run',
    );
    refused(yaml({ user: '    token: abc\n    as: someone' }), 'users["u"].user.as: impersonation');
    refused(
      yaml({ cluster: '    server: https://h:1\n    proxy-url: http://proxy:3128' }),
      'proxy-url: a proxy is not supported',
    );
  });

  it('names a missing current-context, context, cluster, server or user, and half a client certificate', () => {
    refused(yaml({ current: '""' }), 'no current-context');
    refused(yaml({ current: 'absent' }), 'contexts has no entry named "absent"');
    refused(
      yaml({}).replace('cluster: k\n', 'cluster: gone\n'),
      'clusters has no entry named "gone"',
    );
    refused(yaml({}).replace('user: u\n', 'user: ghost\n'), 'users has no entry named "ghost"');
    refused(
      yaml({ cluster: '    certificate-authority: ca.pem' }),
      'clusters["k"].cluster.server is not set',
    );
    refused(yaml({ cluster: '    server: api:6443' }), 'is not an http(s) URL');
    refused(
      yaml({ cluster: '    server: https://h:1\n    certificate-authority: nope.pem' }),
      `certificate-authority ${join(dir, 'nope.pem')}: ENOENT`,
    );
    refused(yaml({ user: '    client-certificate: client.pem' }), 'without a client-key');
    refused(
      yaml({ cluster: '    server: https://h:1\n    insecure-skip-tls-verify: "yes"' }),
      'must be true or false',
    );
    refused('a: [unclosed', /not YAML/);
    refused('- just a list', 'not a kubeconfig');
    // a context without a user: anonymous
    expect(parse(yaml({}).replace('    user: u\n', '')).auth).toEqual({ kind: 'none' });
  });
});

describe('loadKubeConfig', () => {
  it('refuses a plain http server unless insecure-skip-tls-verify, and lets --kube-api-url replace the server', async () => {
    const file = join(dir, 'http.yaml');
    await writeFile(file, yaml({ cluster: '    server: http://127.0.0.1:8080' }));
    expect(() => loadKubeConfig({ kubeconfigFile: file })).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining(
          'is plain http, where credentials cross the network in clear',
        ),
      }),
    );
    await writeFile(
      file,
      yaml({ cluster: '    server: http://127.0.0.1:8080\n    insecure-skip-tls-verify: true' }),
    );
    expect(loadKubeConfig({ kubeconfigFile: file }).server).toBe('http://127.0.0.1:8080');
    await writeFile(
      file,
      yaml({ cluster: '    server: http://x:1\n    certificate-authority: ca.pem' }),
    );
    const over = loadKubeConfig({ kubeconfigFile: file, apiUrl: 'https://10.9.0.1:6443/' });
    expect([over.server, over.ca?.toString(), over.auth]).toEqual([
      'https://10.9.0.1:6443',
      'CA FROM FILE',
      { kind: 'token', token: 'abc' },
    ]);
  });
});

describe('inClusterTarget', () => {
  it('reads KUBERNETES_SERVICE_HOST/PORT (IPv6 in brackets), the CA and the token file', async () => {
    await writeFile(join(dir, 'ca.crt'), 'SA CA');
    const env = { KUBERNETES_SERVICE_HOST: 'fd00:10:96::1', KUBERNETES_SERVICE_PORT: '443' };
    const t = inClusterTarget(env, { dir, needServer: true });
    expect([t.server, t.ca?.toString(), t.auth, t.insecure]).toEqual([
      'https://[fd00:10:96::1]:443',
      'SA CA',
      { kind: 'tokenFile', path: join(dir, 'token') },
      false,
    ]);
    expect(
      inClusterTarget(
        { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' },
        { dir, needServer: true },
      ).server,
    ).toBe('https://10.96.0.1:443');
  });

  it('names the missing variables (unless --kube-api-url gives the server) and a missing token', () => {
    expect(() =>
      inClusterTarget({ KUBERNETES_SERVICE_PORT: '443' }, { dir, needServer: true }),
    ).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining('KUBERNETES_SERVICE_HOST/PORT are not set'),
      }),
    );
    expect(inClusterTarget({}, { dir, needServer: false }).server).toBe('');
    const empty = join(dir, 'no-such-dir');
    expect(() => inClusterTarget({}, { dir: empty, needServer: false })).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining(`${join(empty, 'token')}: ENOENT`),
      }),
    );
  });
});
