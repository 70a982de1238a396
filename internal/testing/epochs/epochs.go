// Package epochs reads the committed corpus of holder-epoch strings
// (pkg/fence/testdata/epochs.jsonl): the one list of examples of the
// holder-epoch grammar that the Go parser's tests, the holder-epoch
// policy's generated cases and the differential fuzz target all use.
//
// pkg/fence, a module of its own, reads the same file in its own test.
package epochs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandbox-fence/sandbox-fence/internal/reporoot"
)

// Epoch is one line of the corpus.
type Epoch struct {
	// Raw is the annotation value exactly as stored.
	Raw string `json:"raw"`
	// Epoch is the value Raw reads as, when it is well formed.
	Epoch uint64 `json:"epoch"`
	// Malformed is set when Raw is outside the grammar or above MaxEpoch.
	Malformed bool `json:"malformed"`
	// Why says, in a few words, what the line shows.
	Why string `json:"why"`
}

// Name labels the line in test output.
func (e Epoch) Name() string { return fmt.Sprintf("%s %q", e.Why, e.Raw) }

// rel is the corpus's path from the repository root.
var rel = filepath.Join("pkg", "fence", "testdata", "epochs.jsonl")

// Path is the corpus's path in the checkout the test runs in.
func Path() (string, error) {
	root, err := reporoot.Find()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, rel), nil
}

// Load reads the corpus. Lines must be unique, carry a reason, and a
// malformed line no epoch: a corpus that says two things of one string
// would let the tests that share it disagree.
func Load() ([]Epoch, error) {
	path, err := Path()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Epoch
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		var e Epoch
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.DisallowUnknownFields()
		if err := d.Decode(&e); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		switch {
		case seen[e.Raw]:
			return nil, fmt.Errorf("%s:%d: %q is listed twice", path, n, e.Raw)
		case e.Why == "":
			return nil, fmt.Errorf("%s:%d: %q has no why", path, n, e.Raw)
		case e.Malformed && e.Epoch != 0:
			return nil, fmt.Errorf("%s:%d: %q is malformed but reads as %d", path, n, e.Raw, e.Epoch)
		}
		seen[e.Raw] = true
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: empty", path)
	}
	return out, nil
}
