// The socket under an HTTP/2 connection: TCP, or TLS with ALPN h2 for https:// endpoints.
// node:tls is loaded only when a TLS connection is dialed, with process.getBuiltinModule, so
// neither Node nor the bundle (scripts/build-daemon.ts) loads it for plain http:// endpoints.
import * as net from 'node:net';

export interface DialOptions {
  /** a host name or IP address (no brackets) */
  readonly host: string;
  readonly port: number;
  /** TLS, with ALPN h2, when given (an empty object: Node's system roots, no client cert) */
  readonly tls?: { ca?: Buffer | undefined; cert?: Buffer | undefined; key?: Buffer | undefined };
}

/** The socket: TCP, or TLS with ALPN h2; `fail` hears of a server that does not agree to h2. */
export function dial(opts: DialOptions, fail: (err: Error) => void): net.Socket {
  if (!opts.tls) return net.connect({ host: opts.host, port: opts.port });
  const tls = process.getBuiltinModule('node:tls');
  const sock = tls.connect({
    host: opts.host,
    port: opts.port,
    ALPNProtocols: ['h2'],
    // SNI takes host names only
    ...(net.isIP(opts.host) ? {} : { servername: opts.host }),
    ...(opts.tls.ca ? { ca: opts.tls.ca } : {}),
    ...(opts.tls.cert ? { cert: opts.tls.cert } : {}),
    ...(opts.tls.key ? { key: opts.tls.key } : {}),
  });
  sock.once('secureConnect', () => {
    if (sock.alpnProtocol !== 'h2')
      fail(
        new Error(
          `the server did not agree to HTTP/2 in the TLS handshake (ALPN ${JSON.stringify(sock.alpnProtocol)})`,
        ),
      );
  });
  return sock;
}
