#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kubectl) from the Go module proxy into bin/. Nothing prebuilt is downloaded:
# every binary is compiled from source pinned by hack/tools/*/go.mod.
#
# Rebuilds only when a pinned version changes: bin/.tools.stamp records a hash
# of the tool modules' go.mod/go.sum and of this script. The ordinary Go build
# cache makes a rebuild after a version bump incremental.
#
# Usage: hack/tools/build.sh [-f]   (-f: rebuild even when the stamp matches)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tools=$root/hack/tools
bin=${BIN:-$root/bin}
stamp=$bin/.tools.stamp
mkdir -p "$bin"

# shellcheck source=k8s-version.sh
source "$tools"/k8s-version.sh
stamp_of() {
  cat "$tools"/kubernetes/go.mod "$tools"/kubernetes/go.sum \
    "$tools"/etcd/go.mod "$tools"/etcd/go.sum "$tools"/build.sh "$tools"/k8s-version.sh | sha256sum | cut -d' ' -f1
}
want=$(stamp_of)

all_present() {
  for b in etcd kube-apiserver kube-controller-manager kubectl; do
    [[ -x $bin/$b ]] || return 1
  done
}

if [[ ${1:-} != -f ]] && all_present && [[ -f $stamp ]] && [[ $(cat "$stamp") == "$want" ]]; then
  echo "tools: up to date in $bin (stamp $(cut -c1-12 "$stamp"))"
  exit 0
fi

start=$(date +%s)
echo "tools: building etcd (hack/tools/etcd)"
(cd "$tools"/etcd && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$bin"/etcd go.etcd.io/etcd/server/v3)

echo "tools: building kube-apiserver, kube-controller-manager, kubectl $k8s_version (hack/tools/kubernetes)"
(cd "$tools"/kubernetes && CGO_ENABLED=0 go build -trimpath -ldflags="$k8s_ldflags" -o "$bin"/ \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kubectl)

all_present
# Recomputed: go build may have added go.sum lines, and the stamp must match
# the files as the next run will read them.
stamp_of >"$stamp"
echo "tools: built in $(($(date +%s) - start))s into $bin"
