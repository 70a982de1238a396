#!/usr/bin/env bash
# Builds the root filesystem of the offline kind node image's base, the way
# kind's images/base/Dockerfile does, from Debian packages (debootstrap,
# from the mirror apt on this machine uses) and the files the
# sigs.k8s.io/kind module ships in images/base/files. Nothing prebuilt is
# downloaded: Debian's containerd, runc and CNI plugins stand in for the
# ones kind compiles.
#
# Writes, into bin/:
#   kind-base-rootfs.tar     the root filesystem (docker import makes it an image)
#   kind-kube-proxy-tree.tar iptables and conntrack with their libraries, for
#                            the kube-proxy image (hack/kind/node-image.sh)
# Rebuilt only when this script or the kind version in e2e/go.mod (the
# harness module, whose kind provider pins it) changes
# (bin/.kind-base.stamp); -f forces it.
#
# Linux and root only (debootstrap, chroot).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${BIN:-$root/bin}
stamp=$bin/.kind-base.stamp
# What kind's Dockerfile installs, less what only other storage or rootless
# setups use (nfs-common, open-iscsi, e2fsprogs, fuse-overlayfs), plus the
# runtime and CNI plugins it builds from source (Debian's here).
packages=systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,jq,procps,containerd,runc,containernetworking-plugins

fail() {
  echo "e2e-kind: node image: $*" >&2
  exit 1
}

kind_mod=$root/e2e/go.mod
kind_version=$(awk '$1 == "sigs.k8s.io/kind" {print $2}' "$kind_mod")
[[ -n $kind_version ]] || fail "no sigs.k8s.io/kind in $kind_mod"
want=$(cat "${BASH_SOURCE[0]}" "$root"/hack/kind/rootfs.sh <(echo "$kind_version") | sha256sum | cut -d' ' -f1)
if [[ ${1:-} != -f && -f $stamp && $(cat "$stamp") == "$want" && -f $bin/kind-base-rootfs.tar && -f $bin/kind-kube-proxy-tree.tar ]]; then
  echo "kind base: up to date in $bin (stamp $(cut -c1-12 "$stamp"))"
  exit 0
fi
[[ $(id -u) == 0 ]] || fail "building the base root filesystem needs root (debootstrap, chroot)"
"$root"/hack/kind/setup.sh --base
# shellcheck source=rootfs.sh
source "$root"/hack/kind/rootfs.sh

kind_files=$(cd "$root"/e2e && go mod download -json sigs.k8s.io/kind | awk -F'"' '$2 == "Dir" {print $4}')/images/base/files
[[ -d $kind_files ]] || fail "sigs.k8s.io/kind $kind_version has no images/base/files"

start=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}"/sandbox-fence-kind-base.XXXXXX)
rootfs=$work/rootfs
cleanup() {
  rootfs_unmount "$rootfs"
  rm -rf "$work"
}
trap cleanup EXIT

echo -n "kind base: "
rootfs_debootstrap "$rootfs" "$packages" "$work"/debootstrap.log || fail "the base root filesystem (above)"

echo "kind base: kind $kind_version files, as images/base/Dockerfile lays them out"
install -d -m 0755 "$rootfs"/kind/bin "$rootfs"/LICENSES "$rootfs"/etc/kubernetes/manifests
install -m 0755 "$kind_files"/usr/local/bin/* "$rootfs"/usr/local/bin/
install -m 0755 "$kind_files"/kind/bin/* "$rootfs"/kind/bin/
install -m 0644 "$kind_files"/kind/README.txt "$rootfs"/kind/
install -m 0644 "$kind_files"/LICENSES/* "$rootfs"/LICENSES/
(cd "$kind_files"/etc && find . -type f) | while read -r f; do
  install -D -m 0644 "$kind_files/etc/$f" "$rootfs/etc/$f"
done
# Debian's binaries where kind's units and entrypoint look for its own.
ln -sf /usr/bin/containerd /usr/bin/ctr /usr/bin/containerd-shim-runc-v2 "$rootfs"/usr/local/bin/
install -d "$rootfs"/usr/local/sbin "$rootfs"/opt/cni
ln -sf /usr/sbin/runc "$rootfs"/usr/local/sbin/runc
ln -sfn /usr/lib/cni "$rootfs"/opt/cni/bin
# Without CAP_SYS_RESOURCE (some VMs) containerd cannot give a container
# an oom_score_adj below its own, and every sandbox would fail; restricted,
# it clamps instead. A negative OOMScoreAdjust for containerd itself needs
# that capability too.
sed -i 's/^\(\s*restrict_oom_score_adj\s*=\s*\).*/\1true/' "$rootfs"/etc/containerd/config.toml
sed -i '/^OOMScoreAdjust=/d' "$rootfs"/etc/systemd/system/containerd.service

# The rest of the Dockerfile's RUN lines, in the new root.
chroot "$rootfs" /bin/bash -euo pipefail -c '
  ctr oci spec \
    | jq ".hooks.createContainer[.hooks.createContainer | length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" \
    | jq "del(.process.rlimits)" >/etc/containerd/cri-base.json
  find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
  rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
    /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
    /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
  echo ReadKMsg=no >>/etc/systemd/journald.conf
  ln -sf /usr/lib/systemd/systemd /sbin/init
  systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
  systemctl mask systemd-binfmt.service >/dev/null 2>&1
  apt-get clean
  rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /usr/share/man /usr/share/info /usr/share/locale /var/log/*.log
  find /usr/share/doc -type f ! -name copyright -delete
'

# kube-proxy runs iptables (and conntrack) in its own image: Debian's
# binaries here with every library they load, so that no Debian image is
# needed. The nft backend, as the node's iptables.
tree=$work/kube-proxy-tree
install -d "$tree"/usr/sbin "$tree"/lib/x86_64-linux-gnu "$tree"/lib64 "$tree"/usr/lib/x86_64-linux-gnu
cp -a "$rootfs"/usr/lib/x86_64-linux-gnu/xtables "$tree"/usr/lib/x86_64-linux-gnu/
cp "$rootfs"/usr/sbin/xtables-nft-multi "$rootfs"/usr/sbin/conntrack "$tree"/usr/sbin/
for l in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore \
  iptables-nft iptables-nft-save iptables-nft-restore ip6tables-nft ip6tables-nft-save ip6tables-nft-restore; do
  ln -s xtables-nft-multi "$tree"/usr/sbin/"$l"
done
libs=$(chroot "$rootfs" /bin/bash -c 'ldd /usr/sbin/xtables-nft-multi /usr/sbin/conntrack /usr/lib/x86_64-linux-gnu/xtables/*.so' |
  awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/lib64\// {print $1}' | sort -u)
for l in $libs; do
  case $l in
  /lib64/*) cp -L "$rootfs$l" "$tree"/lib64/ ;;
  *) cp -L "$rootfs$l" "$tree"/lib/x86_64-linux-gnu/ ;;
  esac
done

echo "kind base: packing"
tar -C "$tree" -cf "$bin"/kind-kube-proxy-tree.tar .
tar -C "$rootfs" --numeric-owner -cf "$bin"/kind-base-rootfs.tar .
echo "$want" >"$stamp"
echo "kind base: built in $((SECONDS - start))s: $(du -h "$bin"/kind-base-rootfs.tar | cut -f1) root filesystem"
