// freePort: one process never gets the same port twice, though the kernel may offer it again
// once released (etcd's client and peer ports, a three-member cluster's six, asked in a row).
import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { freePort } from '../../lab/kit/ports.ts';

describe('freePort', () => {
  it('hands out 300 distinct ports, each one free to bind', async () => {
    const ports: number[] = [];
    for (let i = 0; i < 300; i++) ports.push(await freePort());
    expect(new Set(ports).size).toBe(300);
    const last = ports.at(-1) ?? 0;
    await new Promise<void>((resolve, reject) => {
      const srv = createServer();
      srv.once('error', reject);
      srv.listen(last, '127.0.0.1', () => srv.close(() => resolve()));
    });
  });
});
