#!/usr/bin/env bash
# Build the two images without Docker: a Debian 12 base from mmdebstrap, then searchsvc/Dockerfile
# and operator/Dockerfile with buildah, all into the local (podman) image store.
# Usage: hack/build-images.sh            (as root: installs buildah, podman, runc, mmdebstrap if missing)
# Env: KB_IMAGE_TAG (0.1.0), KB_BASE_IMAGE (localhost/kb-python-base:bookworm), KB_REBUILD_BASE=1.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${KB_IMAGE_TAG:-0.1.0}
BASE=${KB_BASE_IMAGE:-localhost/kb-python-base:bookworm}
SEARCH_IMAGE=localhost/kb-search:$TAG
OPERATOR_IMAGE=localhost/kb-operator:$TAG
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
NEEDED="buildah podman runc mmdebstrap"

missing=""
for tool in $NEEDED; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "ERROR: missing:$missing. Install them (Debian/Ubuntu) with:" >&2
    echo "       sudo apt-get install -y $NEEDED" >&2
    echo "       then run 'make images' again (as root: the base is built with mmdebstrap)." >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y $NEEDED || { apt-get update && apt-get install -y $NEEDED; }
fi
if [ "$(id -u)" != 0 ]; then
  echo "ERROR: run 'make images' as root (mmdebstrap and the image store here need it)." >&2
  exit 1
fi

# crun refuses this kind of host's cgroup layout; runc does not.
export BUILDAH_RUNTIME=runc
# podman's default ulimits can exceed the host's hard limits and are then refused: ask for no more
# than the host allows. nproc at the host's hard limit was refused by runc here too; 4096 is plenty.
NOFILE=$(ulimit -Hn); NPROC=$(ulimit -Hu)
[ "$NOFILE" = unlimited ] && NOFILE=1048576
{ [ "$NPROC" = unlimited ] || [ "$NPROC" -gt 4096 ]; } && NPROC=4096
ULIMITS=(--ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC")
# pip in the RUN steps (Debian's pip reads the system bundle) trusts what the host trusts; the bundle is mounted, never copied into a layer.
CA_MOUNT=()
if [ -f "$CA_BUNDLE" ]; then
  CA_MOUNT=(--volume "$CA_BUNDLE:/etc/ssl/certs/ca-certificates.crt:ro")
fi

t0=$(date +%s)
if [ "${KB_REBUILD_BASE:-0}" = 1 ] || ! podman image exists "$BASE"; then
  echo "== base $BASE (mmdebstrap, Debian 12)"
  tarball=$(mktemp --suffix=.tar)
  trap 'rm -f "$tarball"' EXIT
  mmdebstrap --variant=minbase \
    --include=python3,python3-venv,python-is-python3,ca-certificates,netbase,tzdata \
    --aptopt='APT::Install-Recommends "false"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    bookworm "$tarball" http://deb.debian.org/debian
  podman import --change 'CMD ["python3"]' --change 'ENV LANG=C.UTF-8' "$tarball" "$BASE"
  rm -f "$tarball"
fi
t1=$(date +%s)

build() {  # build IMAGE DOCKERFILE
  echo "== $1 ($2)"
  buildah bud --runtime runc --layers --pull=never "${ULIMITS[@]}" "${CA_MOUNT[@]}" \
    --build-arg "PYTHON_IMAGE=$BASE" -f "$2" -t "$1" .
}
build "$SEARCH_IMAGE" searchsvc/Dockerfile
t2=$(date +%s)
build "$OPERATOR_IMAGE" operator/Dockerfile
t3=$(date +%s)

echo "== built in $((t3 - t0)) s (base $((t1 - t0)) s, search $((t2 - t1)) s, operator $((t3 - t2)) s)"
podman images --filter reference=localhost/kb-* --format '{{.Repository}}:{{.Tag}} {{.Size}}'
