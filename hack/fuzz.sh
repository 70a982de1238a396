#!/usr/bin/env bash
# Runs every fuzz target of the repository (found with go test -list in every
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

# Every committed package that declares a target, nested modules included
# (e2e/ciliumproof: FuzzAdmittedBodies, whose oracle is Cilium's own code;
# its tests carry the build tag cilium, which no other package's do).
# A package is built from its own module's root; the instrumented packages
# are this repository's (the root module's path is a prefix of every nested
# module's), so Cilium's packages come from make test-cilium's build.
module_root() { # the directory of the nearest go.mod above $1
  local d=$1
  until [[ -f $d/go.mod ]]; do d=$(dirname "$d"); done
  echo "$d"
}
mapfile -t dirs < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u)
if [[ ${#dirs[@]} -eq 0 ]]; then
  echo "fuzz: no fuzz targets in the repository" >&2
  exit 1
fi
cache=$(go env GOCACHE)/fuzz
module=$(go list -m)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

status=0 n=0 retried=0
start=$(date +%s)
for dir in "${dirs[@]}"; do
  mod=$(module_root "$dir")
  rel=${dir#"$mod"}
  rel=./${rel#/} # the package's directory from its module's root
  pkg=$(cd "$mod" && go list "$rel")
  bin=$work/$(basename "$dir").test
  t0=$(date +%s)
  (cd "$mod" && go test -c -tags cilium -gcflags="$module/...=-d=libfuzzer" -o "$bin" "$rel")
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
    for try in 1 2; do
      before=$(find "$corpus" -type f | sort)
      if (cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^$target\$" -test.fuzztime "$fuzztime" -test.fuzzminimizetime 100x -test.fuzzcachedir "$cache/$pkg") 2>&1 | tee "$work/out"; [[ ${PIPESTATUS[0]} -eq 0 ]]; then
        break
      fi
      # Go's own race (go.dev/issue/75804, fixed in Go 1.27, not in 1.26.x):
      # when -fuzztime's deadline fires, the coordinator can report it as the
      # target's failure, "context deadline exceeded" with no failing input.
      # Only that signature, with no new file in the corpus, runs the target
      # once more, in full; anything else, or the same twice, fails.
      if [[ $try -eq 1 ]] && grep -qx '    context deadline exceeded' "$work/out" &&
        [[ $(find "$corpus" -type f | sort) == "$before" ]]; then
        echo "fuzz: $target: Go's fuzztime race (go.dev/issue/75804: \"context deadline exceeded\", no failing input written); running it once more"
        retried=$((retried + 1))
        continue
      fi
      echo "fuzz: $target FAILED; a failing input, when there is one, is in ${corpus#./}" >&2
      status=1
      break
    done
    echo "fuzz: $target took $(($(date +%s) - t0))s"
  done
done
echo "fuzz: $n targets in $(($(date +%s) - start))s ($retried run again after Go's fuzztime race)"
exit $status
