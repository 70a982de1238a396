#!/usr/bin/env bash
# Compiles ahead, beside `make test`, what the later steps of .ci/run
# would otherwise compile one after another: the control plane of make e2e
# and of make e2e-oldest, and the kind node image's Go binaries; and, where
# make e2e-kind will run its own engine, installs Debian's docker.io and
# debootstrap and builds the node image's base.
#
# Why: on a cold machine (empty Go caches, nothing in bin/) make test keeps
# the 2 cores only about half busy (module downloads, test binaries that use
# one core), while the control planes and the node image's binaries are
# about 25 CPU-minutes of compiling that nothing else needs until later.
#
# What it writes: the Go build cache only (go build of several main
# packages compiles and keeps no binary), so nothing races with make; the
# steps that need the binaries link them from that cache in seconds
# (hack/tools/build.sh, hack/kind/node-image.sh). The node image's base is
# written by hack/kind/base.sh itself, under its lock. A failure here fails
# nothing: the later steps build what they need as they always do, and
# .ci/run prints this log.
#
# Usage: hack/prebuild.sh   (from .ci/run, in the background)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

step() {
  local what=$1 t=$SECONDS
  shift
  echo "prebuild: $what"
  "$@"
  echo "prebuild: $what: done in $((SECONDS - t))s"
}

# compile DIR PACKAGE...: the packages of the tools module DIR with the
# flags hack/tools/build.sh and hack/kind/node-image.sh build them with
# (CGO_ENABLED=0, -trimpath; -ldflags only matter to the link).
compile() {
  local dir=$1
  shift
  (cd "$dir" && GOWORK=off CGO_ENABLED=0 go build -trimpath "$@")
}

oldest=$(sed -n 's/^const OldestTested = "\(v[0-9.]*\)"$/\1/p' internal/kubeversion/kubeversion.go)
[[ -n $oldest ]] || { echo "prebuild: no OldestTested in internal/kubeversion/kubeversion.go" >&2; exit 1; }

# The offline kind path's Debian packages first: apt is quickest while
# nothing else downloads, and make e2e-kind then only checks them.
if ! docker info >/dev/null 2>&1; then
  step "Debian's docker.io (hack/kind/setup.sh)" hack/kind/setup.sh
  step "debootstrap (hack/kind/setup.sh --base)" hack/kind/setup.sh --base
fi
step "etcd" compile hack/tools/etcd go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3/embed
step "the control plane of make e2e" compile hack/tools/kubernetes \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
if [[ -f hack/tools/kubernetes-versions/$oldest/go.mod ]]; then
  step "the control plane of make e2e-oldest ($oldest)" compile hack/tools/kubernetes-versions/"$oldest" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
fi
if ! docker info >/dev/null 2>&1; then
  step "the kind node image's binaries" compile hack/tools/kubernetes \
    k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kube-scheduler ./coredns
  step "the kind node image's base (hack/kind/base.sh)" hack/kind/base.sh
fi
echo "prebuild: all done in ${SECONDS}s"
