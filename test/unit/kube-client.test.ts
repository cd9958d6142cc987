// The Kubernetes API client against a misbehaving server (a real HTTP
// server in this process, spoken to over http://): what a real apiserver
// does not do on demand. Oversized and unreadable replies end the call or
// the watch, a silent server times a call out, error statuses are
// classified with the Status message, a list starts from the watch cache
// and follows a paging server, an expired continue token restarts the
// list, a 410 watch reply is 'gone', and a 401 re-reads a rotated token
// file and tries once more.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClientKubeApi } from '../../src/lease/kube-api.ts';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
let handler: Handler = (_req, res) => res.end();
let server: Server;
let dir: string;
let kubeconfig: string;
const seen: string[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''}`);
    handler(req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  dir = await mkdtemp(join(tmpdir(), 'twill-kube-client-'));
  await writeFile(join(dir, 'token'), 'old');
  kubeconfig = join(dir, 'kubeconfig');
  await writeFile(
    kubeconfig,
    JSON.stringify({
      'current-context': 'c',
      contexts: [{ name: 'c', context: { cluster: 'k', user: 'u' } }],
      clusters: [
        {
          name: 'k',
          cluster: { server: `http://127.0.0.1:${port}`, 'insecure-skip-tls-verify': true },
        },
      ],
      users: [{ name: 'u', user: { tokenFile: 'token' } }],
    }),
  );
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  await rm(dir, { recursive: true, force: true });
});

const signal = new AbortController().signal;
const api = (callTimeoutMs = 2_000, listPageSize?: number): ClientKubeApi =>
  new ClientKubeApi({ kubeconfigFile: kubeconfig, callTimeoutMs, listPageSize });
const node = (name: string): unknown => ({
  metadata: { name, resourceVersion: '7' },
  spec: { podCIDR: '10.244.1.0/24' },
});
const json = (res: ServerResponse, status: number, body: unknown): void => {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
};
const watchOnce = (a: ClientKubeApi): ReturnType<ClientKubeApi['watchNodes']> =>
  a.watchNodes({ resourceVersion: '5', timeoutSeconds: 5, signal, onEvent: () => undefined });

describe('ClientKubeApi against a misbehaving server', () => {
  it("classifies error statuses with the apiserver's Status message", async () => {
    handler = (_req, res) =>
      json(res, 500, { kind: 'Status', message: 'etcdserver: leader changed' });
    await expect(api().readNode('n1', signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringMatching(/: get node n1: HTTP 500 etcdserver: leader changed$/),
    });
    handler = (_req, res) => json(res, 422, { message: 'metadata.annotations: Invalid value' });
    await expect(api().patchNodeStatus('n1', {}, signal)).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('HTTP 422 metadata.annotations: Invalid value'),
    });
    handler = (_req, res) => json(res, 403, { message: 'nodes "n1" is forbidden' });
    await expect(api().readNode('n1', signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringMatching(/HTTP 403 nodes "n1" is forbidden; twill needs nodes get/),
    });
    handler = (_req, res) => json(res, 404, { message: 'not found' });
    expect(await api().readNode('n1', signal)).toBeUndefined();
  });

  it('bounds replies: an oversized or unreadable one fails the call, a silent server times it out', async () => {
    handler = (_req, res) => {
      res.writeHead(200, { 'Content-Length': String(5 * 1024 * 1024) });
      res.end(Buffer.alloc(5 * 1024 * 1024, 0x20));
    };
    await expect(api().readNode('n1', signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('the reply is larger than 4194304 bytes'),
    });
    handler = (_req, res) => {
      // chunked, no length announced: counted as it arrives
      res.writeHead(200);
      for (let i = 0; i < 5; i++) res.write(Buffer.alloc(1024 * 1024, 0x20));
      res.end();
    };
    await expect(api().readNode('n1', signal)).rejects.toMatchObject({
      message: expect.stringContaining('the reply is larger than 4194304 bytes'),
    });
    handler = (_req, res) => res.end('<html>proxy error</html>');
    await expect(api().readNode('n1', signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('the reply is not JSON: "<html>proxy error</html>"'),
    });
    // a list is read item by item: an unreadable reply, or one Node over the bound, fails it
    handler = (_req, res) => res.end('<html>proxy error</html>');
    await expect(api().listNodes(signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('the reply is not a JSON list: "<html>proxy error</html>"'),
    });
    handler = (_req, res) =>
      json(res, 200, {
        metadata: { resourceVersion: '3' },
        items: [node('a'), { metadata: { name: 'b', pad: 'x'.repeat(5 * 1024 * 1024) } }],
      });
    await expect(api().listNodes(signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('a list item is larger than 4194304 bytes'),
    });
    handler = () => undefined;
    const t0 = Date.now();
    await expect(api(300).listNodes(signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringMatching(/: list nodes: no reply within 300 ms$/),
    });
    expect(Date.now() - t0).toBeLessThan(2_000);
    // headers in time, the body never finished
    handler = (_req, res) => (res.writeHead(200), res.write('{"metadata":'));
    await expect(api(300).readNode('n1', signal)).rejects.toMatchObject({
      message: expect.stringMatching(/: get node n1: no reply within 300 ms$/),
    });
  });

  it('lists in pages and starts again when a continue token expired (410)', async () => {
    let expire = 1;
    handler = (req, res) => {
      const q = new URL(req.url ?? '', 'http://x').searchParams;
      expect(q.get('limit')).toBe('2');
      const cont = q.get('continue');
      // the first page from the watch cache; a continue token carries its own resourceVersion
      expect(q.get('resourceVersion')).toBe(cont === null ? '0' : null);
      if (cont === null)
        return json(res, 200, {
          metadata: { resourceVersion: '10', continue: 'c1' },
          items: [node('a'), node('b')],
        });
      if (cont === 'c1' && expire-- > 0)
        return json(res, 410, { reason: 'Expired', message: 'continue parameter is too old' });
      return json(res, 200, { metadata: { resourceVersion: '10' }, items: [node('c'), {}] });
    };
    seen.length = 0;
    const listing = await api(2_000, 2).listNodes(signal);
    expect([listing.nodes.map((n) => n.name), listing.resourceVersion]).toEqual([
      ['a', 'b', 'c'],
      '10',
    ]);
    expect(seen.map((s) => s.split(' ')[1])).toEqual([
      '/api/v1/nodes?resourceVersion=0&limit=2',
      '/api/v1/nodes?limit=2&continue=c1',
      '/api/v1/nodes?resourceVersion=0&limit=2',
      '/api/v1/nodes?limit=2&continue=c1',
    ]);
  });

  it('ends a watch on an oversized or unreadable event line, and on a 410 reply as gone', async () => {
    handler = (_req, res) => {
      res.writeHead(200);
      res.write(`${JSON.stringify({ type: 'ADDED', object: node('a') })}\n`);
      res.write(Buffer.alloc(5 * 1024 * 1024, 0x61));
    };
    const events: string[] = [];
    const end = await api().watchNodes({
      resourceVersion: '5',
      timeoutSeconds: 5,
      signal,
      onEvent: (ev) =>
        events.push(ev.type === 'bookmark' ? 'bookmark' : `${ev.type} ${ev.node.name}`),
    });
    expect(end).toMatchObject({
      reason: 'failed',
      detail: expect.stringContaining('a watch event longer than 4194304 bytes'),
    });
    expect(events).toEqual(['put a']);
    handler = (_req, res) => {
      res.writeHead(200);
      res.write('{"type":"ADDED","obj\n');
    };
    expect(await watchOnce(api())).toMatchObject({
      reason: 'failed',
      detail: expect.stringContaining('a watch event is not JSON'),
    });
    handler = (_req, res) => json(res, 410, { message: 'too old resource version: 5 (90)' });
    expect(await watchOnce(api())).toMatchObject({
      reason: 'gone',
      detail: expect.stringContaining('HTTP 410 too old resource version'),
    });
    handler = (_req, res) => {
      res.writeHead(200);
      res.end(
        `${JSON.stringify({ type: 'BOOKMARK', object: { metadata: { resourceVersion: '9' } } })}\n`,
      );
    };
    expect(await watchOnce(api())).toEqual({ reason: 'closed' });
  });

  it('re-reads a rotated token file on a 401 and tries once more', async () => {
    handler = (req, res) =>
      req.headers.authorization === 'Bearer new'
        ? json(res, 200, node('n1'))
        : json(res, 401, { message: 'Unauthorized' });
    const a = api();
    seen.length = 0;
    await expect(a.readNode('n1', signal)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('HTTP 401 Unauthorized'),
    });
    // the same token twice: not sent a third time
    expect(seen.map((s) => s.split(' ').at(-1))).toEqual(['old']);
    await writeFile(join(dir, 'token'), 'new\n');
    seen.length = 0;
    expect((await a.readNode('n1', signal))?.name).toBe('n1');
    expect(seen.map((s) => s.split(' ').at(-1))).toEqual(['old', 'new']);
    await writeFile(join(dir, 'token'), 'old');
  });
});
