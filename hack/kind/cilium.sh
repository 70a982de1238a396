#!/usr/bin/env bash
# Builds Cilium for `make e2e-cilium`, offline: no registry, no downloaded
# binary.
#
#   1. cilium-agent, cilium-dbg, cilium-cni, cilium-health-responder,
#      cilium-mount and cilium-sysctlfix from the Go module, in the reach
#      module (e2e/ciliumproof/reach: Cilium's own k8s.io releases; its go.mod
#      names them as tools). The operator does not build here: it imports
#      sigs.k8s.io/mcs-api/controllers, which the module proxy does not serve;
#      the cluster runs without it (docs/e2e.md says what that leaves out).
#   2. the agent's image: a Debian root filesystem (debootstrap) with what the
#      agent runs at start-up and after (clang and llc of LLVM 19 to compile
#      its BPF programs, iptables, ipset, iproute2), the binaries, the BPF
#      sources under /var/lib/cilium/bpf and the chart's init scripts, as
#      Cilium's images/cilium/Dockerfile lays them out; packed by hack/image.
#   3. the install manifest: Cilium's own chart from the module, rendered by
#      bin/helm with hack/kind/cilium-values.yaml.
#
# Writes bin/cilium-image.tar and bin/cilium.yaml; rebuilt only when this
# script, the values or the Cilium version change (bin/.cilium.stamp).
#
# CILIUM_IMAGE=<registry>/cilium:<tag> skips steps 1 and 2: the chart is
# rendered for that image, which the nodes pull (a CI job that reaches a
# registry, proving the Cilium it runs; docs/e2e.md).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${BIN:-$root/bin}
reach=$root/e2e/ciliumproof/reach
values=$root/hack/kind/cilium-values.yaml
stamp=$bin/.cilium.stamp

fail() {
  echo "e2e-cilium: image: $*" >&2
  exit 1
}

version=$(awk '$1 == "github.com/cilium/cilium" {print $2}' "$reach"/go.mod)
[[ -n $version ]] || fail "no github.com/cilium/cilium in $reach/go.mod"
image=sandbox-fence.local/cilium:$version
mod=$(cd "$reach" && go mod download github.com/cilium/cilium && go list -m -f '{{.Dir}}' github.com/cilium/cilium)
[[ -d $mod/bpf && -d $mod/install/kubernetes/cilium ]] || fail "github.com/cilium/cilium $version has no bpf/ or chart in $mod"

# render IMAGE [--set ...]: Cilium's chart for IMAGE into bin/cilium.yaml.
render() {
  local img=$1
  shift
  echo "cilium: rendering the chart for $img with $values"
  "$bin"/helm template cilium "$mod"/install/kubernetes/cilium --namespace kube-system --kube-version 1.37.0 \
    -f "$values" --set image.override="$img" "$@" >"$bin"/cilium.yaml ||
    fail "helm template of Cilium's chart failed (above)"
}

if [[ -n ${CILIUM_IMAGE:-} ]]; then
  # The suite predicts what pods reach with the pinned release's own code:
  # an image of another release would be checked against the wrong
  # prediction. A tagged image must carry the pinned release's tag.
  name=${CILIUM_IMAGE%%@*}
  name=${name##*/}
  if [[ $name == *:* && ${name##*:} != "$version" ]]; then
    fail "CILIUM_IMAGE=$CILIUM_IMAGE is tagged ${name##*:}, but the suite predicts reach with Cilium $version ($reach/go.mod): use that release's image, or pin its release there and in e2e/go.mod"
  fi
  rm -f "$bin"/cilium-image.tar "$stamp"
  render "$CILIUM_IMAGE" --set image.pullPolicy=IfNotPresent
  exit 0
fi

want=$(cat "${BASH_SOURCE[0]}" "$root"/hack/kind/rootfs.sh "$values" <(echo "$version") | sha256sum | cut -d' ' -f1)
if [[ ${1:-} != -f && -f $stamp && $(cat "$stamp") == "$want" && -f $bin/cilium-image.tar && -f $bin/cilium.yaml ]]; then
  echo "cilium: up to date in $bin ($image)"
  exit 0
fi
[[ $(id -u) == 0 ]] || fail "building the agent's root filesystem needs root (debootstrap)"
"$root"/hack/kind/setup.sh --base
# shellcheck source=rootfs.sh
source "$root"/hack/kind/rootfs.sh

start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}"/sandbox-fence-cilium.XXXXXX)
rootfs=$work/rootfs
cleanup() {
  rootfs_unmount "$rootfs"
  rm -rf "$work"
}
trap cleanup EXIT

echo "cilium: building $version's agent, CLI, CNI plugin and helpers from the module"
install -d "$work"/out
(cd "$reach" && CGO_ENABLED=0 go build -trimpath -tags osusergo -o "$work"/out/ \
  -ldflags "-s -w -X 'github.com/cilium/cilium/pkg/version.ciliumVersion=${version#v} sandbox-fence'" \
  github.com/cilium/cilium/daemon github.com/cilium/cilium/cilium-dbg github.com/cilium/cilium/plugins/cilium-cni \
  github.com/cilium/cilium/cilium-health/responder github.com/cilium/cilium/tools/mount github.com/cilium/cilium/tools/sysctlfix) ||
  fail "go build of Cilium $version failed (above)"

echo -n "cilium: "
rootfs_debootstrap "$rootfs" clang-19,llvm-19,iptables,ipset,iproute2,kmod,ca-certificates,util-linux,mount,procps \
  "$work"/debootstrap.log || fail "the agent's root filesystem (above)"
rootfs_unmount "$rootfs"
# The runtime gives a container its /dev; an image holds no device nodes.
rm -rf "$rootfs"/dev/* "$rootfs"/usr/share/doc "$rootfs"/usr/share/man "$rootfs"/usr/share/locale "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/*
# The agent runs clang and llc by these names.
ln -sf clang-19 "$rootfs"/usr/bin/clang
ln -sf llc-19 "$rootfs"/usr/bin/llc
for b in cilium-dbg:cilium-dbg responder:cilium-health-responder mount:cilium-mount sysctlfix:cilium-sysctlfix; do
  install -m 0755 "$work/out/${b%%:*}" "$rootfs/usr/bin/${b#*:}"
done
install -D -m 0755 "$work"/out/cilium-cni "$rootfs"/opt/cni/bin/cilium-cni
install -d "$rootfs"/var/lib/cilium "$rootfs"/home/cilium
cp -r "$mod"/bpf "$rootfs"/var/lib/cilium/bpf
chmod -R u+w "$rootfs"/var/lib/cilium/bpf
install -m 0755 "$mod"/images/cilium/init-container.sh "$mod"/plugins/cilium-cni/install-plugin.sh \
  "$mod"/plugins/cilium-cni/cni-uninstall.sh "$rootfs"/

echo "cilium: packing $image"
"$bin"/harness/image -bin "$work"/out/daemon -entrypoint /usr/bin/cilium-agent -user "" -tree "$rootfs" \
  -env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin -env INITSYSTEM=SYSTEMD \
  -title cilium -version "$version" -tag "$image" -out "$bin"/cilium-image.tar ||
  fail "packing $image failed (above)"

render "$image"
echo "$want" >"$stamp"
echo "cilium: $image and bin/cilium.yaml in $((SECONDS - start))s"
