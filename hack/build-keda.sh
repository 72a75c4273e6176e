#!/usr/bin/env bash
# Build KEDA (operator + metrics adapter) from the Go module proxy, once, cached by version
# outside the work tree, for the live KEDA + HPA comparison (e2e/bench/keda_live, issue 28).
# Only `make bench-keda-live` calls this; make test, make demo and CI never do.
#
#   hack/build-keda.sh           # builds what is missing, prints the bin directory
#   hack/build-keda.sh --check   # builds nothing: prints the directory and exits 0 when both
#                                # binaries and the CRDs are there, exits 1 otherwise
#
# Why not like hack/build-peers.sh (a wrapper module that requires the published version):
# KEDA's go.mod has a `replace` directive (nexus-proto-annotations) and an `exclude`, and only
# the main module's replace/exclude are honoured. So KEDA is built AS the main module: its
# published source is fetched with `go mod download -json` (checksum-verified as usual), the
# module directory is copied somewhere writable, and `go build ./cmd/operator ./cmd/adapter` runs
# there with -mod=mod (its own go.sum; `go install pkg@version` fails here: the proxy refuses the
# version list it asks for). KEDA v2.21.0's go.mod says go 1.26.0: the machine's Go 1.26 builds
# it with no GOTOOLCHAIN change. Its CRDs (config/crd/bases) are copied next to the binaries.
#
# The machine has 2 shared cores: the go command and the compiler run at GOMAXPROCS=1
# (KEDA_GOMAXPROCS overrides), -p 1, at nice 10. KEDA links every scaler's SDK (cloud clients
# and more): a first build takes long (see e2e/README-keda-live.md for the measured time).
set -euo pipefail

KEDA_VERSION="${KEDA_VERSION:-2.21.0}"
CACHE="${KUBEFORGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubeforge}"
BIN="$CACHE/bin/keda-v$KEDA_VERSION"
MODULE="github.com/kedacore/keda/v2"
log() { echo "[build-keda] $*" >&2; }

complete() {
  [ -x "$BIN/keda-operator" ] && [ -x "$BIN/keda-adapter" ] && [ -f "$BIN/crds/.complete" ]
}

if [ "${1:-}" = "--check" ]; then
  complete && { echo "$BIN"; exit 0; }
  exit 1
fi

mkdir -p "$BIN" "$CACHE"
exec 9>"$CACHE/.build-keda.lock"
if ! flock -n 9; then
  log "another KEDA build is running; waiting for it"
  flock 9
fi
# Do not compile side by side with a control-plane or peers build.
for lock in "$CACHE/.build.lock" "$CACHE/.build-peers.lock"; do
  if [ -e "$lock" ] && ! flock -n "$lock" true; then
    log "another build holds $(basename "$lock"); waiting for it first"
    flock "$lock" true
  fi
done

if ! command -v go >/dev/null 2>&1; then
  log "Go toolchain not found: installing Debian's golang-go"
  apt-get update -qq && apt-get install -y -qq golang-go >/dev/null
fi
export GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath"
export CGO_ENABLED=0

src="$CACHE/src/keda-v$KEDA_VERSION"
if [ ! -f "$src/.complete" ]; then
  dir="$(go mod download -json "$MODULE@v$KEDA_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$dir" ] || { log "go mod download $MODULE@v$KEDA_VERSION gave no directory"; exit 1; }
  rm -rf "$src"
  mkdir -p "$(dirname "$src")"
  cp -r "$dir" "$src"
  chmod -R u+w "$src"
  touch "$src/.complete"
fi

if [ ! -f "$BIN/crds/.complete" ]; then
  rm -rf "$BIN/crds"
  mkdir -p "$BIN/crds"
  cp "$src/config/crd/bases"/*.yaml "$BIN/crds/"
  echo "$MODULE@v$KEDA_VERSION" > "$BIN/crds/.complete"
fi

ldflags="-s -w -X $MODULE/version.Version=v$KEDA_VERSION -X $MODULE/version.GitCommit=proxy"
for name in operator adapter; do
  if [ ! -x "$BIN/keda-$name" ]; then
    log "building keda-$name v$KEDA_VERSION (first run only; long at GOMAXPROCS=${KEDA_GOMAXPROCS:-1})"
    start=$(date +%s)
    ( cd "$src" && GOMAXPROCS="${KEDA_GOMAXPROCS:-1}" nice -n 10 go build -mod=mod -p 1 \
        -ldflags "$ldflags" -o "$BIN/keda-$name.tmp" "./cmd/$name" )
    mv "$BIN/keda-$name.tmp" "$BIN/keda-$name"
    log "built keda-$name v$KEDA_VERSION in $(( $(date +%s) - start ))s"
  fi
done

echo "$BIN"
