// Free TCP ports on loopback, for servers the tests and the bench start
// (etcd's peer port, kube-apiservers, proxies). A port is free when asked
// for and is released at once, so the kernel may hand the same one out again
// before the server that wanted it binds it: one process never gets the same
// port twice (etcd's client and peer ports, a cluster's six), and the rest is
// left to the kernel's choice among some 28,000.
import { createServer } from 'node:net';

const given = new Set<number>();

function anyFreePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = await anyFreePort();
    if (!given.has(port)) {
      given.add(port);
      return port;
    }
  }
  throw new Error('freePort: the kernel kept handing out ports this process was given already');
}
