#!/bin/bash
# Provisioning, the node machines: Node.js <major> (default 24) from the
# official tarball of nodejs.org (the newest release of that major line),
# checked against the release's SHASUMS256.txt, unpacked in /opt/nodejs with
# node, npm and npx linked into /usr/local/bin. Skipped when that major is
# there. Given a node binary (lxc: the host's, through the synced folder),
# that binary is copied instead and nothing is downloaded: the lxc machines
# reach nothing beyond the lab (and run what the host built, so need no npm).
#
# usage: nodejs.sh [major] [node binary]
set -eu

major=${1:-24}
binary=${2:-}
if [ -n "$binary" ]; then
  version=$("$binary" --version)
  case $version in
    "v$major."*) ;;
    *) echo "nodejs.sh: $binary is Node $version, not $major" >&2; exit 1 ;;
  esac
  if [ -x /opt/nodejs/bin/node ] && cmp -s "$binary" /opt/nodejs/bin/node; then
    echo "nodejs: $version already installed"
    exit 0
  fi
  rm -rf /opt/nodejs
  install -D -m 0755 "$binary" /opt/nodejs/bin/node
  ln -sf /opt/nodejs/bin/node /usr/local/bin/node
  echo "nodejs: $version from $binary in /opt/nodejs"
  exit 0
fi
if [ -x /usr/local/bin/node ] && /usr/local/bin/node --version | grep -q "^v$major\."; then
  echo "nodejs: $(/usr/local/bin/node --version) already installed"
  exit 0
fi
case $(uname -m) in
  x86_64) arch=x64 ;;
  aarch64) arch=arm64 ;;
  *) echo "nodejs.sh: no Node.js tarball for $(uname -m)" >&2; exit 1 ;;
esac

base="https://nodejs.org/dist/latest-v$major.x"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL --retry 3 "$base/SHASUMS256.txt" -o "$tmp/SHASUMS256.txt"
file=$(awk -v want="-linux-$arch.tar.xz" 'substr($2, length($2) - length(want) + 1) == want { print $2; exit }' "$tmp/SHASUMS256.txt")
if [ -z "$file" ]; then
  echo "nodejs.sh: no linux-$arch tarball listed in $base/SHASUMS256.txt" >&2
  exit 1
fi
curl -fsSL --retry 3 "$base/$file" -o "$tmp/$file"
(cd "$tmp" && awk -v f="$file" '$2 == f' SHASUMS256.txt | sha256sum -c --quiet -)

rm -rf /opt/nodejs
mkdir -p /opt/nodejs
tar -xJf "$tmp/$file" -C /opt/nodejs --strip-components=1 --no-same-owner
for cmd in node npm npx; do
  ln -sf "/opt/nodejs/bin/$cmd" "/usr/local/bin/$cmd"
done
echo "nodejs: $(/usr/local/bin/node --version) in /opt/nodejs"
