// The IP store's file operations (store.ts, lock.ts): node:fs/promises' calls as the store uses
// them, done synchronously and handed back as settled promises. A plugin call is one process
// doing one thing at a time, and the store's dozen or so operations per ADD otherwise each make a
// round trip through libuv's thread pool and back to the event loop (about 3 ms of an ADD's wall
// time on a busy node, against well under 1 ms this way). Errors are the same (with their
// `code`), as rejections; waiting for the lock still yields (lock.ts pauses between tries).
import {
  linkSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
  type Stats,
  type WriteFileOptions,
} from 'node:fs';

/** fn's value, or what it throws, as a settled promise (async only for that). */
async function settled<T>(fn: () => T): Promise<T> {
  return fn();
}

export const link = (existing: string, name: string): Promise<void> =>
  settled(() => linkSync(existing, name));

export const mkdir = (dir: string, o: { recursive: true }): Promise<string | undefined> =>
  settled(() => mkdirSync(dir, o));

export const readdir = (dir: string): Promise<string[]> => settled(() => readdirSync(dir));

export const readFile = (file: string, encoding: 'utf8'): Promise<string> =>
  settled(() => readFileSync(file, encoding));

export const readlink = (path: string): Promise<string> => settled(() => readlinkSync(path));

export const rename = (from: string, to: string): Promise<void> =>
  settled(() => renameSync(from, to));

export const stat = (path: string): Promise<Stats> => settled(() => statSync(path));

export const unlink = (path: string): Promise<void> => settled(() => unlinkSync(path));

export const writeFile = (file: string, text: string, o: WriteFileOptions): Promise<void> =>
  settled(() => writeFileSync(file, text, o));

/** The operations together, as the store and its lock take them (a test may wrap some). */
export const FILES = { link, mkdir, readdir, readFile, readlink, rename, stat, unlink, writeFile };
export type Files = typeof FILES;
