#!/usr/bin/env bash
# Build the kubeforge operator image without Docker: an OCI image from Debian's packages and the
# project's wheel, with tools from Debian's archive (mmdebstrap, umoci).
#
#   hack/build-image.sh [--archive] [--force]     # prints the OCI layout directory on stdout
#
# What is in the image (the same as the repository's Dockerfile builds, see docs/install.md):
#   - Debian bookworm (mmdebstrap --variant=essential, merged /usr) with python3, ca-certificates
#     and netbase from Debian; no apt, no docs (copyright files kept), no man pages, no locales;
#   - a venv at /opt/kubeforge with the dependencies (wheels from PyPI) and the kubeforge wheel
#     (`pip wheel` of this repository); no pip in it, no pip or apt caches;
#   - user 65532:65532 (kubeforge), ENTRYPOINT ["kubeforge"], CMD ["run"], EXPOSE 8080 (metrics),
#     8081 (health) and 8443 (the workers' status endpoint), PATH with /opt/kubeforge/bin first, PYTHONUNBUFFERED=1, the OCI labels.
#
# Two layers, each cached by a hash of its inputs under $KUBEFORGE_IMAGE_CACHE
# (default ~/.cache/kubeforge/image):
#   base-<hash of this script + pyproject.toml>/   Debian + python3 + the dependencies (slow: ~2 min)
#   <hash of this script + pyproject.toml + README.md + operator/>/   + the kubeforge wheel (seconds)
# A second run with the same inputs does nothing but print the path. The result:
#   <cache>/<hash>/oci                     OCI image layout, tag = the project version (0.1.0)
#   <cache>/<hash>/kubeforge-<ver>.oci.tar the same as an oci-archive (with --archive)
#   <cache>/<hash>/build.json              digest, sizes, build time
# Push it with skopeo: skopeo copy oci:<layout>:<tag> docker://<registry>/kubeforge:<tag>
#
# Needs root (mmdebstrap's root mode and chroot) and reaches only deb.debian.org (Debian packages,
# and the tools themselves when missing) and PyPI (wheels). Every network step has a timeout.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF="$ROOT/hack/build-image.sh"

# --- what the image is: keep in line with the Dockerfile (tests/test_image.py compares them) ----
SUITE=bookworm
MIRROR=${KUBEFORGE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,ca-certificates,netbase
PYTHON_VERSION=3.11   # bookworm's python3; the wheels are chosen for it (checked in the chroot)
GLIBC_VERSION=2.36    # bookworm's libc6; the newest manylinux tag the wheels may carry
VENV=/opt/kubeforge
IMAGE_UID=65532
IMAGE_GID=65532
IMAGE_USER_NAME=kubeforge
ENTRYPOINT=kubeforge
CMD=run
PORTS=(8080/tcp 8081/tcp 8443/tcp)   # 8080: Prometheus /metrics (--metrics-port); 8081: GET /healthz (--health-address); 8443: the workers' status endpoint (--status-address)
IMAGE_ENV=(
  "PATH=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  "PYTHONUNBUFFERED=1"
  "PYTHONDONTWRITEBYTECODE=1"
)
LABELS=(
  "org.opencontainers.image.title=kubeforge"
  "org.opencontainers.image.description=Kubernetes operator for GPU workloads (kopf)"
  "org.opencontainers.image.licenses=Apache-2.0"
  "org.opencontainers.image.source=https://github.com/kubeforge/kubeforge"
)
# Inputs of the image (besides this script); a change to any of them makes a new image.
BASE_INPUTS=(pyproject.toml)
APP_INPUTS=(pyproject.toml README.md operator)

CACHE=${KUBEFORGE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubeforge/image}
KEEP=${KUBEFORGE_IMAGE_KEEP:-2}      # builds of each kind kept in the cache (the newest)
NET_TIMEOUT=${KUBEFORGE_NET_TIMEOUT:-900}
LOCK_TIMEOUT=${KUBEFORGE_LOCK_TIMEOUT:-1800}
CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

log() { printf '[image] %s\n' "$*" >&2; }
die() { printf '[image] error: %s\n' "$*" >&2; exit 1; }

# pip, run from its own wheel inside the image's root (no pip stays in the image), installs wheels
# into the venv; then every module is byte-compiled with unchecked-hash .pyc files: the image is
# immutable and its root read-only, and a timestamp .pyc would go stale when a layer tar rounds
# the source's mtime, so Python would compile in memory at every start. (Debian compiles its own
# modules hash-based too.)
#   pip_install ROOT_CMD... -- PIP_WHEEL COMPILE_DIR WHEEL...     (paths as seen inside the root)
pip_install() {
  local -a in_root=()
  while [[ $1 != -- ]]; do in_root+=("$1"); shift; done
  shift
  local pip_whl=$1 compile_dir=$2
  shift 2
  "${in_root[@]}" "$VENV/bin/python" "$pip_whl/pip" install --no-index --no-cache-dir --no-compile \
    --disable-pip-version-check --no-warn-script-location -q "$@"
  "${in_root[@]}" "$VENV/bin/python" -m compileall -q -j 0 --invalidation-mode unchecked-hash \
    "$compile_dir" >/dev/null
}

# --- mmdebstrap customize hook (runs as `build-image.sh --customize-base ROOTFS`) ---------------
# Inside the fresh Debian tree: check the interpreter the wheels were chosen for, make the venv,
# install the dependency wheels, add the image's user, and record what got installed.
customize_base() {
  local rootfs=$1
  local -a in_root=(chroot "$rootfs" env -i "PATH=$CHROOT_PATH" PYTHONDONTWRITEBYTECODE=1 LC_ALL=C.UTF-8)
  local got
  got=$("${in_root[@]}" python3 -c 'import platform, sys; print("%d.%d %s" % (sys.version_info[:2] + (platform.libc_ver()[1],)))')
  [[ $got == "$PYTHON_VERSION $GLIBC_VERSION" ]] \
    || die "Debian's python3/libc are '$got', the wheels were chosen for '$PYTHON_VERSION $GLIBC_VERSION': update PYTHON_VERSION/GLIBC_VERSION"
  mkdir -p "$rootfs/tmp/wheels"
  cp "$KF_DEPS"/*.whl "$rootfs/tmp/wheels/"
  "${in_root[@]}" python3 -m venv --without-pip "$VENV"
  local pip_whl
  pip_whl=$(cd "$rootfs/tmp/wheels" && ls pip-*.whl)
  local -a deps=()
  local w
  for w in "$rootfs"/tmp/wheels/*.whl; do
    [[ $(basename "$w") == pip-* ]] || deps+=("/tmp/wheels/$(basename "$w")")
  done
  pip_install "${in_root[@]}" -- "/tmp/wheels/$pip_whl" "$VENV/lib/python$PYTHON_VERSION/site-packages" "${deps[@]}"
  "${in_root[@]}" "$VENV/bin/python" "/tmp/wheels/$pip_whl/pip" list --disable-pip-version-check \
    --path "$VENV/lib/python$PYTHON_VERSION/site-packages" --format freeze >"$KF_WORK/python-packages.txt"
  rm -rf "$rootfs/tmp/wheels"
  # shellcheck disable=SC2016  # dpkg-query's format, not the shell's
  "${in_root[@]}" dpkg-query -W -f '${Package}=${Version}\n' >"$KF_WORK/debian-packages.txt"
  # What `groupadd --system --gid 65532 kubeforge && useradd --system --uid 65532 ...` writes
  # (the passwd package with those tools is not part of the essential set).
  echo "$IMAGE_USER_NAME:x:$IMAGE_GID:" >>"$rootfs/etc/group"
  echo "$IMAGE_USER_NAME:x:$IMAGE_UID:$IMAGE_GID::/nonexistent:/usr/sbin/nologin" >>"$rootfs/etc/passwd"
  # debconf keeps a backup of its databases; mmdebstrap removes logs, apt lists and caches.
  rm -f "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old
}

if [[ ${1-} == --customize-base ]]; then
  customize_base "$2"
  exit 0
fi

usage() {
  sed -n '2,/^set -euo/p' "$SELF" | sed '$d' | sed 's/^# \{0,1\}//'
}

ARCHIVE=0
FORCE=0
while (($#)); do
  case $1 in
    --archive) ARCHIVE=1 ;;
    --force) FORCE=1 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

VERSION=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$ROOT/pyproject.toml" | head -n1)
[[ -n $VERSION ]] || die "no version in $ROOT/pyproject.toml"

# sha256 of files and trees (path and content of each file; caches and build leftovers skipped).
inputs_hash() {
  (
    cd "$ROOT"
    find "$@" \( -name __pycache__ -o -name '*.egg-info' -o -name build -o -name dist \) -prune \
      -o -type f ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
  )
}
BASE_KEY=$(inputs_hash hack/build-image.sh "${BASE_INPUTS[@]}")
KEY=$(inputs_hash hack/build-image.sh "${APP_INPUTS[@]}")
BASE_DIR="$CACHE/base-$BASE_KEY"
OUT="$CACHE/$KEY"
ARCHIVE_NAME="kubeforge-$VERSION.oci.tar"

write_archive() {
  # An oci-archive is a tar of the layout (what `skopeo copy oci:... oci-archive:...` writes).
  local tmp="$OUT/.$ARCHIVE_NAME.tmp"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$OUT/oci" -cf "$tmp" .
  mv "$tmp" "$OUT/$ARCHIVE_NAME"
  log "oci-archive: $OUT/$ARCHIVE_NAME"
}

finish() {
  touch "$OUT"
  if ((ARCHIVE)) && [[ ! -f $OUT/$ARCHIVE_NAME ]]; then write_archive; fi
  echo "$OUT/oci"
}

if ((!FORCE)) && [[ -f $OUT/oci/index.json && -f $OUT/build.json ]]; then
  log "cached: oci:$OUT/oci:$VERSION (inputs $KEY unchanged)"
  finish
  exit 0
fi

# --- from here on a build: root, tools, one builder at a time ---------------------------------
[[ $(id -u) == 0 ]] || die "building the image needs root (mmdebstrap's root mode, chroot); run it with sudo"

need_tools() {
  local missing=() t
  for t in mmdebstrap umoci unshare chroot flock mount; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  ((${#missing[@]} == 0)) && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install mmdebstrap and umoci"
  log "installing Debian's mmdebstrap and umoci (apt-get install; missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  timeout "$NET_TIMEOUT" apt-get update -qq >&2 || die "apt-get update failed or timed out"
  timeout "$NET_TIMEOUT" apt-get install -y -qq --no-install-recommends mmdebstrap umoci util-linux coreutils >&2 \
    || die "apt-get install mmdebstrap umoci failed or timed out"
  for t in "${missing[@]}"; do command -v "$t" >/dev/null || die "$t still missing after apt-get install"; done
}
need_tools

HOST_PY=${PY:-}
if [[ -z $HOST_PY ]]; then
  if [[ -x $ROOT/.venv/bin/python ]]; then HOST_PY=$ROOT/.venv/bin/python; else HOST_PY=python3; fi
fi
"$HOST_PY" -m pip --version >/dev/null 2>&1 || die "$HOST_PY has no pip (make setup, or set PY=<a python with pip>)"
PIP=(timeout "$NET_TIMEOUT" "$HOST_PY" -m pip --disable-pip-version-check --timeout 60 --retries 3)

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock -w "$LOCK_TIMEOUT" 9 || die "another build holds $CACHE/.lock (waited ${LOCK_TIMEOUT}s)"
if ((!FORCE)) && [[ -f $OUT/oci/index.json && -f $OUT/build.json ]]; then
  log "built meanwhile by another caller: oci:$OUT/oci:$VERSION"
  finish
  exit 0
fi

# Remove a work directory, unless something is still mounted under it (a killed mmdebstrap can
# leave its chroot's /dev or /proc mounted): never follow a mount into the host.
remove_work() {
  if grep -q " $1/" /proc/self/mounts; then
    log "leaving $1: something is still mounted under it"
  else
    rm -rf --one-file-system "$1"
  fi
}
# We hold the lock, so no other build is running: work directories left by a killed one go.
for stale in "$CACHE"/.work.*; do
  [[ -d $stale ]] && remove_work "$stale"
done

START=$SECONDS
WORK=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'remove_work "$WORK"' EXIT

# The wheel, built from a copy of exactly the hashed inputs (no build/ left in the checkout).
mkdir -p "$WORK/src" "$WORK/wheel"
(cd "$ROOT" && tar -cf - --exclude=__pycache__ --exclude='*.egg-info' --exclude='*.pyc' "${APP_INPUTS[@]}") | tar -xf - -C "$WORK/src"
log "pip wheel of the repository (kubeforge $VERSION)"
"${PIP[@]}" wheel -q --no-deps --no-cache-dir -w "$WORK/wheel" "$WORK/src" >&2 || die "pip wheel failed or timed out"
WHEEL=$(cd "$WORK/wheel" && ls kubeforge-*.whl)

# --- the base layer: Debian + python3 + the dependencies -----------------------------------------
if ((FORCE)) || [[ ! -f $BASE_DIR/oci/index.json || ! -x $BASE_DIR/rootfs$VENV/bin/python ]]; then
  log "base layer $BASE_KEY: Debian $SUITE + python3 + the dependencies"
  # Wheels for bookworm's CPython and glibc, whatever Python runs this script.
  platforms=()
  for ((minor = ${GLIBC_VERSION#2.}; minor >= 17; minor--)); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
  platforms+=(--platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)
  mkdir -p "$WORK/deps"
  "${PIP[@]}" download -q --no-cache-dir -d "$WORK/deps" --only-binary=:all: "${platforms[@]}" \
    --implementation cp --python-version "$PYTHON_VERSION" --abi "cp${PYTHON_VERSION/./}" --abi abi3 --abi none \
    "$WORK/wheel/$WHEEL" pip >&2 || die "pip download of the dependencies failed or timed out"
  rm -f "$WORK/deps/$WHEEL"

  umoci init --layout "$WORK/base"
  umoci new --image "$WORK/base:base"
  umoci unpack --image "$WORK/base:base" "$WORK/bundle" >/dev/null
  export KF_DEPS="$WORK/deps" KF_WORK="$WORK"
  # SOURCE_DATE_EPOCH: mmdebstrap then clamps file times and drops machine-specific files.
  SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)} \
    timeout "$NET_TIMEOUT" mmdebstrap --quiet --variant=essential --include="$PACKAGES" \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
      --dpkgopt='path-exclude=/usr/share/lintian/*' \
      --customize-hook="bash '$SELF' --customize-base \"\$1\"" \
      "$SUITE" "$WORK/bundle/rootfs" "$MIRROR" >"$WORK/mmdebstrap.log" 2>&1 \
    || { tail -n 40 "$WORK/mmdebstrap.log" >&2; die "mmdebstrap failed or timed out (${NET_TIMEOUT}s)"; }
  unset KF_DEPS KF_WORK
  rootfs="$WORK/bundle/rootfs"
  ! grep -q " $rootfs/" /proc/self/mounts || die "mmdebstrap left mounts under $rootfs"
  # A container runtime provides /dev, /etc/resolv.conf and /etc/hostname; the image has none.
  find "$rootfs/dev" -mindepth 1 -delete
  rm -f "$rootfs/etc/resolv.conf" "$rootfs/etc/hostname"
  umoci repack --image "$WORK/base:base" \
    --history.created_by="hack/build-image.sh: mmdebstrap --variant=essential $SUITE $PACKAGES; python3 -m venv $VENV; pip install the dependencies" \
    "$WORK/bundle"
  umoci gc --layout "$WORK/base"
  # The base keeps its unpacked tree: the application layer is built on it through an overlay.
  mkdir -p "$WORK/basedir"
  mv "$WORK/base" "$WORK/basedir/oci"
  mv "$rootfs" "$WORK/basedir/rootfs"
  mv "$WORK/python-packages.txt" "$WORK/debian-packages.txt" "$WORK/basedir/"
  cp "$WORK/deps"/pip-*.whl "$WORK/basedir/"
  rm -rf --one-file-system "$BASE_DIR"
  mv "$WORK/basedir" "$BASE_DIR"
  rm -rf --one-file-system "$WORK/bundle" "$WORK/deps"
  log "base layer built in $((SECONDS - START))s"
else
  log "base layer $BASE_KEY: cached"
fi
touch "$BASE_DIR"

# --- the application layer: the kubeforge wheel into the venv, then the image config -----------
# pip runs in an overlay of the base tree (private mount namespace, no network: --no-index, so
# the dependencies must already be in the base, which pip checks); the overlay's upper directory
# then holds exactly what the install added, and becomes the layer.
mkdir -p "$WORK/img" "$WORK/upper" "$WORK/ovlwork" "$WORK/merged" "$WORK/kf"
cp "$BASE_DIR/oci/oci-layout" "$BASE_DIR/oci/index.json" "$WORK/img/"
cp -al "$BASE_DIR/oci/blobs" "$WORK/img/blobs"   # blobs are content-addressed and never rewritten
cp "$WORK/wheel/$WHEEL" "$BASE_DIR"/pip-*.whl "$WORK/kf/"
PIP_WHL=$(cd "$WORK/kf" && ls pip-*.whl)
log "installing $WHEEL into $VENV"
export -f pip_install
export VENV PYTHON_VERSION
# shellcheck disable=SC2016  # the inner script's own variables
unshare --mount --propagation private -- bash -ec '
  lower=$1 upper=$2 ovlwork=$3 root=$4 kf=$5 wheel=$6 pip_whl=$7 path=$8
  mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$ovlwork" "$root"
  mount --rbind /dev "$root/dev"
  mount -t proc proc "$root/proc"
  mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
  cp "$kf"/*.whl "$root/tmp/"
  pip_install chroot "$root" env -i "PATH=$path" PYTHONDONTWRITEBYTECODE=1 LC_ALL=C.UTF-8 -- \
    "/tmp/$pip_whl" "$VENV/lib/python$PYTHON_VERSION/site-packages/kubeforge" "/tmp/$wheel"
' bash "$BASE_DIR/rootfs" "$WORK/upper" "$WORK/ovlwork" "$WORK/merged" "$WORK/kf" "$WHEEL" "$PIP_WHL" "$CHROOT_PATH" >&2 \
  || die "pip install of $WHEEL in the image failed"
! grep -q " $WORK/" /proc/self/mounts || die "mounts left under $WORK"
# Only the venv may have changed: no deletions (overlay whiteouts), nothing outside /opt.
[[ -z $(find "$WORK/upper" -type c -print -quit) ]] || die "the install deleted files from the base: $(find "$WORK/upper" -type c | head -5)"
outside=$(cd "$WORK/upper" && find . -mindepth 1 ! -path ./opt ! -path "./opt/kubeforge" ! -path "./opt/kubeforge/*" -print | head -5)
[[ -z $outside ]] || die "the install wrote outside $VENV: $outside"
[[ -x $WORK/upper$VENV/bin/$ENTRYPOINT ]] || die "$VENV/bin/$ENTRYPOINT missing after the install"
tar --numeric-owner --sort=name -C "$WORK/upper" -cf "$WORK/app.tar" opt
ROOTFS_BYTES=$(($(du -sb "$BASE_DIR/rootfs" | cut -f1) + $(du -sb "$WORK/upper" | cut -f1)))
umoci raw add-layer --image "$WORK/img:base" --tag "$VERSION" \
  --history.created_by="hack/build-image.sh: pip install $WHEEL" "$WORK/app.tar"

config=(
  --os linux --architecture amd64
  --author "kubeforge hack/build-image.sh"
  --clear=config.env --clear=config.entrypoint --clear=config.cmd --clear=config.exposedports
  --clear=config.labels
  --config.user "$IMAGE_UID:$IMAGE_GID"
  --config.entrypoint "$ENTRYPOINT" --config.cmd "$CMD"
  --history.created_by="hack/build-image.sh: image config (user, entrypoint, cmd, env, ports, labels)"
)
for e in "${IMAGE_ENV[@]}"; do config+=(--config.env "$e"); done
for p in "${PORTS[@]}"; do config+=(--config.exposedports "$p"); done
for l in "${LABELS[@]}"; do config+=(--config.label "$l"); done
umoci config --image "$WORK/img:$VERSION" "${config[@]}"
umoci rm --image "$WORK/img:base"
umoci gc --layout "$WORK/img"

MANIFEST=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$WORK/img/index.json")
COMPRESSED=$(du -sb --apparent-size "$WORK/img/blobs" | cut -f1)
ELAPSED=$((SECONDS - START))
cat >"$WORK/build.json" <<EOF
{
  "tag": "$VERSION",
  "layout": "$OUT/oci",
  "manifest": "$MANIFEST",
  "inputs": "$KEY",
  "base": "$BASE_KEY",
  "compressedBytes": $COMPRESSED,
  "rootfsBytes": $ROOTFS_BYTES,
  "buildSeconds": $ELAPSED,
  "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
EOF
mkdir -p "$WORK/out"
mv "$WORK/img" "$WORK/out/oci"
mv "$WORK/build.json" "$WORK/out/"
cp "$BASE_DIR/python-packages.txt" "$BASE_DIR/debian-packages.txt" "$WORK/out/"
rm -rf "$OUT"
mv "$WORK/out" "$OUT"
log "built oci:$OUT/oci:$VERSION in ${ELAPSED}s: $((COMPRESSED / 1048576)) MiB compressed, $((ROOTFS_BYTES / 1048576)) MiB unpacked"

# Keep the newest $KEEP builds of each kind; the rest go.
prune() {
  local pattern=$1 d
  # shellcheck disable=SC2012,SC2086  # $pattern is a glob; the names are hex hashes
  for d in $(cd "$CACHE" && ls -1dt $pattern 2>/dev/null | tail -n +$((KEEP + 1))); do
    [[ $CACHE/$d != "$OUT" && $CACHE/$d != "$BASE_DIR" ]] && rm -rf --one-file-system "${CACHE:?}/$d"
  done
}
prune 'base-*'
prune '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
finish
