#!/usr/bin/env bash
# Installs what `make e2e-kind` needs on a Debian machine:
#   hack/kind/setup.sh         Debian's docker.io, when no container engine
#                              answers (hack/kind/engine.sh runs it with its
#                              own state); nothing when one does (DOCKER_HOST,
#                              a running Docker: used as it is)
#   hack/kind/setup.sh --base  debootstrap, for the offline node image's base
#                              (hack/kind/base.sh)
# Idempotent: a machine that has them only checks.
#
# Exit status 1 with one line on stderr when what is needed cannot be
# installed (not Linux, not root, no apt-get, or apt-get failed).
set -euo pipefail

fail() {
  echo "e2e-kind: engine: $*" >&2
  exit 1
}

if [[ ${1:-} == --base ]]; then
  packages=(debootstrap)
  need_engine=0
  fail() {
    echo "e2e-kind: node image: $*" >&2
    exit 1
  }
elif docker info >/dev/null 2>&1; then
  exit 0
else
  packages=(docker.io iptables bpftool)
  need_engine=1
fi

missing=()
if command -v dpkg-query >/dev/null; then
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
elif ((need_engine)); then
  fail "no container engine is reachable and this is not a Debian machine: start Docker (or set DOCKER_HOST) and run again"
else
  fail "debootstrap is missing and this is not a Debian machine"
fi
((${#missing[@]})) || exit 0

why="installing ${missing[*]}"
((need_engine)) && why="no container engine is reachable and installing ${missing[*]}"
[[ $(uname -s) == Linux ]] || fail "$why is not possible here (not Linux): start Docker (or set DOCKER_HOST)"
[[ $(id -u) == 0 ]] || fail "$why needs root: run as root, or start Docker (or set DOCKER_HOST)"
command -v apt-get >/dev/null || fail "$why needs apt-get, which is missing"

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
  fail "apt-get install ${missing[*]} failed (above)"
fi
rm -f "$log"
