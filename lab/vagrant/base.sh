#!/bin/bash
# Provisioning, every machine of the twill Vagrant lab: the packages the lab
# uses everywhere (the kernel tools twill drives and the drills run, and
# what the other provisioning steps need), installed only when missing: the
# lxc box (scripts/vagrant-box.sh) holds them all, so its machines, which
# reach nothing beyond the lab, never fetch anything. Idempotent.
set -eu

export DEBIAN_FRONTEND=noninteractive
# libjemalloc2: twill's malloc (twill.service preloads it; src/cli/allocator.ts)
packages=(iproute2 iptables nftables iputils-ping tcpdump curl ca-certificates xz-utils jq rsync libjemalloc2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q ' installed$' || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "base: ${packages[*]} already installed"
  exit 0
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "base: installed ${missing[*]}"
