// The lab's slow-machine mode (`up --slow F`): etcd, the kube-apiserver and
// every twill (with the ip/iptables processes it spawns, which inherit the
// group) run in a cgroup v1 CPU group whose quota is 1/F of this machine's
// CPUs, so a fast machine shows how the promises hold on one F times slower.
// The drills' own observers stay outside it: what is slowed is the system
// under test. Also: a process's CPU time (with the children it has reaped),
// for the per-daemon idle CPU the twenty-nodes drill prints.
import { appendFile, mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { run } from '../src/exec/runner.ts';

const CPU_ROOT = '/sys/fs/cgroup/cpu';
/** A short period keeps the throttling smooth: a stall is at most this long. */
const PERIOD_US = 20_000;

export function cgroupDir(lab: string): string {
  return join(CPU_ROOT, `twill-lab-${lab}`);
}

/** Creates the lab's CPU group with 1/factor of the machine's CPUs. */
export async function createThrottle(
  lab: string,
  factor: number,
): Promise<{ cpus: number; quotaUs: number }> {
  const dir = cgroupDir(lab);
  await mkdir(dir, { recursive: true }).catch((err: unknown) => {
    throw new Error(
      `--slow needs the cgroup v1 cpu controller at ${CPU_ROOT} (as root): ${err instanceof Error ? err.message : String(err)}`,
    );
  });
  const cpus = availableParallelism();
  const quotaUs = Math.max(1_000, Math.round((cpus * PERIOD_US) / factor));
  await writeFile(join(dir, 'cpu.cfs_period_us'), String(PERIOD_US));
  await writeFile(join(dir, 'cpu.cfs_quota_us'), String(quotaUs));
  return { cpus, quotaUs };
}

/** Moves a process (and so everything it starts from now on) into the lab's CPU group. */
export async function joinThrottle(lab: string, pid: number): Promise<void> {
  await appendFile(join(cgroupDir(lab), 'cgroup.procs'), `${pid}\n`);
}

/** Removes the lab's CPU group (its processes must be gone); no error when there is none. */
export async function removeThrottle(lab: string): Promise<boolean> {
  return rmdir(cgroupDir(lab)).then(
    () => true,
    () => false,
  );
}

let ticks: number | undefined;

/** Clock ticks per second (`getconf CLK_TCK`, 100 on Linux almost everywhere). */
async function clockTicks(): Promise<number> {
  ticks ??=
    Number((await run('getconf', ['CLK_TCK']).catch(() => ({ stdout: '100' }))).stdout.trim()) ||
    100;
  return ticks;
}

/**
 * utime+stime+cutime+cstime of a /proc/<pid>/stat line, in ms (children: those it has waited for).
 */
export async function cpuMsOfStat(stat: string): Promise<number | undefined> {
  // the command name (field 2) may hold spaces and parentheses: fields count from the last ')'
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const [u, s, cu, cs] = [rest[11], rest[12], rest[13], rest[14]].map(Number);
  if ([u, s, cu, cs].some((v) => v === undefined || !Number.isFinite(v))) return undefined;
  return (((u ?? 0) + (s ?? 0) + (cu ?? 0) + (cs ?? 0)) * 1000) / (await clockTicks());
}

/** A local process's CPU ms so far, with its reaped children; undefined when it is gone. */
export async function processCpuMs(pid: number | undefined): Promise<number | undefined> {
  if (pid === undefined) return undefined;
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  return stat === undefined ? undefined : cpuMsOfStat(stat);
}
