#!/bin/bash
# Provisioning, every VM of the twill Vagrant lab: the packages the lab
# uses everywhere (the kernel tools twill drives and the drills run, and
# what the other provisioning steps need). Idempotent.
set -eu

export DEBIAN_FRONTEND=noninteractive
packages=(iproute2 iptables nftables iputils-ping tcpdump curl ca-certificates xz-utils jq rsync)
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
echo "base: installed ${packages[*]}"
