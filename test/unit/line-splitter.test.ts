// The monitors' byte-level prefilter: lines come out whole whatever the
// chunking, only lines holding a needle are decoded, and every line the
// monitors' own filters care about holds one of their needles.
import { describe, expect, it } from 'vitest';
import {
  ipEventMatters,
  ipNeedles,
  NFT_NEEDLES,
  nftEventMatters,
} from '../../src/dataplane/monitor.ts';
import { lineSplitter } from '../../src/exec/runner.ts';

function feed(text: string, chunk: number, needles?: string[]): string[] {
  const lines: string[] = [];
  const split = lineSplitter(needles, (l) => lines.push(l));
  const bytes = Buffer.from(text);
  for (let i = 0; i < bytes.length; i += chunk) split(bytes.subarray(i, i + chunk));
  return lines;
}

const NFT = [
  'add rule ip nat KUBE-SVC-AAAA counter jump KUBE-SEP-BBBB',
  'delete rule ip nat TWILL-POSTRTG handle 7',
  'add rule ip nat KUBE-POSTROUTING counter return',
  'delete rule ip nat POSTROUTING handle 4',
  'flush ruleset',
  'delete table ip nat',
  '',
].join('\n');

describe('lineSplitter', () => {
  it('gives whole lines whatever the chunk size, and keeps a partial line for the next chunk', () => {
    for (const size of [1, 3, 7, 64, 4096])
      expect(feed(NFT, size)).toEqual(NFT.split('\n').slice(0, -1));
    expect(feed('no newline yet', 4)).toEqual([]);
  });

  it('passes only lines holding a needle, also when a needle straddles two chunks', () => {
    for (const size of [1, 5, 11, 4096]) {
      expect(feed(NFT, size, NFT_NEEDLES)).toEqual([
        'delete rule ip nat TWILL-POSTRTG handle 7',
        'delete rule ip nat POSTROUTING handle 4',
        'flush ruleset',
        'delete table ip nat',
      ]);
    }
  });

  it('skips a flood of irrelevant lines without decoding them into lines', () => {
    const flood =
      Array.from(
        { length: 20_000 },
        (_, i) => `add rule ip nat KUBE-SEP-${i} counter dnat to 10.0.0.${i % 250}:80`,
      ).join('\n') + '\n';
    expect(feed(flood, 65_536, NFT_NEEDLES)).toEqual([]);
  });

  it('every line the monitor filters accept holds one of their needles', () => {
    const ctx = { underlay: 'eth0' };
    const ipLines = [
      'Deleted 10.244.7.0/24 via 10.123.0.9 dev eth0 proto 151 ',
      '10.244.1.0 dev twill.1 lladdr 02:aa:bb:cc:dd:ee PERMANENT',
      '3: eth0@if9: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500',
      'Deleted 3: eth0    inet 10.123.0.2/24 scope global eth0',
    ];
    for (const l of ipLines)
      expect(ipEventMatters(l, ctx) && ipNeedles(ctx).some((n) => l.includes(n))).toBe(true);
    for (const l of NFT.split('\n').filter((x) => nftEventMatters(x)))
      expect(NFT_NEEDLES.some((n) => l.includes(n))).toBe(true);
  });
});
