// How the drills take their time, on canned input: ip -ts stamps, which
// monitor lines are about twill, twill's pass log read back into stages,
// and a process's CPU from /proc/<pid>/stat.
import { describe, expect, it } from 'vitest';
import { concernsTwill, parseStamped } from '../../lab/kernel-watch.ts';
import { firstLogTime, passesBetween, renderStages } from '../../lab/pass-log.ts';
import { cpuMsOfStat } from '../../lab/throttle.ts';

describe('kernel-side timing', () => {
  it('reads ip -ts stamps as local time with microseconds', () => {
    const s = parseStamped(
      '[2026-11-24T02:53:49.080603] Deleted 10.244.2.0/24 via 10.244.2.0 dev twill.1 proto 151 onlink ',
    );
    expect(s?.line).toBe('Deleted 10.244.2.0/24 via 10.244.2.0 dev twill.1 proto 151 onlink ');
    expect(s?.at).toBeCloseTo(new Date('2026-11-24T02:53:49').getTime() + 80.603, 3);
    expect(parseStamped('    link/ether 2e:3a:0b:fc:c6:1b brd ff:ff:ff:ff:ff:ff')).toBeUndefined();
  });

  it("keeps the events about twill's objects, not the kernel's IPv6 churn on its device or other programs' rules", () => {
    expect(concernsTwill('10.244.2.0 dev twill.1 lladdr 02:00:00:00:00:02 PERMANENT')).toBe(true);
    expect(concernsTwill('10.244.7.0/24 via 10.123.0.9 dev eth0 proto 151')).toBe(true);
    expect(concernsTwill('delete rule ip nat TWILL-POSTRTG handle 2')).toBe(true);
    expect(concernsTwill('delete rule ip nat POSTROUTING handle 4')).toBe(true);
    expect(concernsTwill('Deleted fe80::/64 dev twill.1 proto kernel metric 256 pref medium')).toBe(
      false,
    );
    expect(
      concernsTwill('Deleted 2: twill.1    inet6 fe80::2c3a:bff:fefc:c61b/64 scope link tentative'),
    ).toBe(false);
    expect(concernsTwill('add rule ip nat KUBE-SVC-ABC counter jump KUBE-SEP-XYZ')).toBe(false);
    // dual-stack: twill's IPv6 objects count, the kernel's link-local and multicast churn does not
    expect(
      concernsTwill('fd00:10:244:2::/64 via fd00:123::12 dev eth0 proto 151 metric 1024'),
    ).toBe(true);
    expect(concernsTwill('fd00:10:244:2:: dev twill-v6.1 lladdr 02:00:00:00:00:02 PERMANENT')).toBe(
      true,
    );
    expect(concernsTwill('delete rule ip6 nat TWILL-POSTRTG handle 2')).toBe(true);
    expect(
      concernsTwill('multicast ff00::/8 dev twill-v6.1 table local proto kernel metric 256'),
    ).toBe(false);
    expect(concernsTwill('Deleted 9: twill-v6.1    inet6 fe80::1/64 scope link')).toBe(false);
    expect(concernsTwill('10.99.0.0/24 via 10.123.0.7 dev eth0 proto static')).toBe(false);
  });
});

describe("twill's own account of a repair", () => {
  const log = [
    '{"level":30,"time":1000,"msg":"twill starting"}',
    '{"level":40,"time":1120,"kind":"repair","ops":{"route add":1},"durationMs":8,"trigger":"ip monitor","waitedMs":11,"observeMs":0,"applyMs":7,"spawns":1,"msg":"repaired dataplane drift"}',
    'not json',
    '{"level":30,"time":5000,"kind":"delta","durationMs":150,"trigger":"leases","waitedMs":10,"observeMs":0,"applyMs":140,"spawns":3,"msg":"dataplane updated"}',
    '{"level":40,"time":6040,"kind":"full","ops":{"masquerade change":1},"durationMs":30,"trigger":"nft monitor","joined":["ip monitor"],"waitedMs":10,"observeMs":12,"applyMs":18,"spawns":14,"msg":"repaired dataplane drift"}',
  ].join('\n');

  it('finds the passes that changed something within a window, with their stages', () => {
    expect(passesBetween(log, 1100, 2000)).toEqual([
      {
        time: 1120,
        kind: 'repair',
        trigger: 'ip monitor',
        joined: [],
        waitedMs: 11,
        observeMs: 0,
        applyMs: 7,
        spawns: 1,
        durationMs: 8,
      },
    ]);
    expect(passesBetween(log, 0, 10_000).map((p) => p.kind)).toEqual(['repair', 'delta', 'full']);
  });

  it('finds when a message was first logged from a given moment', () => {
    expect(firstLogTime(log, 'twill starting', 0)).toBe(1000);
    expect(firstLogTime(log, 'twill starting', 1001)).toBeUndefined();
    expect(firstLogTime(log, 'dataplane updated', 2000)).toBe(5000);
  });

  it('prints each pass relative to the break', () => {
    expect(renderStages(passesBetween(log, 1100, 2000), 1100)).toEqual([
      'twill pass 1/1 (repair): trigger "ip monitor" +1 ms, waited 11 ms, observe 0 ms, apply 7 ms, 1 spawns, done +20 ms',
    ]);
    // the sources that joined the first trigger are named
    expect(renderStages(passesBetween(log, 6000, 7000), 6000)).toEqual([
      'twill pass 1/1 (full): trigger "nft monitor" (joined by "ip monitor") +0 ms, waited 10 ms, observe 12 ms, apply 18 ms, 14 spawns, done +40 ms',
    ]);
  });

  it("reads a process's CPU, its reaped children included, past a command name with spaces and parentheses", async () => {
    const stat =
      '4242 (node (twill) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 30 20 20 0 11 0 100 0 0';
    // utime 150 + stime 50 + cutime 30 + cstime 20 ticks, 100 ticks a second on Linux
    expect(await cpuMsOfStat(stat)).toBe(2_500);
    expect(await cpuMsOfStat('4242 (x) S 1')).toBeUndefined();
  });
});
