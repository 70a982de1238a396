#!/usr/bin/env bash
# Builds a kind node image for the Kubernetes version the project pins
# (hack/tools/kubernetes/go.mod), offline: for machines that reach no
# container registry. Users' CI pulls kindest/node instead (kind.yaml).
#
#   1. the base (hack/kind/base.sh: Debian packages + kind's base files);
#   2. kubeadm, kubelet, kubectl, kube-proxy, kube-scheduler and CoreDNS
#      built from the tools module, beside what `make tools` builds there
#      (etcd, kube-apiserver, kube-controller-manager);
#   3. every image `kubeadm config images list` names, packed under exactly
#      that name by hack/image (no daemon): one static binary each, plus
#      iptables for kube-proxy;
#   4. the node: the base with the binaries in /usr/bin and those images
#      imported into its containerd (what `kind build node-image` does,
#      without pulling anything), committed and saved.
#
# Writes bin/kind-node-image.tar and bin/kind-node-image.ref (the image's
# name) and loads the image into the engine at DOCKER_HOST. Rebuilt only
# when a pinned version or one of its inputs changes (bin/.kind-node.stamp);
# otherwise it only loads the saved image when the engine lacks it.
# -f forces a rebuild.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${BIN:-$root/bin}
kmod=$root/hack/tools/kubernetes
stamp=$bin/.kind-node.stamp
out=$bin/kind-node-image.tar
ref_file=$bin/kind-node-image.ref

fail() {
  echo "e2e-kind: node image: $*" >&2
  exit 1
}

# shellcheck source=../tools/k8s-version.sh
source "$root"/hack/tools/k8s-version.sh
force=${1:-}

docker info >/dev/null 2>&1 || fail "no container engine at ${DOCKER_HOST:-the default socket} (hack/kind/engine.sh up starts one)"

"$root"/hack/kind/base.sh
"$root"/hack/tools/build.sh

inputs() {
  cat "$kmod"/go.mod "$kmod"/go.sum "$kmod"/coredns/main.go "$root"/hack/tools/k8s-version.sh \
    "${BASH_SOURCE[0]}" "$root"/hack/image/main.go "$root"/hack/kind/pause/main.go "$bin"/.kind-base.stamp
}
want=$(inputs | sha256sum | cut -d' ' -f1)
ref=sandbox-fence/kind-node:$k8s_version-${want:0:12}

if [[ $force != -f && -f $stamp && $(cat "$stamp") == "$want" && -f $out && -f $ref_file ]]; then
  if docker image inspect "$ref" >/dev/null 2>&1; then
    echo "kind node image: $ref up to date"
  else
    start=$SECONDS
    docker load -q -i "$out" >/dev/null
    echo "kind node image: $ref loaded from $out in $((SECONDS - start))s"
  fi
  exit 0
fi

start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}"/sandbox-fence-kind-node.XXXXXX)
cid=
cleanup() {
  [[ -n $cid ]] && docker rm -f "$cid" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

echo "kind node image: building kubeadm, kubelet, kube-proxy, kube-scheduler $k8s_version and CoreDNS (hack/tools/kubernetes)"
# One go build: the packages they share with each other (and, through the
# Go build cache, with make tools) compile once. CGO_ENABLED=0 as for the
# control plane: every image gets a static binary.
(cd "$kmod" && CGO_ENABLED=0 go build -trimpath -ldflags="$k8s_ldflags" -o "$bin"/ \
  k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kube-scheduler ./coredns)
echo "kind node image: binaries in $((SECONDS - start))s"

# The images kubeadm will ask the node's containerd for, by their exact names.
mapfile -t images < <("$bin"/kubeadm config images list --kubernetes-version "$k8s_version" 2>/dev/null)
((${#images[@]})) || fail "kubeadm config images list printed nothing"
path=PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
tar -C "$work" --one-top-level=kube-proxy-tree -xf "$bin"/kind-kube-proxy-tree.tar
(cd "$root"/hack && go build -o "$work"/image ./image)
# pack IMAGE ARGS...: one image tarball into $work/images. It runs in
# $pack_dir (the repository's root, whose module holds a -pkg; hack/ for the
# pause program, a package of the hack module).
pack_dir=$root
pack() {
  local image=$1 name
  shift
  name=${image##*/}
  (cd "$pack_dir" && "$work"/image -tag "$image" -out "$work/images/${name%%:*}.tar" -title "${name%%:*}" \
    -version "${image##*:}" "$@") >/dev/null
}
sandbox_image=
for image in "${images[@]}"; do
  name=${image##*/}
  name=${name%%:*}
  case $name in
  kube-apiserver | kube-controller-manager | kube-scheduler)
    pack "$image" -bin "$bin/$name" -entrypoint "/usr/local/bin/$name" -user "" -env "$path"
    ;;
  kube-proxy)
    pack "$image" -bin "$bin/$name" -entrypoint "/usr/local/bin/$name" -user "" -env "$path" -tree "$work"/kube-proxy-tree
    ;;
  etcd)
    # The project's etcd (hack/tools/kubernetes', the local control plane's) under
    # the tag kubeadm asks for.
    pack "$image" -bin "$bin"/etcd -entrypoint /usr/local/bin/etcd -user "" -env "$path"
    ;;
  coredns)
    # As root: the upstream image runs as nonroot with a file capability
    # to bind port 53; root with the NET_BIND_SERVICE kubeadm grants
    # binds it as well.
    pack "$image" -bin "$bin"/coredns -entrypoint /coredns -user ""
    ;;
  pause)
    pack_dir=$root/hack pack "$image" -pkg ./kind/pause -entrypoint /pause -user 65535:65535
    sandbox_image=$image
    ;;
  *)
    fail "kubeadm $k8s_version needs the image $image, which this script does not know how to build"
    ;;
  esac
done
[[ -n $sandbox_image ]] || fail "kubeadm names no pause image"
echo "kind node image: ${#images[@]} images packed in $((SECONDS - start))s: ${images[*]}"

base=sandbox-fence/kind-base:$(cut -c1-12 "$bin"/.kind-base.stamp)
if ! docker image inspect "$base" >/dev/null 2>&1; then
  docker import --change 'ENV container=docker' \
    --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$bin"/kind-base-rootfs.tar "$base" >/dev/null
fi

# A container of the base with no network and no volumes: everything
# written lands in the committed layer. docker cp cannot write into a tmpfs
# (/tmp, /run), so files go to /root.
cid=$(docker run -d --network none --security-opt seccomp=unconfined --entrypoint sleep "$base" infinity)
for b in kubeadm kubelet kubectl; do docker cp "$bin/$b" "$cid:/usr/bin/$b"; done
docker exec "$cid" mkdir -p /root/images
for f in "$work"/images/*.tar; do docker cp "$f" "$cid:/root/images/"; done
# The containerd config names the sandbox (pause) image; make it the one
# kubeadm wants, as kind's own node image builder does.
docker exec -e "KUBE_VERSION=$k8s_version" -e "SANDBOX_IMAGE=$sandbox_image" "$cid" /bin/bash -euo pipefail -c '
  echo "$KUBE_VERSION" >/kind/version
  # crictl is not packaged in Debian bookworm; kind calls it once, for
  # `kind export logs` (crictl images): answer that from containerd.
  printf "%s\n" "#!/bin/sh" "# Not cri-tools: the offline node image answers only what kind export logs asks." \
    "case \$1 in images) exec ctr -n k8s.io images ls ;; esac" \
    "echo \"crictl \$*: not in the offline node image (hack/kind/node-image.sh)\" >&2" "exit 1" >/usr/local/bin/crictl
  chmod 0755 /usr/local/bin/crictl
  sed -i "s|^\(\s*sandbox_image\s*=\s*\).*|\1\"$SANDBOX_IMAGE\"|" /etc/containerd/config.toml
  containerd >/root/containerd.log 2>&1 &
  pid=$!
  for _ in $(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
  for t in /root/images/*.tar; do ctr -n k8s.io images import --no-unpack "$t" >/dev/null; done
  ctr -n k8s.io images ls -q
  kill "$pid"
  wait "$pid" || true
  rm -rf /root/images /root/containerd.log
' >"$work"/imported
for image in "${images[@]}"; do
  grep -qxF "$image" "$work"/imported || fail "the node's containerd lacks $image after the import (it has: $(tr '\n' ' ' <"$work"/imported))"
done
docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'ENV container=docker' \
  "$cid" "$ref" >/dev/null
docker rm -f "$cid" >/dev/null
cid=
docker save -o "$out" "$ref"
echo "$ref" >"$ref_file"
echo "$want" >"$stamp"
echo "kind node image: $ref built in $((SECONDS - start))s ($(du -h "$out" | cut -f1))"
