package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// CI here runs lint and verify, the README's test command, the mutation
// sample, the soak, the suite on the oldest supported release, then the
// in-cluster suite on kind, in that order (.ci/run); a dropped or reordered
// step must fail here.
func TestCIRunsEveryStepInOrder(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var makes []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "step make "); ok {
			makes = append(makes, "make "+rest)
		}
	}
	if d := cmp.Diff([]string{"make lint verify", "make test", "make mutants-sample", "make soak", "make e2e-oldest", "make e2e-kind"}, makes); d != "" {
		t.Errorf(".ci/run make steps (-want +got):\n%s", d)
	}
}
