package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandbox-fence/sandbox-fence/internal/ciliumversion"
)

// CI here runs lint and verify, the README's test command, the mutation
// sample, the soak, the suite on the oldest supported release, then the
// in-cluster suite on kind, in that order (.ci/run); a dropped or reordered
// step must fail here.
func TestCIRunsEveryStepInOrder(t *testing.T) {
	makes := makeCommands(t, filepath.Join("..", ".ci", "run"), "step ")
	if d := cmp.Diff([]string{"make lint verify", "make test", "make mutants-sample", "make soak", "make e2e-oldest", "make e2e-kind"}, makes); d != "" {
		t.Errorf(".ci/run make steps (-want +got):\n%s", d)
	}
}

// The workflows run what the docs say they run: e2e.yml the steps of
// .ci/run on GitHub and the datapath suite on the Cilium release the
// project pins, weekly.yml what is too long for every push (the whole
// mutation check, the Cilium proof at full size). A dropped or weakened
// command, or another Cilium, must fail here.
func TestWorkflowsRunTheirMakeCommands(t *testing.T) {
	cilium, err := ciliumversion.Read("..")
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string][]string{
		"e2e.yml":    {"make test", "make e2e-oldest", "make e2e-kind", "make e2e-cilium CILIUM_IMAGE=quay.io/cilium/cilium:" + cilium},
		"weekly.yml": {"make tools", "make mutants MUTANTS_FLAGS='-e2e on'", "make test-cilium CILIUMPROOF_BODIES=20000", "make fuzz-cilium CILIUM_FUZZ_TIME=1h"},
	} {
		makes := makeCommands(t, filepath.Join("..", ".github", "workflows", file), "run: ")
		if d := cmp.Diff(want, makes); d != "" {
			t.Errorf("%s make commands (-want +got):\n%s", file, d)
		}
	}
}

// makeCommands are the make commands of file's lines that start with
// prefix (indentation aside), in order.
func makeCommands(t *testing.T, file, prefix string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var makes []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix+"make "); ok {
			makes = append(makes, "make "+rest)
		}
	}
	return makes
}
