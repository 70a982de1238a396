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
	Env  map[string]string `json:"env"`
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
		"test":       {Runs: []string{"make test"}, Checkout: true, GoFromMod: true},
		"e2e-oldest": {Runs: []string{"make e2e-oldest"}, Needs: "test", Checkout: true, GoFromMod: true},
		"e2e-kind":   {Runs: []string{"make e2e-kind"}, Needs: "test", Checkout: true, GoFromMod: true},
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
	for _, target := range []string{"test", "e2e-oldest", "e2e-kind"} {
		if !strings.Contains(string(mk), "\n"+target+":") {
			t.Errorf("Makefile has no target %q that the workflow calls", target)
		}
	}
}

// CI here runs lint and verify, the README's test command, the suite on the
// oldest supported release, then the in-cluster suite on kind, in that order
// (.ci/run); a dropped or reordered step must fail here.
func TestCIRunsLintVerifyTestOldestThenKind(t *testing.T) {
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
	if d := cmp.Diff([]string{"make lint verify", "make test", "make e2e-oldest", "make e2e-kind"}, makes); d != "" {
		t.Errorf(".ci/run make steps (-want +got):\n%s", d)
	}
}

// The release workflow runs on a tag, builds with make release and the tag
// as VERSION, pushes the image index, and attaches every file make release
// writes (hack/release's list) to the GitHub release.
func TestReleaseWorkflow(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var wf workflow
	if err := yaml.UnmarshalStrict(b, &wf); err != nil {
		t.Fatalf("release.yml is not a valid workflow document: %v", err)
	}
	push, _ := wf.On["push"].(map[string]any)
	tags, _ := push["tags"].([]any)
	if len(tags) == 0 || len(wf.On) != 1 {
		t.Errorf("release.yml must run on tag pushes only: on = %v", wf.On)
	}
	var runs []string
	for _, j := range wf.Jobs {
		for _, st := range j.Steps {
			runs = append(runs, st.Run)
		}
	}
	all := strings.Join(runs, "\n")
	for _, want := range []string{
		`make release VERSION="${GITHUB_REF_NAME}"`,
		`crane push --index`,
		`go run github.com/google/go-containerregistry/cmd/crane@`,
	} {
		if !strings.Contains(strings.ReplaceAll(all, "$crane ", "crane "), want) && !strings.Contains(all, want) {
			t.Errorf("release.yml runs no %q", want)
		}
	}
	// Every file of a release: what hack/release writes for the tag.
	for _, f := range []string{"dist/install.yaml", "dist/fenceconfig.yaml", "dist/webhook-image.oci.tar", "dist/webhook.spdx.json", "dist/SHA256SUMS", `"dist/sandbox-fence-${GITHUB_REF_NAME#v}.tgz"`} {
		if !strings.Contains(all, "gh release create") || !strings.Contains(all, f) {
			t.Errorf("release.yml does not attach %s to the release", f)
		}
	}
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "\nrelease:") {
		t.Error("Makefile has no target release that the workflow calls")
	}
}
