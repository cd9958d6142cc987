#!/bin/bash
# Prints the paths of Kubernetes v1.20.2 binaries for twill's tests and lab,
# one per line on stdout and nothing else (progress goes to stderr):
#   scripts/kubernetes.sh [--cached-only] [NAME...]
# NAME is one of kube-apiserver, kubelet, kube-proxy, kube-controller-manager,
# kube-scheduler, kubectl; no NAME means all six, in that order. For each:
#   1. $TWILL_<NAME> if set (TWILL_KUBE_APISERVER, TWILL_KUBELET, ...,
#      TWILL_KUBECTL; it must be an executable file);
#   2. a cached build, $TWILL_CACHE_DIR/NAME-v1.20.2
#      (default /var/cache/twill, outside the repo so clean clones reuse it);
#   3. a build from Debian bookworm's kubernetes source package (v1.20.2),
#      fetched through a private apt configuration (the system's sources,
#      lists and package cache are not touched), built with Debian's
#      golang-go in a GOPATH layout and cached atomically (temp file +
#      rename). One `make WHAT=...` builds every one of the six that is not
#      cached yet: about 3 minutes for the apiserver alone, 13 to 20 for all
#      six on 2 cores.
# With --cached-only, step 3 is an error instead (test helpers use it, so a
# test never starts a minutes-long build inside its hook timeout).
# Building needs root only to install missing build dependencies and to
# create the default cache directory.
set -eu

readonly VERSION=v1.20.2
readonly DEBIAN_SUITE=bookworm
readonly MIRROR=http://deb.debian.org/debian
readonly KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

readonly ALL="kube-apiserver kubelet kube-proxy kube-controller-manager kube-scheduler kubectl"

log() { echo "kubernetes.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# TWILL_KUBE_APISERVER for kube-apiserver, TWILL_KUBECTL for kubectl, ...
env_name() { printf 'TWILL_%s' "$(printf '%s' "$1" | tr 'a-z-' 'A-Z_')"; }

# The whole body is one function, so bash has read all of it before it runs:
# editing this file during a build cannot break the running copy.
main() {
  cached_only=false
  names=()
  for arg in "$@"; do
    case "$arg" in
      --cached-only) cached_only=true ;;
      kube-apiserver | kubelet | kube-proxy | kube-controller-manager | kube-scheduler | kubectl) names+=("$arg") ;;
      *) die "unknown argument '$arg' (usage: $0 [--cached-only] [NAME...], NAME one of: $ALL)" ;;
    esac
  done
  # shellcheck disable=SC2206 # word splitting of the list is intended
  [ "${#names[@]}" -gt 0 ] || names=($ALL)

  cache_dir=${TWILL_CACHE_DIR:-/var/cache/twill}
  # path_of NAME: the override or the cached build; empty when neither.
  path_of() {
    local var
    var=$(env_name "$1")
    if [ -n "${!var:-}" ]; then
      [ -e "${!var}" ] || die "$var=${!var} does not exist"
      if [ ! -f "${!var}" ] || [ ! -x "${!var}" ]; then
        die "$var=${!var} is not an executable file"
      fi
      echo "${!var}"
    elif [ -f "$cache_dir/$1-$VERSION" ] && [ -x "$cache_dir/$1-$VERSION" ]; then
      echo "$cache_dir/$1-$VERSION"
    fi
  }
  missing() {
    local name
    for name in "${names[@]}"; do
      [ -n "$(path_of "$name")" ] || printf '%s ' "$name"
    done
  }
  print_all() {
    local name
    for name in "${names[@]}"; do path_of "$name"; done
  }

  # Validate overrides first (path_of dies on a bad one).
  for name in "${names[@]}"; do path_of "$name" >/dev/null; done
  if [ -z "$(missing)" ]; then
    print_all
    exit 0
  fi
  if [ "$cached_only" = true ]; then
    die "not cached in $cache_dir: $(missing)(and no TWILL_... override set); run scripts/kubernetes.sh once to build and cache them (3 to 20 minutes)"
  fi

  mkdir -p "$cache_dir" 2>/dev/null ||
    die "cannot create the cache directory $cache_dir (run as root, or set TWILL_CACHE_DIR or the TWILL_... overrides)"

  # One build at a time: a second caller waits, then finds the cached binaries.
  exec 9>"$cache_dir/.kubernetes.lock"
  flock 9
  if [ -z "$(missing)" ]; then
    print_all
    exit 0
  fi
  # Build every one of the six that is not cached: one make run serves all.
  build=()
  for name in $ALL; do
    [ -f "$cache_dir/$name-$VERSION" ] || build+=("$name")
  done

  tmp=""
  work=$(mktemp -d "${TMPDIR:-/var/tmp}/twill-kube-build.XXXXXX")
  trap 'rm -rf "$work" ${tmp:+"$tmp"}' EXIT
  log "not cached: ${build[*]}; building $VERSION from Debian's source package in $work (3 to 20 minutes)"

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

  # Build dependencies: only the commands `make WHAT=...` and
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

  what=""
  for name in "${build[@]}"; do what="$what cmd/$name"; done
  log "make WHAT='${what# }' (go: $(go version))"
  start=$(date +%s)
  (
    cd "$src"
    export HOME="$work/home" GOCACHE="$work/gocache" CGO_ENABLED=0
    mkdir -p "$HOME"
    make WHAT="${what# }" >&2
  )
  log "built in $(($(date +%s) - start)) s"
  for name in "${build[@]}"; do
    built="$src/_output/bin/$name"
    [ -x "$built" ] || die "the build finished without $built"
    tmp=$(mktemp "$cache_dir/.$name-$VERSION.XXXXXX")
    cp "$built" "$tmp"
    chmod 755 "$tmp"
    mv -f "$tmp" "$cache_dir/$name-$VERSION"
    tmp=""
    log "cached $cache_dir/$name-$VERSION"
  done
  print_all
}

main "$@"
