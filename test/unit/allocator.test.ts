// src/cli/allocator.ts: our own preload leaves the environment children
// inherit, anyone else's stays; the allocator is read from a maps text.
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ALLOCATOR_ENV,
  allocatorIn,
  dropOwnPreload,
  OWN_MALLOC_CONF,
  OWN_PRELOAD,
} from '../../src/cli/allocator.ts';

describe('dropOwnPreload', () => {
  it('takes out our preload and its MALLOC_CONF, and says it was there', () => {
    const env = { ...ALLOCATOR_ENV, PATH: '/bin' };
    expect(dropOwnPreload(env)).toBe(true);
    expect(env).toEqual({ PATH: '/bin' });
  });

  it('takes out a preload of jemalloc by its path too', () => {
    const env = {
      LD_PRELOAD: `/usr/lib/x86_64-linux-gnu/${OWN_PRELOAD}`,
      MALLOC_CONF: OWN_MALLOC_CONF,
    };
    expect(dropOwnPreload(env)).toBe(true);
    expect(env).toEqual({});
  });

  it('keeps a MALLOC_CONF that is not ours, and any other preload with everything else', () => {
    const mine = { LD_PRELOAD: OWN_PRELOAD, MALLOC_CONF: 'narenas:4' };
    expect(dropOwnPreload(mine)).toBe(true);
    expect(mine).toEqual({ MALLOC_CONF: 'narenas:4' });
    const theirs = { LD_PRELOAD: 'libfaketime.so.1', MALLOC_CONF: OWN_MALLOC_CONF };
    expect(dropOwnPreload(theirs)).toBe(false);
    expect(theirs).toEqual({ LD_PRELOAD: 'libfaketime.so.1', MALLOC_CONF: OWN_MALLOC_CONF });
    // jemalloc among other libraries: the operator's list, left whole
    const several = { LD_PRELOAD: `libfaketime.so.1 ${OWN_PRELOAD}` };
    expect(dropOwnPreload(several)).toBe(false);
    expect(several).toEqual({ LD_PRELOAD: `libfaketime.so.1 ${OWN_PRELOAD}` });
    const none = { PATH: '/bin' };
    expect(dropOwnPreload(none)).toBe(false);
    expect(none).toEqual({ PATH: '/bin' });
  });
});

describe('allocatorIn', () => {
  const line = (path: string): string =>
    `7f0000000000-7f0000001000 r-xp 00000000 08:01 1234    ${path}`;
  it('jemalloc when its library is mapped, glibc otherwise', () => {
    const base = [line('/usr/bin/node'), line('/usr/lib/x86_64-linux-gnu/libc.so.6')];
    expect(
      allocatorIn([...base, line('/usr/lib/x86_64-linux-gnu/libjemalloc.so.2')].join('\n')),
    ).toBe('jemalloc');
    expect(allocatorIn(base.join('\n'))).toBe('glibc');
    // a file that only mentions it elsewhere in its path is not the library
    expect(allocatorIn([...base, line('/tmp/libjemalloc.so.2.notes/x')].join('\n'))).toBe('glibc');
  });
});

describe('ALLOCATOR_ENV where it is written out by hand', () => {
  const root = resolve(import.meta.dirname, '../..');
  const line = Object.entries(ALLOCATOR_ENV)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
  it.each([['Dockerfile'], ['lab/vagrant/node.sh'], ['docs/lab.md']])(
    '%s says the same',
    async (file) => {
      expect(await readFile(resolve(root, file), 'utf8')).toContain(line);
    },
  );
});
