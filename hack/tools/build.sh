#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kubectl) from the Go module proxy into bin/. Nothing prebuilt is downloaded:
# every binary is compiled from source pinned by hack/tools/kubernetes/go.mod
# (etcd at the version Kubernetes itself requires).
#
# KUBERNETES_VERSION=vX.Y.Z builds that release's kube-apiserver and
# kube-controller-manager instead of the pinned ones, into bin/k8s/vX.Y.Z/
# (etcd and kubectl are the pinned build's, linked: the suite uses kubectl
# for kustomize and plain apply, wait and delete, and a second kubectl would
# be minutes of compiling on a cold machine for nothing), from a tools module
# hack/tools/k8s-module.sh generates into bin/k8s/vX.Y.Z/module from that
# release's own go.mod (the same for every run: what it resolves is
# k8s.io/kubernetes@vX.Y.Z's requirements, checked against the checksum
# database). A release older than the supported minimum
# (internal/kubeversion.Minimum) is refused before anything is built.
#
# Rebuilds only when a pinned version changes: the output directory's
# .tools.stamp records a hash of the tool modules' go.mod/go.sum and of these
# scripts. The ordinary Go build cache makes a rebuild after a version bump
# incremental.
#
# Usage: hack/tools/build.sh [-f]   (-f: rebuild even when the stamp matches)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tools=$root/hack/tools
bin=${BIN:-$root/bin}
mkdir -p "$bin"

# shellcheck source=k8s-version.sh
source "$tools"/k8s-version.sh
pinned=$k8s_version
want_version=${KUBERNETES_VERSION:-$pinned}
out=$bin
k8s_mod=$tools/kubernetes
if [[ $want_version != "$pinned" ]]; then
  if [[ ! $want_version =~ ^v1\.[0-9]+\.[0-9]+$ ]]; then
    echo "tools: KUBERNETES_VERSION=$want_version is not a Kubernetes release such as $pinned" >&2
    exit 1
  fi
  minimum=$(sed -n 's/^const Minimum = "\(v[0-9.]*\)"$/\1/p' "$root"/internal/kubeversion/kubeversion.go)
  if [[ -z $minimum ]]; then
    echo "tools: cannot read const Minimum from internal/kubeversion/kubeversion.go" >&2
    exit 1
  fi
  if [[ $(printf '%s\n' "$minimum" "$want_version" | sort -V | head -n1) != "$minimum" ]]; then
    echo "tools: KUBERNETES_VERSION=$want_version is older than $minimum, the oldest release sandbox-fence supports (internal/kubeversion.Minimum, docs/install.md); not building it" >&2
    exit 1
  fi
  out=$bin/k8s/$want_version
  k8s_mod=$out/module
  if [[ ! -f $k8s_mod/go.sum ]]; then
    echo "tools: generating the tools module of $want_version in $k8s_mod"
    "$tools"/k8s-module.sh "$want_version" "$k8s_mod"
  fi
  k8s_tools_mod=$k8s_mod
  # shellcheck source=k8s-version.sh
  source "$tools"/k8s-version.sh
  if [[ $k8s_version != "$want_version" ]]; then
    echo "tools: $k8s_mod requires k8s.io/kubernetes $k8s_version, not $want_version" >&2
    exit 1
  fi
fi
mkdir -p "$out"
stamp=$out/.tools.stamp
stamp_of() {
  cat "$k8s_mod"/go.mod "$k8s_mod"/go.sum \
    "$tools"/kubernetes/go.mod "$tools"/kubernetes/go.sum "$tools"/build.sh "$tools"/k8s-version.sh | sha256sum | cut -d' ' -f1
}
want=$(stamp_of)

all_present() {
  for b in etcd kube-apiserver kube-controller-manager kubectl; do
    [[ -x $out/$b ]] || return 1
  done
}

if [[ ${1:-} != -f ]] && all_present && [[ -f $stamp ]] && [[ $(cat "$stamp") == "$want" ]]; then
  echo "tools: $k8s_version up to date in $out (stamp $(cut -c1-12 "$stamp"))"
  exit 0
fi

cmds=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager)
if [[ $out == "$bin" ]]; then
  start=$(date +%s)
  echo "tools: building etcd (the version hack/tools/kubernetes pins, Kubernetes' own)"
  (cd "$tools"/kubernetes && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$bin"/etcd go.etcd.io/etcd/server/v3)
  cmds+=(k8s.io/kubernetes/cmd/kubectl)
else
  KUBERNETES_VERSION= "$tools"/build.sh
  start=$(date +%s)
  ln -sfn ../../etcd "$out"/etcd
  ln -sfn ../../kubectl "$out"/kubectl
fi

echo "tools: building ${cmds[*]##*/} $k8s_version (${k8s_mod#"$root"/})"
(cd "$k8s_mod" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags="$k8s_ldflags" -o "$out"/ "${cmds[@]}")

all_present
# Recomputed: go build may have added go.sum lines, and the stamp must match
# the files as the next run will read them.
stamp_of >"$stamp"
echo "tools: built $k8s_version in $(($(date +%s) - start))s into $out"
