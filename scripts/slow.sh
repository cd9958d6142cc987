#!/bin/sh
# Runs a command as on a machine F times slower: the command and everything
# it starts share 1/F of this machine's CPUs (a cgroup v1 cpu quota with a
# 20 ms period), e.g. `scripts/slow.sh 5 npm test`. As root. The group is
# removed when the command ends; the command's exit code is passed on.
# (The lab's `up --slow F` does the same for the lab's processes only.)
set -eu

usage() { echo "usage: $0 FACTOR COMMAND [ARG...]   (FACTOR: 1 to 50)" >&2; exit 2; }
[ "$#" -ge 2 ] || usage
factor=$1
shift
case "$factor" in '' | *[!0-9]*) usage ;; esac
if [ "$factor" -lt 1 ] || [ "$factor" -gt 50 ]; then usage; fi

root=/sys/fs/cgroup/cpu
[ -w "$root" ] || { echo "$0: needs root and the cgroup v1 cpu controller at $root" >&2; exit 1; }
group="$root/twill-slow-$$"
period=20000
quota=$(( $(nproc) * period / factor ))
mkdir "$group"
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  # move ourselves out, then remove the group once its last process is gone
  echo $$ >"$root/cgroup.procs"
  rmdir "$group" 2>/dev/null || true
}
trap cleanup EXIT
echo "$period" >"$group/cpu.cfs_period_us"
echo "$quota" >"$group/cpu.cfs_quota_us"
echo "slow.sh: running '$*' with ${quota} us of CPU every ${period} us (1/${factor} of $(nproc) CPUs)" >&2
code=0
sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' slow "$group" "$@" || code=$?
exit "$code"
