// A TCP proxy on loopback that a test can cut (drop every connection and
// refuse new ones), hold (accept new connections and forward nothing: a
// server that never answers) and restore: a broken network between twill
// and its store, without touching the host's links or firewall.
import { createServer, connect, type Socket } from 'node:net';

export interface TcpProxy {
  readonly endpoint: string;
  cut(): void;
  hold(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let open = true;
  let holding = false;
  const server = createServer((client) => {
    if (!open) {
      client.destroy();
      return;
    }
    if (holding) {
      sockets.add(client);
      client.on('close', () => sockets.delete(client));
      client.on('error', () => client.destroy());
      return;
    }
    const upstream = connect(target.port, target.host);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => s.destroy());
    }
    client.pipe(upstream).pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    cut() {
      open = false;
      for (const s of sockets) s.destroy();
    },
    hold() {
      holding = true;
    },
    restore() {
      open = true;
      holding = false;
    },
    async close() {
      open = false;
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}
