#!/bin/bash
# Provisioning, the etcd VM: Debian's etcd-server listening on the underlay
# address (and loopback), its data in /var/lib/etcd/twill-lab (the directory
# the lab's `startEtcd({ wipe: true })` deletes), and the network config
# twill reads at /coreos.com/network/config. Re-running it puts the config
# back with the backend asked for (TWILL_LAB_BACKEND in the Vagrantfile).
#
# usage: etcd.sh <etcd ip> <pod network cidr> <vxlan|host-gw>
set -eu

ip=$1
network=$2
backend=$3
case $backend in
  vxlan | host-gw) ;;
  *) echo "etcd.sh: backend must be vxlan or host-gw, not '$backend'" >&2; exit 1 ;;
esac

# (the lxc box has them already: its machines fetch nothing)
if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends etcd-server etcd-client >/dev/null
fi

# A data directory of our own, so the member name and cluster below never
# meet the one the package's first start created.
cat >/etc/default/etcd <<CONF
ETCD_NAME=twill-lab
ETCD_DATA_DIR=/var/lib/etcd/twill-lab
ETCD_LISTEN_CLIENT_URLS=http://$ip:2379,http://127.0.0.1:2379
ETCD_ADVERTISE_CLIENT_URLS=http://$ip:2379
ETCD_LISTEN_PEER_URLS=http://127.0.0.1:2380
ETCD_INITIAL_ADVERTISE_PEER_URLS=http://127.0.0.1:2380
ETCD_INITIAL_CLUSTER=twill-lab=http://127.0.0.1:2380
ETCD_INITIAL_CLUSTER_STATE=new
CONF
systemctl enable etcd
systemctl restart etcd

endpoint="http://$ip:2379"
for _ in $(seq 60); do
  if etcdctl --endpoints "$endpoint" endpoint health >/dev/null 2>&1; then break; fi
  sleep 1
done
etcdctl --endpoints "$endpoint" endpoint health

config="{\"Network\":\"$network\",\"SubnetLen\":24,\"Backend\":{\"Type\":\"$backend\"}}"
etcdctl --endpoints "$endpoint" put /coreos.com/network/config "$config" >/dev/null
echo "etcd: $endpoint, /coreos.com/network/config = $config"
