#!/usr/bin/env bash
# Builds the control plane the end-to-end tests run (etcd, kube-apiserver, kube-controller-manager,
# kubectl) from source at the versions pinned in hack/kube-tools/*/go.mod, into OUTDIR.
# No binary is downloaded: every module comes through the Go module proxy, checked against go.sum.
# Usage: hack/build-kube-tools.sh OUTDIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: hack/build-kube-tools.sh OUTDIR}
k8s_mod=$here/kube-tools/kubernetes
etcd_mod=$here/kube-tools/etcd

fail() { echo "build-kube-tools: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 ||
  fail "no 'go' on PATH: install Go 1.26 or newer (the test control plane is built from source)"
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "$go_minor" -ge 26 ] 2>/dev/null ||
  fail "$(go env GOVERSION) is too old: install Go 1.26 or newer (the pinned Kubernetes needs it)"

pinned() { awk -v m="$2" '$1 == "require" && $2 == m { print $3 }' "$1/go.mod"; }
k8s_version=$(pinned "$k8s_mod" k8s.io/kubernetes)
etcd_version=$(pinned "$etcd_mod" go.etcd.io/etcd/server/v3)
want="kubernetes $k8s_version etcd $etcd_version $(go env GOVERSION)"
bins="etcd kube-apiserver kube-controller-manager kubectl"

if [ "$(cat "$out/.built" 2>/dev/null)" = "$want" ]; then
  for b in $bins; do [ -x "$out/$b" ] || break; done && exit 0
fi

# The toolchain in use builds; never fetch another one behind the user's back.
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
mkdir -p "$out"  # a fresh clone has no .tools/ yet
for mod in "$k8s_mod" "$etcd_mod"; do
  (cd "$mod" && go mod download) >/dev/null 2>"$out.download.log" || {
    tail -n 3 "$out.download.log" >&2
    fail "cannot fetch the Go modules pinned in ${mod#"$here"/}/go.sum: the Go module proxy ($(go env GOPROXY)) must be reachable"
  }
done
rm -f "$out.download.log"

echo "build-kube-tools: building $want into $out (first build: tens of minutes on 2 cores)" >&2
rm -f "$out/.built"
start=$(date +%s)
# kube-apiserver reports this version to clients (helm checks a chart's kubeVersion against it).
minor=$(echo "$k8s_version" | cut -d. -f2)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags="$ldflags -X $pkg.gitTreeState=clean"
done
(cd "$k8s_mod" && nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kubectl)
(cd "$etcd_mod" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
echo "$want" > "$out/.built"
echo "build-kube-tools: built in $(( $(date +%s) - start )) s" >&2
