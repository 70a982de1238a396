#!/usr/bin/env bash
# Prepares this machine for the node e2e provider (make test-node): the
# Debian packages for a container runtime, the kubelet, kube-scheduler and
# kube-proxy built from source (hack/node/build.sh), and the pause image
# built from hack/kind/pause and packed like the webhook image. Idempotent and
# cached: a warm run only checks.
#
# Linux and root only: it installs packages, and the node it serves runs a
# kubelet and containerd.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${BIN:-$root/bin}

if [[ $(uname -s) != Linux ]]; then
  echo "node: make test-node needs Linux (a kubelet and containerd run on this machine); use make e2e-kind elsewhere" >&2
  exit 1
fi
if [[ $(id -u) != 0 ]]; then
  echo "node: make test-node needs root (it installs packages and runs a kubelet and containerd)" >&2
  exit 1
fi

# Debian's containerd 1.6 and runc; kubelet v1.37 is the last that supports
# containerd 1.6 (hack/node/build.sh pins it with the control plane).
packages=(containerd runc containernetworking-plugins iptables conntrack iproute2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "node: installing ${missing[*]} (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The package may start a system containerd where an init system runs; the
# node runs its own (own config, socket and root) and never talks to it.

"$root"/hack/node/build.sh

# The pause image: rebuilt when its source changes.
want=$(cat "$root"/hack/kind/pause/main.go "$root"/hack/image/main.go | sha256sum | cut -d' ' -f1)
stamp=$bin/.pause.stamp
if [[ -f $bin/pause-image.tar && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  echo "node: pause image up to date in $bin/pause-image.tar"
else
  # The same daemonless packer as the webhook's image (make image).
  (cd "$root" && go run ./hack/image -pkg ./hack/kind/pause -entrypoint /pause -user 65535:65535 \
    -title pause -version 3.10 -tag registry.k8s.io/pause:3.10 -out "$bin"/pause-image.tar)
  echo "$want" >"$stamp"
  echo "node: pause image built into $bin/pause-image.tar"
fi
