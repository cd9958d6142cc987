#!/bin/bash
# Provisioning, a node machine. Mode `build` (VMs): builds twill from the
# synced repository (/vagrant, an rsync copy) in /opt/twill with `npm ci &&
# npm run build`. Mode `prebuilt` (lxc): runs what the host built (`npm run
# build` before `vagrant up`), read from /vagrant, the host's tree mounted
# read-only: dist/ copied to /opt/twill, node_modules used in place, nothing
# downloaded. Then installs the `twill` command, the CNI executable as
# /opt/cni/bin/twill with a conflist in /etc/cni/net.d, the route to the
# outside network via the outside machine, the twill.service unit (`twill
# run --ip-masq` on the underlay address), the twill-lab helper and
# twill-lab-pods.service (which wires the recorded pods again after a
# restart). A member starts twill and wires its pods; a spare stays out of
# the lab (twill disabled, no pods) until a drill adds it. Re-running it
# installs a fresh build and restarts twill.
#
# usage: node.sh <node name> <underlay ip> <etcd url> <outside cidr> <outside gateway> <pods>
#                [member|spare] [build|prebuilt]
set -eu

name=$1
ip=$2
etcd=$3
outside_net=$4
outside_gw=$5
pods=$6
role=${7:-member}
mode=${8:-build}
case $role in
  member | spare) ;;
  *) echo "node.sh: role must be member or spare, not '$role'" >&2; exit 1 ;;
esac

case $mode in
  build)
    # The build: in a copy, so the synced folder stays a plain mirror of the host.
    mkdir -p /opt/twill
    rsync -a --delete --exclude .git/ --exclude node_modules/ --exclude dist/ --exclude .vagrant/ /vagrant/ /opt/twill/
    cd /opt/twill
    npm ci --no-audit --no-fund --loglevel=error
    # the code cache taken by the Node the service runs (npm's own node@24 may be another 24.x,
    # whose V8 would refuse the cache)
    TWILL_BUILD_NODE=/usr/local/bin/node npm run build --silent
    src=/opt/twill
    ;;
  prebuilt)
    for f in dist/src/cli/main.js dist/twill-cni package.json node_modules; do
      [ -e "/vagrant/$f" ] || { echo "node.sh: no /vagrant/$f: run npm ci and npm run build on the host first" >&2; exit 1; }
    done
    # a copy of dist/ (a rebuild on the host does not change a running lab), the host's
    # node_modules in place (read-only)
    rm -rf /opt/twill
    mkdir -p /opt/twill
    rsync -a --exclude /twill-cni --exclude /cni-sea/ /vagrant/dist/ /opt/twill/dist/
    cp /vagrant/package.json /opt/twill/
    ln -s /vagrant/node_modules /opt/twill/node_modules
    src=/vagrant
    ;;
  *) echo "node.sh: mode must be build or prebuilt, not '$mode'" >&2; exit 1 ;;
esac
chmod 0755 /opt/twill/dist/src/cli/main.js
ln -sf /opt/twill/dist/src/cli/main.js /usr/local/bin/twill
install -D -m 0755 "$src/dist/twill-cni" /opt/cni/bin/twill
install -D -m 0755 "$src/lab/vagrant/twill-lab" /usr/local/sbin/twill-lab

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
# jemalloc, as in the image (src/cli/allocator.ts)
Environment=LD_PRELOAD=libjemalloc.so.2 MALLOC_CONF=narenas:1,tcache:false
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

# After a restart of the machine the pods' namespaces are gone: this wires
# the recorded ones again (twill-lab restore), each with the address it had.
cat >/etc/systemd/system/twill-lab-pods.service <<'UNIT'
[Unit]
Description=twill lab: the pods this node had, wired again after a restart
After=twill.service

[Service]
Type=oneshot
RemainAfterExit=yes
TimeoutStartSec=300
ExecStart=/usr/local/sbin/twill-lab restore

[Install]
WantedBy=multi-user.target
UNIT

# The log's directory, made here too: systemd 252 opens StandardOutput=append: before it makes
# LogsDirectory=, so a first start would fail without it.
install -d -m 0755 /var/log/twill
systemctl daemon-reload
systemctl enable --now twill-lab-route
systemctl restart twill-lab-route
systemctl enable twill-lab-pods
if [ "$role" = spare ]; then
  systemctl disable --now twill 2>/dev/null || true
  echo "node $name: spare (twill installed, not started; a drill adds it to the lab)"
  exit 0
fi
systemctl enable twill
systemctl restart twill

names=()
for i in $(seq 1 "$pods"); do names+=("$name-pod$i"); done
if [ "${#names[@]}" -gt 0 ]; then
  twill-lab pod-add "${names[@]}"
fi
echo "node $name: twill $(twill --version 2>/dev/null || echo '?') on $ip, pods:"
twill-lab pods
