# Sourced by hack/kind/base.sh and hack/kind/cilium.sh: a Debian bookworm
# root filesystem from debootstrap (minbase), from the mirror apt uses here.
#
#   rootfs_debootstrap DIR PACKAGES LOG   build it into DIR (PACKAGES comma-separated);
#                                         on failure print why and return 1
#   rootfs_unmount DIR                    unmount anything under DIR: debootstrap
#                                         mounts /proc and /sys in its target

rootfs_debootstrap() {
  local dir=$1 packages=$2 log=$3 mirror
  # deb822 sources first, then sources.list.
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) {print $i; exit}}' /etc/apt/sources.list 2>/dev/null || true)
  if [[ -z $mirror ]]; then
    echo "no Debian mirror configured for apt on this machine" >&2
    return 1
  fi
  echo "debootstrap bookworm (minbase + ${packages//,/ }) from $mirror"
  if ! debootstrap --variant=minbase --include="$packages" bookworm "$dir" "$mirror" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "debootstrap failed (above)" >&2
    return 1
  fi
}

rootfs_unmount() {
  local m
  for m in $(awk -v r="$1" 'index($2, r) == 1 {print $2}' /proc/self/mounts | sort -r); do umount -l "$m" || true; done
}
