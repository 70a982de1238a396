//go:build cilium

package ciliumproof

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// byteSource draws the generator's choices from the fuzzer's bytes, so that
// coverage-guided mutation of the input steers which mutations and values a
// body gets; past the input's end it continues from a source seeded by the
// input, so long bodies stay varied.
type byteSource struct {
	data []byte
	rest rand.Source
}

func newByteSource(data []byte) *byteSource {
	h := fnv.New64a()
	h.Write(data)
	return &byteSource{data: data, rest: rand.NewPCG(h.Sum64(), 18)}
}

func (s *byteSource) Uint64() uint64 {
	if len(s.data) == 0 {
		return s.rest.Uint64()
	}
	var b [8]byte
	n := copy(b[:], s.data)
	s.data = s.data[n:]
	return binary.LittleEndian.Uint64(b[:])
}

var (
	fuzzOnce   sync.Once
	fuzzProver *Prover
	fuzzErr    error
)

// FuzzAdmittedBodies is the long-running form of
// TestAPodReachesItsAllowlistAndDNSOnly: the fuzzer chooses the host's
// inputs and the mutations; any admitted body Cilium refuses or under which
// a pod reaches other than the contract says (its allowlist and DNS), or a
// host body the fence denies, fails.
//
//	cd e2e/ciliumproof && go test -run '^$' -fuzz FuzzAdmittedBodies -fuzztime 1h
//
// make fuzz runs it for FUZZ_TIME (15 s) with only this repository's packages
// instrumented (hack/fuzz.sh); make fuzz-cilium runs it long.
func FuzzAdmittedBodies(f *testing.F) {
	// The coordinator runs this before it starts the workers, which inherit
	// its environment: it builds ciliumreach for them all.
	if _, err := reachBinary(); err != nil {
		f.Fatal(err)
	}
	// The seeds are the committed corpus, testdata/fuzz/FuzzAdmittedBodies:
	// plain go test replays them, hack/fuzz.sh (make fuzz, part of make
	// test) fuzzes from them for FUZZ_TIME.
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzOnce.Do(func() {
			bundle, err := LoadBundle(policiesDir)
			if err != nil {
				fuzzErr = err
				return
			}
			p := &Prover{}
			if p.Reach, fuzzErr = sharedReach(); fuzzErr != nil {
				return
			}
			if p.Baseline, fuzzErr = filepath.Abs(baselineFile); fuzzErr != nil {
				return
			}
			p.Fence, fuzzErr = StartFence(context.Background(), bundle, namespace, fence.DefaultPerSandboxLabelKey, customLabelKey)
			fuzzProver = p
		})
		if fuzzErr != nil {
			t.Fatal(fuzzErr)
		}
		g := NewGenerator(newByteSource(data), namespace, fence.DefaultPerSandboxLabelKey, customLabelKey)
		b := g.Next()
		o, err := Run(context.Background(), fuzzProver, b, g.Rand())
		if err != nil {
			t.Fatal(err)
		}
		if d := o.Defects(); len(d) > 0 {
			js, _ := json.Marshal(b.Object)
			t.Fatalf("%v after %v:\n%s", d, b.Mutations, js)
		}
	})
}
