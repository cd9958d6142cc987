#!/bin/bash
# Provisioning, the "outside" VM: it stands for the internet. It holds the
# address pods must reach (on a dummy device, kept across reboots by a
# oneshot unit) and has no route to the pod network, so a pod's packet that
# is not masqueraded by its node gets no answer.
#
# usage: outside.sh <address/len, e.g. 203.0.113.1/24>
set -eu

addr=$1
cat >/etc/systemd/system/twill-lab-outside.service <<UNIT
[Unit]
Description=twill lab: the outside address $addr (dummy device outside0)
After=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'ip link show outside0 >/dev/null 2>&1 || ip link add outside0 type dummy'
ExecStart=ip addr replace $addr dev outside0
ExecStart=ip link set outside0 up

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable twill-lab-outside
systemctl restart twill-lab-outside
echo "outside: $addr on outside0"
