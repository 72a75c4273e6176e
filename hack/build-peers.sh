#!/usr/bin/env bash
# Build the peers kubeforge is measured against - Kueue, JobSet and LeaderWorkerSet managers -
# from the Go module proxy, once, cached by version outside the work tree (like
# hack/build-tools.sh does for the control plane). Only benchmarks and tests that compare with
# the peers call this (make test-peers, the training bench's Kueue phase, e2e.bench.preemption_live);
# make demo and make test never do.
#
#   hack/build-peers.sh           # builds what is missing, prints the bin directory
#   hack/build-peers.sh --check   # builds nothing: prints the directory and exits 0 when every
#                                 # binary and manifest is there, exits 1 otherwise
#
# Versions: Kueue v0.16.2 and the JobSet (v0.10.1) and LeaderWorkerSet (v0.7.0) releases its
# go.mod requires, so Kueue's typed clients know every field those CRDs have. None of the three
# modules has replace directives, yet `go install pkg@version` fails here: it reads the module's
# version list (@v/list) for deprecation notices, which this machine's module proxy refuses
# (403). So each is built like the control plane, from a tiny wrapper module that requires the
# published version (`go build -mod=mod` resolves the rest from the module's own go.mod; the
# checksums are verified against sum.golang.org as usual). Their CRDs and webhook manifests are
# copied from the same downloaded module sources (the Go module cache) next to the binaries;
# e2e/peers/ turns them into objects for the sim's API server (webhooks through
# clientConfig.url on loopback). See e2e/README-peers.md.
#
# The machine has 2 shared cores: one module at a time, the go command and the compiler at
# GOMAXPROCS=1 (PEERS_GOMAXPROCS overrides) and at nice 10.
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-0.16.2}"
JOBSET_VERSION="${JOBSET_VERSION:-0.10.1}"
LWS_VERSION="${LWS_VERSION:-0.7.0}"
CACHE="${KUBEFORGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubeforge}"
BIN="$CACHE/bin/peers-kueue-v$KUEUE_VERSION-jobset-v$JOBSET_VERSION-lws-v$LWS_VERSION"
log() { echo "[build-peers] $*" >&2; }

# name | module | package | version | where the manifests are in the module
PEERS=(
  "kueue|sigs.k8s.io/kueue|sigs.k8s.io/kueue/cmd/kueue|$KUEUE_VERSION|config/components/crd config/components/crd/bases config/components/crd/patches config/components/webhook"
  "jobset|sigs.k8s.io/jobset|sigs.k8s.io/jobset|$JOBSET_VERSION|config/components/crd/bases config/components/webhook config/components/webhook/patches"
  "lws|sigs.k8s.io/lws|sigs.k8s.io/lws/cmd|$LWS_VERSION|config/crd config/crd/bases config/crd/patches config/webhook"
)

complete() {
  for p in "${PEERS[@]}"; do
    IFS='|' read -r name _ _ _ _ <<<"$p"
    [ -x "$BIN/$name" ] && [ -f "$BIN/manifests/$name/.complete" ] || return 1
  done
}

if [ "${1:-}" = "--check" ]; then
  complete && { echo "$BIN"; exit 0; }
  exit 1
fi

mkdir -p "$BIN" "$CACHE"
# One peers build at a time (its own lock: the control plane's lock is taken by every cluster
# start through hack/build-tools.sh, which must not wait for this long build). A control-plane
# build that is running is waited for first, so the two do not compile side by side.
exec 9>"$CACHE/.build-peers.lock"
if ! flock -n 9; then
  log "another peers build is running; waiting for it"
  flock 9
fi
if ! flock -n "$CACHE/.build.lock" true; then
  log "a control-plane build is running; waiting for it first"
  flock "$CACHE/.build.lock" true
fi

if ! command -v go >/dev/null 2>&1; then
  log "Go toolchain not found: installing Debian's golang-go"
  apt-get update -qq && apt-get install -y -qq golang-go >/dev/null
fi
export GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath"
export CGO_ENABLED=0

for p in "${PEERS[@]}"; do
  IFS='|' read -r name module pkg version dirs <<<"$p"
  if [ ! -f "$BIN/manifests/$name/.complete" ]; then
    dir="$(go mod download -json "$module@v$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [ -d "$dir" ] || { log "go mod download $module@v$version gave no directory"; exit 1; }
    rm -rf "$BIN/manifests/$name"
    for d in $dirs; do
      mkdir -p "$BIN/manifests/$name/$d"
      cp "$dir/$d"/*.yaml "$BIN/manifests/$name/$d/"
    done
    chmod -R u+w "$BIN/manifests/$name"
    echo "$module@v$version" > "$BIN/manifests/$name/.complete"
  fi
  if [ ! -x "$BIN/$name" ]; then
    log "building $name v$version ($pkg; first run only, several minutes at GOMAXPROCS=${PEERS_GOMAXPROCS:-1})"
    start=$(date +%s)
    mod="$CACHE/src/peers-$name-v$version"
    mkdir -p "$mod"
    printf 'module kubeforge.local/peers-%s\ngo 1.25.0\nrequire %s v%s\n' "$name" "$module" "$version" > "$mod/go.mod"
    ( cd "$mod" && GOMAXPROCS="${PEERS_GOMAXPROCS:-1}" nice -n 10 go build -mod=mod -p 1 \
        -ldflags "-s -w -X $module/pkg/version.GitVersion=v$version" -o "$BIN/$name.tmp" "$pkg" )
    mv "$BIN/$name.tmp" "$BIN/$name"
    log "built $name v$version in $(( $(date +%s) - start ))s"
  fi
done

echo "$BIN"
