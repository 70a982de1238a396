#!/usr/bin/env bash
# Runs every fuzz target of the module (found with go test -list in every
# package that declares one, so a new target is never left out) for a
# bounded time each, starting from its committed corpus in the package's
# testdata/fuzz/<target>/. A target without a committed corpus fails the run.
# A failing input is written there; commit it with the fix.
#
# Each package's test binary is built once with fuzzing instrumentation and
# run once per target, as go test -fuzz would, with
# the same cache directory (GOCACHE/fuzz/<package>). Minimization is bounded
# to 100 runs an input: by default the fuzzer spends up to 60 s minimizing
# every new interesting input, and FuzzAdmissionReview then ran 16 inputs in
# 15 s instead of about 7,600; a failing input is written all the same, just
# less reduced.
#
# The instrumentation (the compiler's -d=libfuzzer, what go test -fuzz adds)
# covers this module's packages only, where the code under test is: go test
# -fuzz instruments every package of the binary, so an empty build cache
# compiled all of client-go, apiserver and controller-runtime a second time,
# instrumented, for 15 s of fuzzing (9 of a cold .ci/run's minutes,
# 2026-12-01). The coverage that guides the fuzzer is then our validators',
# handlers' and patch builders' branches, not the JSON decoder's; the
# dependencies are the ones the unit tests compiled.
#
# Usage: hack/fuzz.sh [TIME]   (the fuzz time of each target; default 15s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fuzztime=${1:-15s}

# Only this module's packages: a nested module (e2e/ciliumproof) runs its
# target's seeds in its own test run and long fuzzing through its own target
# (make fuzz-cilium), since an instrumented build of Cilium would cost CI
# minutes for 15 s of fuzzing.
in_root_module() {
  local d=$1
  while [[ $d != . ]]; do
    [[ -f $d/go.mod ]] && return 1
    d=$(dirname "$d")
  done
}
mapfile -t dirs < <(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u |
  while read -r d; do if in_root_module "$d"; then echo "$d"; else echo "fuzz: $d is in a module of its own, not run here" >&2; fi; done)
if [[ ${#dirs[@]} -eq 0 ]]; then
  echo "fuzz: no fuzz targets in the module" >&2
  exit 1
fi
cache=$(go env GOCACHE)/fuzz
module=$(go list -m)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

status=0 n=0
start=$(date +%s)
for dir in "${dirs[@]}"; do
  pkg=$(go list "$dir")
  bin=$work/$(basename "$dir").test
  t0=$(date +%s)
  go test -c -gcflags="$module/...=-d=libfuzzer" -o "$bin" "$dir"
  mapfile -t targets < <("$bin" -test.list '^Fuzz')
  echo "fuzz: built $pkg (${#targets[@]} targets) in $(($(date +%s) - t0))s"
  for target in "${targets[@]}"; do
    n=$((n + 1))
    corpus=$dir/testdata/fuzz/$target
    if ! compgen -G "$corpus/*" >/dev/null; then
      echo "fuzz: $target in $pkg has no committed corpus in ${corpus#./}" >&2
      status=1
      continue
    fi
    t0=$(date +%s)
    echo "fuzz: $target ($pkg) for $fuzztime from $(find "$corpus" -type f | wc -l) committed inputs"
    if ! (cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^$target\$" -test.fuzztime "$fuzztime" -test.fuzzminimizetime 100x -test.fuzzcachedir "$cache/$pkg"); then
      echo "fuzz: $target FAILED; the failing input is in ${corpus#./}" >&2
      status=1
    fi
    echo "fuzz: $target took $(($(date +%s) - t0))s"
  done
done
echo "fuzz: $n targets in $(($(date +%s) - start))s"
exit $status
