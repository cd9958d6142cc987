#!/bin/sh
# Installs the Debian packages twill's tests and lab need, only when missing.
# Idempotent and quiet when everything is present; needs root to install.
# (The kube-apiserver's build dependencies are scripts/kube-apiserver.sh's:
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
check shellcheck shellcheck
check kubectl kubernetes-client
[ -x /usr/lib/cni/bridge ] || need="$need containernetworking-plugins"

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
