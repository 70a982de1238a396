#!/usr/bin/env bash
# Builds the node components the node e2e provider adds to the local control
# plane: kubelet, kube-scheduler and kube-proxy, from the same pinned tools module as
# hack/tools/build.sh (hack/tools/kubernetes), so every component is the same
# release. Nothing prebuilt is downloaded.
#
# Rebuilds only when the pinned module or this script changes:
# bin/.node.stamp records their hash. The Go build cache makes a rebuild after
# a version bump incremental and shares packages with hack/tools/build.sh.
#
# Usage: hack/node/build.sh [-f]   (-f: rebuild even when the stamp matches)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mod=$root/hack/tools/kubernetes
bin=${BIN:-$root/bin}
stamp=$bin/.node.stamp
mkdir -p "$bin"

# Pinned with hack/tools/build.sh: kubelet v1.37 is the last release that
# still runs on containerd 1.6 (Debian 12's), as kubelet itself warns.
# shellcheck source=../tools/k8s-version.sh
source "$root"/hack/tools/k8s-version.sh
want=$(cat "$mod"/go.mod "$mod"/go.sum "${BASH_SOURCE[0]}" "$root"/hack/tools/k8s-version.sh | sha256sum | cut -d' ' -f1)

all_present() {
  for b in kubelet kube-scheduler kube-proxy; do
    [[ -x $bin/$b ]] || return 1
  done
}

if [[ ${1:-} != -f ]] && all_present && [[ -f $stamp ]] && [[ $(cat "$stamp") == "$want" ]]; then
  echo "node: kubelet, kube-scheduler, kube-proxy up to date in $bin (stamp $(cut -c1-12 "$stamp"))"
  exit 0
fi

start=$(date +%s)
echo "node: building kubelet, kube-scheduler, kube-proxy $k8s_version (hack/tools/kubernetes)"
# CGO_ENABLED=0: the kubelet's cgo users (cadvisor's libpfm, seccomp
# notifiers) are optional; the cgroupfs driver and the CRI need none.
(cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags="$k8s_ldflags" -o "$bin"/ \
  k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kube-proxy)

all_present
echo "$want" >"$stamp"
echo "node: built in $(($(date +%s) - start))s into $bin"
