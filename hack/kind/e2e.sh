#!/usr/bin/env bash
# make e2e-kind (and make kind-node-image): the kind run, phase by phase.
#
#   engine      use the engine that answers (DOCKER_HOST, a running Docker) as
#               it is; when none does, install Debian's docker.io if needed
#               (hack/kind/setup.sh) and start one of our own
#               (hack/kind/engine.sh), stopped and cleaned on the way out
#   node image  only with our own engine (or KIND_OFFLINE=1): build or load
#               the offline node image (hack/kind/node-image.sh); an engine
#               that was already there runs kind.yaml's kindest/node
#   create, load, deploy, suite
#               go test -tags e2e in e2e/ (its own module) with E2E_PROVIDER=kind
#               (e2e/provider/kind.go), which names its phase in any error
#
# On failure the engine's log and `kind export logs` go to $E2E_ARTIFACTS
# (default .dev/kind-artifacts). Ctrl-C or a failure in any phase removes
# everything created so far: the cluster (the provider), the engine and all
# it made (engine.sh down).
#
# Usage: hack/kind/e2e.sh [node-image]   (node-image: the first two phases only)
# E2E_GO_RUN, when set, is go test's -run: a subset of the suite while working
# on it (hack/testreport then reports the allowed skips of the cases not run
# as no longer skipping; a full run, as CI's, sets nothing). E2E_TAGS (default
# e2e) and E2E_REPORT (default e2e-kind, the run's name in hack/testreport and
# in bin/) are make e2e-cilium's: build tags e2e,cilium, report e2e-cilium.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
mode=${1:-all}
artifacts=${E2E_ARTIFACTS:-$root/.dev/kind-artifacts}
offline=${KIND_OFFLINE:-auto}
owned=0
phase=engine
timings=()

finish() {
  local rc=$?
  trap - EXIT INT TERM
  if ((rc != 0)); then
    case $phase in
    engine | "node image") echo "e2e-kind: failed in phase $phase (above)" >&2 ;;
    *) echo "e2e-kind: go test failed (its output above names the phase: create, load, deploy or suite)" >&2 ;;
    esac
    if ((owned)); then
      hack/kind/engine.sh logs "$artifacts" && echo "e2e-kind: engine log in $artifacts/dockerd.log" >&2
    fi
  fi
  if ((owned)); then
    local t=$SECONDS
    hack/kind/engine.sh down || rc=1
    timings+=("engine down $((SECONDS - t))s")
  fi
  ((${#timings[@]})) && echo "e2e-kind: ${timings[*]}"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

t=$SECONDS
hack/kind/setup.sh
if ! docker info >/dev/null 2>&1; then
  owned=1
  env_lines=$(hack/kind/engine.sh up)
  export DOCKER_HOST DOCKER_CONFIG
  DOCKER_HOST=$(sed -n 's/^DOCKER_HOST=//p' <<<"$env_lines")
  DOCKER_CONFIG=$(sed -n 's/^DOCKER_CONFIG=//p' <<<"$env_lines")
  docker info >/dev/null 2>&1 || { echo "e2e-kind: engine: the engine started but does not answer at $DOCKER_HOST" >&2; exit 1; }
else
  echo "e2e-kind: using the container engine at ${DOCKER_HOST:-the default socket} as it is"
fi
timings+=("engine $((SECONDS - t))s")

case $offline in
auto) use_offline=$owned ;;
1 | true) use_offline=1 ;;
0 | false) use_offline=0 ;;
*) echo "e2e-kind: KIND_OFFLINE=$offline: want auto, 1 or 0" >&2; exit 2 ;;
esac
if [[ $mode == node-image ]]; then
  use_offline=1
fi

if ((use_offline)); then
  phase="node image"
  t=$SECONDS
  hack/kind/node-image.sh
  KIND_NODE_IMAGE=$(cat bin/kind-node-image.ref)
  export KIND_NODE_IMAGE
  timings+=("node image $((SECONDS - t))s")
fi
[[ $mode == node-image ]] && exit 0

phase=cluster
t=$SECONDS
tags=${E2E_TAGS:-e2e}
report=${E2E_REPORT:-e2e-kind}
E2E_PROVIDER=kind E2E_IMAGE_ARCHIVE=${E2E_IMAGE_ARCHIVE:-$root/bin/webhook-image.tar} E2E_ARTIFACTS=$artifacts \
  go -C e2e test -json -count=1 -tags "$tags" -timeout "${E2E_TIMEOUT:-40m}" ${E2E_GO_RUN:+-run "$E2E_GO_RUN"} . 2>&1 |
  bin/testreport -v -run "$report" -json "bin/$report.json" -failures "bin/$report.failures" \
    -modules e2e -- -tags "$tags" ${E2E_GO_RUN:+-run "$E2E_GO_RUN"} .
timings+=("cluster and suite $((SECONDS - t))s")
