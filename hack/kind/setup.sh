#!/usr/bin/env bash
# Installs what `make e2e-kind` needs on a Debian machine that has no
# container engine: Debian's docker.io (the engine hack/kind/engine.sh runs
# with its own state) and debootstrap (the offline node image's base,
# hack/kind/node-image.sh). Idempotent: a machine that has them only checks.
#
# Nothing is installed when an engine is already reachable (DOCKER_HOST, a
# running Docker): the user's engine is used as it is.
#
# Exit status 1 with one line on stderr when no engine is reachable and none
# can be installed (not Linux, not root, no apt-get, or apt-get failed).
set -euo pipefail

fail() {
  echo "e2e-kind: engine: $*" >&2
  exit 1
}

need_engine=1
if [[ ${1:-} == --base-only ]]; then
  need_engine=0
elif docker info >/dev/null 2>&1; then
  need_engine=0
fi

packages=(debootstrap)
((need_engine)) && packages+=(docker.io iptables)

missing=()
if command -v dpkg-query >/dev/null; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
elif ((need_engine)); then
  fail "no container engine is reachable and this is not a Debian machine: start Docker (or set DOCKER_HOST) and run again"
fi
((${#missing[@]})) || exit 0

[[ $(uname -s) == Linux ]] || fail "no container engine is reachable and none can be installed here (not Linux): start Docker (or set DOCKER_HOST)"
[[ $(id -u) == 0 ]] || fail "no container engine is reachable and installing ${missing[*]} needs root: start Docker (or set DOCKER_HOST), or run as root"
command -v apt-get >/dev/null || fail "no container engine is reachable and apt-get is missing: install Docker and run again"

# Package scripts must not start a system dockerd or containerd: the harness
# runs its own engine with its own state. A policy-rc.d that exits 101 tells
# invoke-rc.d so; ours is removed again if we wrote it.
policy=/usr/sbin/policy-rc.d
wrote_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  wrote_policy=1
fi
cleanup() { if ((wrote_policy)); then rm -f "$policy"; fi; }
trap cleanup EXIT

echo "e2e-kind: installing ${missing[*]} (apt-get)"
log=$(mktemp)
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  rm -f "$log"
  fail "apt-get install ${missing[*]} failed (above): no container engine can be installed here"
fi
rm -f "$log"
