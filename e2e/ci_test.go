package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// workflow is the subset of the GitHub Actions schema the file uses, decoded
// strictly so that a misspelt key fails the test.
type workflow struct {
	Name        string            `json:"name"`
	On          map[string]any    `json:"on"`
	Permissions map[string]string `json:"permissions"`
	Concurrency map[string]any    `json:"concurrency"`
	Jobs        map[string]struct {
		Name           string            `json:"name"`
		RunsOn         string            `json:"runs-on"`
		Needs          any               `json:"needs"`
		TimeoutMinutes int               `json:"timeout-minutes"`
		Env            map[string]string `json:"env"`
		Steps          []wfStep          `json:"steps"`
	} `json:"jobs"`
}

type wfStep struct {
	Name string            `json:"name"`
	Uses string            `json:"uses"`
	Run  string            `json:"run"`
	If   string            `json:"if"`
	With map[string]string `json:"with"`
}

// The CI workflow is only useful while its jobs call the make targets the
// README documents; a renamed target or a dropped step must fail here, not
// silently in CI.
func TestWorkflowRunsTheDocumentedTargets(t *testing.T) {
	if e := os.Getenv(framework.EnvEnforcer); e != "" && e != framework.ShippedEnforcer {
		t.Skipf("n/a: checks the project's CI workflow, not a fence rule; %s=%s", framework.EnvEnforcer, e)
	}
	b, err := os.ReadFile(filepath.Join("..", ".github", "workflows", "e2e.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf workflow
	if err := yaml.UnmarshalStrict(b, &wf); err != nil {
		t.Fatalf("e2e.yml is not a valid workflow document: %v", err)
	}
	type jobSummary struct {
		Runs      []string
		Needs     string
		Checkout  bool
		GoFromMod bool
	}
	got := map[string]jobSummary{}
	for name, j := range wf.Jobs {
		var s jobSummary
		if n, ok := j.Needs.(string); ok {
			s.Needs = n
		}
		for _, st := range j.Steps {
			if st.Run != "" {
				s.Runs = append(s.Runs, strings.TrimSpace(st.Run))
			}
			s.Checkout = s.Checkout || strings.HasPrefix(st.Uses, "actions/checkout@")
			s.GoFromMod = s.GoFromMod || (strings.HasPrefix(st.Uses, "actions/setup-go@") && st.With["go-version-file"] == "go.mod")
		}
		slices.Sort(s.Runs)
		got[name] = s
	}
	want := map[string]jobSummary{
		"test":     {Runs: []string{"make test"}, Checkout: true, GoFromMod: true},
		"e2e-kind": {Runs: []string{"make e2e-kind"}, Needs: "test", Checkout: true, GoFromMod: true},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("workflow jobs (-want +got):\n%s", d)
	}
	if _, ok := wf.On["pull_request"]; !ok {
		t.Errorf("workflow does not run on pull_request: %v", wf.On)
	}

	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"test", "e2e-kind"} {
		if !strings.Contains(string(mk), "\n"+target+":") {
			t.Errorf("Makefile has no target %q that the workflow calls", target)
		}
	}
}

// CI here runs the README's test command, the suite on the oldest supported
// release, then the in-cluster suite on kind,
// in that order (.ci/run); a dropped or reordered step must fail here.
func TestCIRunsTestThenOldestThenKind(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var makes []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "make ") {
			makes = append(makes, line)
		}
	}
	if d := cmp.Diff([]string{"make test", "make e2e-oldest", "make e2e-kind"}, makes); d != "" {
		t.Errorf(".ci/run make steps (-want +got):\n%s", d)
	}
}
