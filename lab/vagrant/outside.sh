#!/bin/bash
# Provisioning, the "outside" machine: it stands for the internet. It holds
# the address pods must reach (on its loopback device, as a /32: a dummy
# device needs a kernel module an lxc machine cannot load, and the host's
# kernel may not have it; kept across restarts by a oneshot unit) and has no
# route to the pod network, so a pod's packet that is not masqueraded by its
# node gets no answer.
#
# usage: outside.sh <address/len, e.g. 203.0.113.1/24>
set -eu

addr=${1%/*}/32
cat >/etc/systemd/system/twill-lab-outside.service <<UNIT
[Unit]
Description=twill lab: the outside address $addr (on lo)
After=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=ip addr replace $addr dev lo

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable twill-lab-outside
systemctl restart twill-lab-outside
echo "outside: $addr on lo"
