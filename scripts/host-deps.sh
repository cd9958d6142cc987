#!/bin/sh
# Installs the Debian packages twill's tests and lab need, only when missing.
# Idempotent and quiet when everything is present; needs root to install.
# (The Kubernetes binaries, kubectl included, are built by scripts/kubernetes.sh, with its own build dependencies:
# it installs them only when it has to build.)
set -eu

# command-to-package map: a package is installed only if its command is absent.
need=""
check() { command -v "$1" >/dev/null 2>&1 || need="$need $2"; }
check etcd etcd-server
check etcdctl etcd-client
check ip iproute2
check bridge iproute2
check iptables iptables
check nft nftables
check iperf3 iperf3
check nsenter util-linux
check ping iputils-ping
check vagrant vagrant
# the Vagrant lab where no hypervisor is usable: system containers (lxc) through vagrant-lxc, on a
# box built with debootstrap (scripts/vagrant-box.sh)
check lxc-start lxc
dpkg-query -W -f='${Status}' vagrant-lxc 2>/dev/null | grep -q ' installed$' || need="$need vagrant-lxc"
check shellcheck shellcheck
# twill's malloc where it is deployed (src/cli/allocator.ts): the bench and the netns lab preload it
dpkg-query -W -f='${Status}' libjemalloc2 2>/dev/null | grep -q ' installed$' || need="$need libjemalloc2"
[ -x /usr/lib/cni/bridge ] || need="$need containernetworking-plugins"
# the kubelet lab's images (lab/images.ts) and the containerd that runs them
check debootstrap debootstrap
check containerd containerd
check ctr containerd
check runc runc
check gcc gcc
# `gcc -static` (the pause image) links libc.a; gcc prints the bare name when it has none
[ -f "$(gcc -print-file-name=libc.a 2>/dev/null)" ] || need="$need libc6-dev"
# the toolbox image's busybox must be the static build (Debian's `busybox` is dynamic)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q ' installed$' || need="$need busybox-static"

if [ -z "$need" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "host-deps: missing packages:$need (run as root to install them)" >&2
  exit 1
fi
echo "host-deps: installing:$need" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086 # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $need >/dev/null
