#!/bin/bash
# Prints the path of a kube-apiserver binary for twill's tests, on stdout and
# nothing else (progress goes to stderr). In order:
#   1. $TWILL_KUBE_APISERVER, if set (it must be an executable file);
#   2. a cached build, $TWILL_CACHE_DIR/kube-apiserver-v1.20.2
#      (default /var/cache/twill, outside the repo so clean clones reuse it);
#   3. a build from Debian bookworm's kubernetes source package (v1.20.2),
#      fetched through a private apt configuration (the system's sources,
#      lists and package cache are not touched), built with Debian's
#      golang-go in a GOPATH layout (`make WHAT=cmd/kube-apiserver`: about
#      3 minutes on 2 idle cores, up to 8 on a busy machine) and cached
#      atomically (temp file + rename).
# With --cached-only, step 3 is an error instead (test helpers use it, so a
# test never starts a minutes-long build inside its hook timeout).
# Building needs root only to install missing build dependencies and to
# create the default cache directory.
set -eu

readonly VERSION=v1.20.2
readonly DEBIAN_SUITE=bookworm
readonly MIRROR=http://deb.debian.org/debian
readonly KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

log() { echo "kube-apiserver.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The whole body is one function, so bash has read all of it before it runs:
# editing this file during a build cannot break the running copy.
main() {
  cached_only=false
  case "${1:-}" in
    "") ;;
    --cached-only) cached_only=true ;;
    *) die "unknown argument '$1' (usage: $0 [--cached-only])" ;;
  esac

  if [ -n "${TWILL_KUBE_APISERVER:-}" ]; then
    [ -e "$TWILL_KUBE_APISERVER" ] ||
      die "TWILL_KUBE_APISERVER=$TWILL_KUBE_APISERVER does not exist"
    if [ ! -f "$TWILL_KUBE_APISERVER" ] || [ ! -x "$TWILL_KUBE_APISERVER" ]; then
      die "TWILL_KUBE_APISERVER=$TWILL_KUBE_APISERVER is not an executable file"
    fi
    echo "$TWILL_KUBE_APISERVER"
    exit 0
  fi

  cache_dir=${TWILL_CACHE_DIR:-/var/cache/twill}
  cached="$cache_dir/kube-apiserver-$VERSION"
  if [ -f "$cached" ] && [ -x "$cached" ]; then
    echo "$cached"
    exit 0
  fi
  if [ "$cached_only" = true ]; then
    die "no kube-apiserver at $cached and TWILL_KUBE_APISERVER is not set; run scripts/kube-apiserver.sh once to build and cache it (3 to 8 minutes)"
  fi

  mkdir -p "$cache_dir" 2>/dev/null ||
    die "cannot create the cache directory $cache_dir (run as root, or set TWILL_CACHE_DIR or TWILL_KUBE_APISERVER)"

  # One build at a time: a second caller waits, then finds the cached binary.
  exec 9>"$cache_dir/.kube-apiserver.lock"
  flock 9
  if [ -f "$cached" ] && [ -x "$cached" ]; then
    echo "$cached"
    exit 0
  fi

  tmp=""
  work=$(mktemp -d "${TMPDIR:-/var/tmp}/twill-kube-build.XXXXXX")
  trap 'rm -rf "$work" ${tmp:+"$tmp"}' EXIT
  log "no cached kube-apiserver at $cached; building $VERSION from Debian's source package in $work (3 to 8 minutes)"

  # The private apt configuration: our own sources.list, lists and cache.
  # Downloads run unsandboxed (as root) because the temporary directory is not
  # readable by the _apt user; apt still verifies every file against the
  # signed Release file.
  mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/apt/parts"
  printf '%s\n' \
    "deb [signed-by=$KEYRING] $MIRROR $DEBIAN_SUITE main" \
    "deb-src [signed-by=$KEYRING] $MIRROR $DEBIAN_SUITE main" >"$work/apt/sources.list"
  apt_opts=(
    -o "Dir::Etc::SourceList=$work/apt/sources.list"
    -o "Dir::Etc::SourceParts=$work/apt/parts"
    -o "Dir::State::Lists=$work/apt/lists"
    -o "Dir::Cache=$work/apt/cache"
    -o "APT::Sandbox::User=root"
  )
  log "apt-get update (private configuration: $work/apt/sources.list)"
  apt-get "${apt_opts[@]}" -qq update >&2

  # Build dependencies: only the commands `make WHAT=cmd/kube-apiserver` and
  # `apt-get source` use that are missing. Debian's golang-go (1.19) is the
  # Go that Debian builds this package with.
  need=()
  command -v go >/dev/null 2>&1 || need+=(golang-go)
  command -v make >/dev/null 2>&1 || need+=(make)
  command -v rsync >/dev/null 2>&1 || need+=(rsync)
  command -v dpkg-source >/dev/null 2>&1 || need+=(dpkg-dev)
  if [ "${#need[@]}" -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "missing build dependencies: ${need[*]} (run as root to install them)"
    log "installing build dependencies: ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" -o Dpkg::Use-Pty=0 install -y -qq \
      --no-install-recommends "${need[@]}" >&2
  fi
  export PATH="/usr/lib/go/bin:$PATH"

  offered=$(apt-cache "${apt_opts[@]}" showsrc kubernetes | sed -n 's/^Version: //p' | head -n1)
  log "Debian $DEBIAN_SUITE offers kubernetes $offered"
  case "$offered" in
    *"${VERSION#v}"-*) ;;
    *) die "expected kubernetes ${VERSION#v} in Debian $DEBIAN_SUITE, found '$offered'" ;;
  esac

  # GOPATH layout: $GOPATH/src/k8s.io/kubernetes is the source tree.
  export GOPATH="$work/go"
  src="$GOPATH/src/k8s.io/kubernetes"
  mkdir -p "$GOPATH/src/k8s.io" "$work/dl"
  log "apt-get source kubernetes"
  (cd "$work/dl" && apt-get "${apt_opts[@]}" -qq source kubernetes >&2)
  tree=$(find "$work/dl" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
  [ -n "$tree" ] || die "apt-get source kubernetes left no source tree in $work/dl"
  mv "$tree" "$src"

  log "make WHAT=cmd/kube-apiserver (go: $(go version))"
  start=$(date +%s)
  (
    cd "$src"
    export HOME="$work/home" GOCACHE="$work/gocache" CGO_ENABLED=0
    mkdir -p "$HOME"
    make WHAT=cmd/kube-apiserver >&2
  )
  built="$src/_output/bin/kube-apiserver"
  [ -x "$built" ] || die "the build finished without $built"
  log "built in $(($(date +%s) - start)) s: $("$built" --version)"

  tmp=$(mktemp "$cache_dir/.kube-apiserver-$VERSION.XXXXXX")
  cp "$built" "$tmp"
  chmod 755 "$tmp"
  mv -f "$tmp" "$cached"
  tmp=""
  log "cached at $cached"
  echo "$cached"
}

main "$@"
