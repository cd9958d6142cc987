// The build's warm-up of the etcd client (warm-up.ts): its calls as a start makes them (a paged
// listing, a get, a lease grant and a create, a watch that reports a change) against an HTTP/2
// server on loopback that answers each call with a canned reply, as etcd would on an empty
// cluster with `peers` leases. It knows nothing of etcd but the replies' shapes: it never reads a
// request. Only the build runs it.
import type { ServerHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { frame } from '../lease/etcd-grpc.ts';
import { EtcdKv } from '../lease/etcd-kv.ts';
import { ProtoWriter } from '../lease/etcd-proto.ts';

const REVISION = 1_000;

function header(): Buffer {
  return new ProtoWriter().varint(1, 1).varint(2, 1).varint(3, REVISION).varint(4, 2).finish();
}

function keyValue(key: string, value: string, revision: number): Buffer {
  return new ProtoWriter()
    .bytes(1, key)
    .varint(2, revision)
    .varint(3, revision)
    .varint(4, 1)
    .bytes(5, value)
    .varint(6, 7)
    .finish();
}

/** The canned replies by gRPC path: a listing of `leases` (key, value), a grant, a created key. */
function replies(leases: readonly (readonly [string, string])[]): Map<string, Buffer> {
  const range = new ProtoWriter().message(1, header());
  leases.forEach(([k, v], i) => range.message(2, keyValue(k, v, i + 2)));
  range.varint(4, leases.length);
  const [first] = leases;
  const put = new ProtoWriter().message(1, header()).finish();
  return new Map([
    ['/etcdserverpb.KV/Range', range.finish()],
    [
      '/etcdserverpb.Lease/LeaseGrant',
      new ProtoWriter().message(1, header()).varint(2, 7).varint(3, 86_400).finish(),
    ],
    [
      '/etcdserverpb.KV/Txn',
      new ProtoWriter()
        .message(1, header())
        .varint(2, true)
        .message(3, new ProtoWriter().message(2, put).finish())
        .finish(),
    ],
    // the watch: created, then one event (a put of the first lease)
    [
      '/etcdserverpb.Watch/Watch',
      Buffer.concat([
        frame(new ProtoWriter().message(1, header()).varint(2, 1).varint(3, true).finish()),
        frame(
          new ProtoWriter()
            .message(1, header())
            .varint(2, 1)
            .message(
              11,
              new ProtoWriter()
                .message(2, keyValue(first?.[0] ?? 'k', first?.[1] ?? '', REVISION))
                .finish(),
            )
            .finish(),
        ),
      ]),
    ],
  ]);
}

function answer(stream: ServerHttp2Stream, path: string, canned: Map<string, Buffer>): void {
  const reply = canned.get(path) ?? new ProtoWriter().message(1, header()).finish();
  stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
  if (path.endsWith('/Watch')) {
    // a watch stays open: its replies, then nothing until the client goes
    stream.write(reply);
    stream.on('data', () => undefined);
    return;
  }
  stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
  stream.on('data', () => undefined);
  stream.on('end', () => stream.end(frame(reply)));
}

/** Runs the etcd client's calls against the canned server, with `leases` under `prefix`. */
export async function warmEtcdClient(
  prefix: string,
  leases: readonly (readonly [string, string])[],
): Promise<void> {
  const http2 = await import('node:http2');
  const canned = replies(leases.map(([k, v]) => [`${prefix}/subnets/${k}`, v] as const));
  const server = http2.createServer();
  server.on('stream', (stream, headers) => answer(stream, String(headers[':path']), canned));
  server.on('error', () => undefined);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const kv = await EtcdKv.connect({
    endpoints: [`http://127.0.0.1:${port}`],
    callTimeoutMs: 5_000,
  });
  const ctl = new AbortController();
  const { signal } = ctl;
  const timer = setTimeout(() => ctl.abort(new Error('the etcd warm-up took over 20 s')), 20_000);
  try {
    await kv.list(`${prefix}/subnets/`, signal);
    await kv.get(`${prefix}/config`, signal);
    await kv.create(`${prefix}/subnets/10.244.250.0-24`, '{}', 86_400, signal);
    const watching = new AbortController();
    const changed = Promise.withResolvers<void>();
    const watch = kv.watch(`${prefix}/subnets/`, {
      fromRevision: 2n,
      signal: AbortSignal.any([signal, watching.signal]),
      onChanges: () => changed.resolve(),
      onConnectivity: () => undefined,
    });
    await Promise.race([changed.promise, watch]);
    watching.abort();
    await watch;
    signal.throwIfAborted();
  } finally {
    clearTimeout(timer);
    await kv.close();
    await new Promise((resolve) => server.close(resolve));
  }
}
