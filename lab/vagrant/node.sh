#!/bin/bash
# Provisioning, a node VM: builds twill from the synced repository
# (/vagrant, an rsync copy) in /opt/twill with `npm ci && npm run build`,
# installs the `twill` command, the CNI executable as /opt/cni/bin/twill with
# a conflist in /etc/cni/net.d, the route to the outside network via the
# outside VM, the twill.service unit (`twill run --ip-masq` on the underlay
# address), and the twill-lab helper; then starts twill and wires the node's
# pods. Re-running it installs a fresh build and restarts twill.
#
# usage: node.sh <node name> <underlay ip> <etcd url> <outside cidr> <outside gateway> <pods>
set -eu

name=$1
ip=$2
etcd=$3
outside_net=$4
outside_gw=$5
pods=$6

# The build: in a copy, so the synced folder stays a plain mirror of the host.
mkdir -p /opt/twill
rsync -a --delete --exclude .git/ --exclude node_modules/ --exclude dist/ --exclude .vagrant/ /vagrant/ /opt/twill/
cd /opt/twill
npm ci --no-audit --no-fund --loglevel=error
npm run build --silent
chmod 0755 dist/src/cli/main.js
ln -sf /opt/twill/dist/src/cli/main.js /usr/local/bin/twill
install -D -m 0755 dist/twill-cni /opt/cni/bin/twill
install -D -m 0755 lab/vagrant/twill-lab /usr/local/sbin/twill-lab

mkdir -p /etc/cni/net.d
cat >/etc/cni/net.d/10-twill.conflist <<'CONF'
{
  "cniVersion": "1.1.0",
  "name": "twill",
  "plugins": [
    { "type": "twill", "logFile": "/var/log/twill-cni.log" }
  ]
}
CONF

cat >/etc/systemd/system/twill-lab-route.service <<UNIT
[Unit]
Description=twill lab: route to the outside network $outside_net via $outside_gw
After=network-online.target
Wants=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=ip route replace $outside_net via $outside_gw

[Install]
WantedBy=multi-user.target
UNIT

# Restart=no: the lab's drills decide when a killed twill comes back. The
# log is a file, like the netns lab's, read by the drills through twill-lab.
cat >/etc/systemd/system/twill.service <<UNIT
[Unit]
Description=twill overlay network daemon (Vagrant lab, node $name)
After=network-online.target twill-lab-route.service
Wants=network-online.target

[Service]
ExecStart=/usr/local/bin/twill run --etcd-endpoints $etcd --iface $ip --ip-masq --node-name %H
KillMode=mixed
TimeoutStopSec=30
Restart=no
LogsDirectory=twill
StandardOutput=append:/var/log/twill/twill.log
StandardError=inherit

[Install]
WantedBy=multi-user.target
UNIT

systemctl daemon-reload
systemctl enable --now twill-lab-route
systemctl restart twill-lab-route
systemctl enable twill
systemctl restart twill

names=()
for i in $(seq 1 "$pods"); do names+=("$name-pod$i"); done
if [ "${#names[@]}" -gt 0 ]; then
  twill-lab pod-add "${names[@]}"
fi
echo "node $name: twill $(twill --version 2>/dev/null || echo '?') on $ip, pods:"
twill-lab pods
