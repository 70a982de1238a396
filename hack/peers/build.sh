#!/usr/bin/env bash
# Builds the peer policy engines the comparison runs against (Kyverno's
# admission controller, OPA Gatekeeper) from the Go module proxy into
# bin/peers/. Nothing prebuilt is downloaded: each binary is compiled in its
# release's own module, as downloaded into the Go module cache, with that
# release's go.mod and go.sum (Kyverno's replace directive included), and
# stamped with its version.
#
# Opt-in and slow (a cold build of both is tens of minutes on two cores): only
# `make bench-peers` and E2E_ENFORCER=kyverno|gatekeeper runs call it, never
# `make test`.
#
# Rebuilds an engine only when this script (which pins the versions)
# changes: bin/peers/.<engine>.stamp records its hash.
#
# Usage: hack/peers/build.sh [-f] [kyverno|gatekeeper ...]   (default: both)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${BIN:-$root/bin}/peers
mkdir -p "$bin"

force=
if [[ ${1:-} == -f ]]; then force=1; shift; fi
engines=("$@")
[[ ${#engines[@]} -gt 0 ]] || engines=(kyverno gatekeeper)

KYVERNO_VERSION=v1.19.1
GATEKEEPER_VERSION=v3.23.1

for e in "${engines[@]}"; do
  case $e in
    kyverno)
      mod=github.com/kyverno/kyverno
      version=$KYVERNO_VERSION
      pkg=./cmd/kyverno
      ldx="-X $mod/pkg/version.BuildVersion=" ;;
    gatekeeper)
      mod=github.com/open-policy-agent/gatekeeper/v3
      version=$GATEKEEPER_VERSION
      pkg=.
      ldx="-X $mod/pkg/version.Version=" ;;
    *) echo "peers: unknown engine $e (want kyverno or gatekeeper)" >&2; exit 2 ;;
  esac
  stamp=$bin/.$e.stamp
  want=$(sha256sum <"${BASH_SOURCE[0]}" | cut -d' ' -f1)
  if [[ -z $force && -x $bin/$e && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    echo "peers: $e $version up to date in $bin (stamp $(cut -c1-12 "$stamp"))"
    continue
  fi
  start=$(date +%s)
  dir=$(GOFLAGS=-mod=mod go mod download -json "$mod@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  if [[ -z $dir || ! -f $dir/go.mod ]]; then
    echo "peers: go mod download $mod@$version gave no module directory" >&2
    exit 1
  fi
  echo "peers: building $e $version (in $dir, with its own go.mod)"
  (cd "$dir" && GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath -ldflags="-s -w ${ldx}${version}" -o "$bin/$e" "$pkg")
  echo "$version" >"$bin/.$e.version"
  echo "$want" >"$stamp"
  echo "peers: built $e in $(($(date +%s) - start))s into $bin"
done
