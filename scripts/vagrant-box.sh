#!/bin/bash
# Builds the Vagrant lab's lxc box (Debian bookworm, for the vagrant-lxc provider) from the Debian
# mirror this machine already uses, caches it, and adds it to Vagrant as twill/bookworm-lxc. Nothing
# is downloaded but Debian packages: the machines never reach the internet, so the box holds all
# they need (systemd, openssh-server, sudo, the kernel tools the lab drives, etcd for the etcd
# machine, the vagrant user with Vagrant's well-known insecure key and passwordless sudo).
#
# The recipe is this file: the box is built again only when it changes (its sha256 names the
# cached box, /var/cache/twill/vagrant/bookworm-lxc-<hash>.box, and is stored in the box as
# twill-recipe, which tells whether Vagrant holds this recipe's box). Needs root and debootstrap
# (scripts/host-deps.sh installs it). Prints the box name on stdout.
#
# usage: scripts/vagrant-box.sh           build when needed, add to Vagrant when needed
#   TWILL_BOX_MIRROR   the Debian mirror (default: the first bookworm one in /etc/apt/sources.list*)
#   TWILL_BOX_CACHE    where the built box is kept (default /var/cache/twill/vagrant)
set -eu

BOX=twill/bookworm-lxc
SUITE=bookworm
CACHE=${TWILL_BOX_CACHE:-/var/cache/twill/vagrant}
# What every machine needs, without a download: base.sh's packages (libjemalloc2 among them, twill's
# malloc), etcd.sh's, and what makes a Vagrant machine (init, ssh, sudo).
PACKAGES=(
  systemd systemd-sysv dbus openssh-server sudo netbase procps
  iproute2 iptables nftables iputils-ping tcpdump curl ca-certificates xz-utils jq rsync
  etcd-server etcd-client libjemalloc2
)

log() { echo "vagrant-box: $*" >&2; }

[ "$(id -u)" -eq 0 ] || {
  log "needs root (debootstrap, and a rootfs owned by root)"
  exit 1
}
recipe=$(sha256sum "$0" | cut -c1-16)
box_file=$CACHE/bookworm-lxc-$recipe.box
installed=${VAGRANT_HOME:-$HOME/.vagrant.d}/boxes/${BOX//\//-VAGRANTSLASH-}/0/lxc/twill-recipe

# The first mirror serving bookworm in the apt sources, one-line or deb822 format.
mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk -v suite="$SUITE" '
      /^deb[ \t]/ {
        i = 2
        if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) { print $i; exit }
      }
      /^[ \t]*$/ { if (deb && uri != "" && has) { print uri; exit } deb = 0; uri = ""; has = 0 }
      /^Types:/ { deb = ($0 ~ /[ \t]deb([ \t]|$)/) }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (j = 2; j <= NF; j++) if ($j == suite) has = 1 }
      END { if (deb && uri != "" && has) print uri }
    ' "$f" | head -n 1
  done | head -n 1
}

build() {
  local mirror_uri key work root
  mirror_uri=${TWILL_BOX_MIRROR:-$(mirror)}
  mirror_uri=${mirror_uri:-http://deb.debian.org/debian}
  key=$(dpkg -L vagrant 2>/dev/null | grep '/keys/vagrant\.pub$' | head -n 1)
  if [ -z "$key" ] || [ ! -r "$key" ]; then
    log "no Vagrant insecure public key (keys/vagrant.pub of the vagrant package)"
    exit 1
  fi
  work=$(mktemp -d "$CACHE/build.XXXXXX")
  # shellcheck disable=SC2064 # expand $work now: the trap must remove this build's directory
  trap "rm -rf '$work'" EXIT
  root=$work/rootfs
  log "debootstrap $SUITE from $mirror_uri into $root (about 2 minutes)…"
  local pkgs
  pkgs=$(
    IFS=,
    echo "${PACKAGES[*]}"
  )
  debootstrap --variant=minbase --include="$pkgs" "$SUITE" "$root" "$mirror_uri" >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2
    log "debootstrap failed (log above)"
    exit 1
  }

  # the vagrant user: Vagrant's insecure key (Vagrant swaps it for a key of its own at first
  # boot), passwordless sudo
  chroot "$root" useradd --create-home --shell /bin/bash vagrant
  install -d -m 0700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
  install -m 0600 -o 1000 -g 1000 "$key" "$root/home/vagrant/.ssh/authorized_keys"
  echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >"$root/etc/sudoers.d/vagrant"
  chmod 0440 "$root/etc/sudoers.d/vagrant"

  # every machine gets its own ssh host keys and machine id at first boot; the hostname is the
  # container's name (vagrant-lxc sets it; an /etc/hostname would override it)
  rm -f "$root"/etc/ssh/ssh_host_* "$root/etc/hostname" "$root/var/lib/dbus/machine-id"
  : >"$root/etc/machine-id"
  mkdir -p "$root/etc/systemd/system/ssh.service.d"
  cat >"$root/etc/systemd/system/ssh.service.d/host-keys.conf" <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
UNIT
  # etcd runs only where the etcd machine's provisioning enables it
  chroot "$root" systemctl disable etcd.service >/dev/null 2>&1 || true
  # no network beyond the lab: nothing in a machine fetches (apt's timers would try)
  chroot "$root" systemctl mask apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1 || true
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/var/cache/debconf/*-old
  echo "$recipe" >"$root/etc/twill-box-recipe"

  # vagrant-lxc's box format: rootfs.tar.gz holding ./rootfs/… (its template strips two
  # components), with file capabilities kept (ping's cap_net_raw is an xattr)
  local box=$work/box
  mkdir "$box"
  log "packing the rootfs…"
  tar --numeric-owner --xattrs --xattrs-include='*' -C "$work" -czf "$box/rootfs.tar.gz" ./rootfs
  cat >"$box/lxc-config" <<'CONF'
lxc.arch = amd64
lxc.include = /usr/share/lxc/config/common.conf
lxc.tty.dir =
lxc.cgroup.devices.allow = c 10:200 rwm
CONF
  printf '{"provider":"lxc","version":"1.0.0","built-on":"%s","twill-recipe":"%s"}\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$recipe" >"$box/metadata.json"
  echo "$recipe" >"$box/twill-recipe"
  tar -C "$box" -cf "$work/out.box" metadata.json lxc-config twill-recipe rootfs.tar.gz
  mv "$work/out.box" "$box_file"
  # older recipes' boxes are of no use any more
  find "$CACHE" -maxdepth 1 -name 'bookworm-lxc-*.box' ! -name "${box_file##*/}" -delete
  log "built $box_file ($(du -h "$box_file" | cut -f1))"
}

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ ! -s "$box_file" ]; then
  build
else
  log "cached: $box_file"
fi
if [ "$(cat "$installed" 2>/dev/null)" != "$recipe" ]; then
  log "adding $box_file to Vagrant as $BOX"
  vagrant box add --force --name "$BOX" "$box_file" >&2
fi
echo "$BOX"
