#!/usr/bin/env bash
# Builds the peer policy engines the comparison runs against (Kyverno's
# admission controller, OPA Gatekeeper) from the Go module proxy into
# bin/peers/. Nothing prebuilt is downloaded: each binary is compiled from the
# version pinned by hack/peers/<engine>/go.mod and stamped with it.
#
# Opt-in and slow (a cold build of both is tens of minutes on two cores): only
# `make bench-peers` and E2E_ENFORCER=kyverno|gatekeeper runs call it, never
# `make test`.
#
# Rebuilds an engine only when its stamp changes: bin/peers/.<engine>.stamp
# records a hash of its module's go.mod/go.sum and of this script.
#
# Usage: hack/peers/build.sh [-f] [kyverno|gatekeeper ...]   (default: both)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
peers=$root/hack/peers
bin=${BIN:-$root/bin}/peers
mkdir -p "$bin"

force=
if [[ ${1:-} == -f ]]; then force=1; shift; fi
engines=("$@")
[[ ${#engines[@]} -gt 0 ]] || engines=(kyverno gatekeeper)

# version_of MODULE: the version the tools module requires.
version_of() {
  awk -v m="$2" '($1 == m && $2 ~ /^v/) {print $2} ($1 == "require" && $2 == m) {print $3}' "$peers/$1/go.mod" | head -n1
}

for e in "${engines[@]}"; do
  case $e in
    kyverno)
      mod=github.com/kyverno/kyverno
      pkg=$mod/cmd/kyverno
      ldx="-X $mod/pkg/version.BuildVersion=" ;;
    gatekeeper)
      mod=github.com/open-policy-agent/gatekeeper/v3
      pkg=$mod
      ldx="-X $mod/pkg/version.Version=" ;;
    *) echo "peers: unknown engine $e (want kyverno or gatekeeper)" >&2; exit 2 ;;
  esac
  version=$(version_of "$e" "$mod")
  if [[ -z $version ]]; then
    echo "peers: cannot read the $mod version from hack/peers/$e/go.mod" >&2
    exit 1
  fi
  stamp=$bin/.$e.stamp
  want=$(cat "$peers/$e/go.mod" "$peers/$e/go.sum" "$peers/build.sh" | sha256sum | cut -d' ' -f1)
  if [[ -z $force && -x $bin/$e && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    echo "peers: $e $version up to date in $bin (stamp $(cut -c1-12 "$stamp"))"
    continue
  fi
  start=$(date +%s)
  echo "peers: building $e $version (hack/peers/$e)"
  (cd "$peers/$e" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w ${ldx}${version}" -o "$bin/$e" "$pkg")
  echo "$version" >"$bin/.$e.version"
  echo "$want" >"$stamp"
  echo "peers: built $e in $(($(date +%s) - start))s into $bin"
done
