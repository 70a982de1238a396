package ciliumproof

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"math/rand/v2"
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
	fuzzFenceOnce sync.Once
	fuzzFence     *Fence
	fuzzFenceErr  error
)

// FuzzAdmittedBodies is the long-running form of
// TestAdmittedBodiesStayWithinTheContract: the fuzzer chooses the host's
// inputs and the mutations; any admitted body Cilium refuses or reads wider
// than contract §4.6, or a host body the fence denies, fails.
//
//	cd e2e/ciliumproof && go test -run '^$' -fuzz FuzzAdmittedBodies -fuzztime 1h
//
// make fuzz runs it for FUZZ_TIME (15 s) with only this repository's packages
// instrumented (hack/fuzz.sh); make fuzz-cilium runs it long.
func FuzzAdmittedBodies(f *testing.F) {
	// The seeds are the committed corpus, testdata/fuzz/FuzzAdmittedBodies:
	// plain go test replays them, hack/fuzz.sh (make fuzz, part of make
	// test) fuzzes from them for FUZZ_TIME.
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzFenceOnce.Do(func() {
			bundle, err := LoadBundle(policiesDir)
			if err != nil {
				fuzzFenceErr = err
				return
			}
			fuzzFence, fuzzFenceErr = StartFence(context.Background(), bundle, namespace, fence.DefaultPerSandboxLabelKey, customLabelKey)
		})
		if fuzzFenceErr != nil {
			t.Fatal(fuzzFenceErr)
		}
		g := NewGenerator(newByteSource(data), namespace, fence.DefaultPerSandboxLabelKey, customLabelKey)
		b := g.Next()
		o, err := Run(context.Background(), fuzzFence, b, g.Rand())
		if err != nil {
			t.Fatal(err)
		}
		if d := o.Defects(); len(d) > 0 {
			js, _ := json.Marshal(b.Object)
			t.Fatalf("%v after %v:\n%s", d, b.Mutations, js)
		}
	})
}
