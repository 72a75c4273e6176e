#!/usr/bin/env bash
# Build the local control plane's binaries from the Go module proxy, once, cached by version
# outside the work tree. Idempotent: a binary already in the cache is not rebuilt.
#
#   hack/build-tools.sh            # builds what is missing, prints the bin directory
#
# Why wrapper modules: `go install k8s.io/kubernetes/cmd/kube-apiserver@vX` fails because
# k8s.io/kubernetes' go.mod replaces every staging module (k8s.io/api, ...) with ./staging/...
# paths, and `go install pkg@version` refuses modules with replace directives. A tiny main
# module that requires k8s.io/kubernetes and replaces each staging module with its published
# v0.X.Y twin builds the same code. etcd's server module has the same problem (replaces to
# ../api etc.), solved the same way. kwok and helm install directly.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-0.8.0}"
HELM_VERSION="${HELM_VERSION:-3.21.4}"
CACHE="${KUBEFORGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubeforge}"
BIN="$CACHE/bin/k8s-v$K8S_VERSION-etcd-v$ETCD_VERSION-kwok-v$KWOK_VERSION-helm-v$HELM_VERSION"
export GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath"
export CGO_ENABLED=0
mkdir -p "$BIN"
log() { echo "[build-tools] $*" >&2; }

# One build at a time: a second caller (another test session, the demo) waits here, then
# finds the binaries built and returns at once.
exec 9>"$CACHE/.build.lock"
if ! flock -n 9; then
  log "another build is running; waiting for it"
  flock 9
fi

if ! command -v go >/dev/null 2>&1; then
  log "Go toolchain not found: installing Debian's golang-go"
  apt-get update -qq && apt-get install -y -qq golang-go >/dev/null
fi

staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller)

k8s_missing=()
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  [ -x "$BIN/$b" ] || k8s_missing+=("$b")
done
if [ ${#k8s_missing[@]} -gt 0 ]; then
  mod="$CACHE/src/k8s-v$K8S_VERSION"
  mkdir -p "$mod"
  minor="${K8S_VERSION#*.}"; minor="${minor%%.*}"
  {
    echo "module kubeforge.local/k8s-tools"
    echo "go 1.24.0"
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    for s in "${staging[@]}"; do echo "replace k8s.io/$s => k8s.io/$s v0.${K8S_VERSION#*.}"; done
  } > "$mod/go.mod"
  cat > "$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)
GO
  ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  ( cd "$mod" && go mod tidy )
  for b in "${k8s_missing[@]}"; do
    pkg="k8s.io/kubernetes/cmd/$b"
    [ "$b" = kubectl ] && pkg="k8s.io/kubernetes/cmd/kubectl"
    log "building $b v$K8S_VERSION (first run only; several minutes)"
    ( cd "$mod" && go build -ldflags "$ld" -o "$BIN/$b.tmp" "$pkg" && mv "$BIN/$b.tmp" "$BIN/$b" )
  done
fi

if [ ! -x "$BIN/etcd" ]; then
  mod="$CACHE/src/etcd-v$ETCD_VERSION"
  mkdir -p "$mod"
  printf 'module kubeforge.local/etcd-tools\ngo 1.24.0\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" > "$mod/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3/etcdmain"\n' > "$mod/tools.go"
  ( cd "$mod" && go mod tidy )
  log "building etcd v$ETCD_VERSION"
  ( cd "$mod" && go build -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3 && mv "$BIN/etcd.tmp" "$BIN/etcd" )
fi

for b in kwok kwokctl; do
  if [ ! -x "$BIN/$b" ]; then
    log "building $b v$KWOK_VERSION"
    GOBIN="$BIN" go install -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/$b@v$KWOK_VERSION"
  fi
done

if [ ! -x "$BIN/helm" ]; then
  log "building helm v$HELM_VERSION"
  GOBIN="$BIN" go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
fi

echo "$BIN"
