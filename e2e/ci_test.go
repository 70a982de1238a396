package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
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

// The release workflow runs on a tag, builds with make release and the tag
// as VERSION and the configured image, logs in to the configured registry
// (ghcr.io by default) with the configured credential (the workflow's token
// by default, packages: write) and pushes the image index; hack/release's
// TestTheWorkflowAttachesEveryReleaseFile holds what it attaches.
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
	if wf.Permissions["contents"] != "write" || wf.Permissions["packages"] != "write" {
		t.Errorf("release.yml permissions %v: want contents: write (the GitHub release) and packages: write (GITHUB_TOKEN's push to ghcr.io)", wf.Permissions)
	}

	// The registry, the repository and the credential are configurable,
	// ghcr.io and the workflow's own token by default; the image is passed
	// to make release, so install.yaml pins what is pushed.
	env := map[string]string{}
	var login wfStep
	for _, j := range wf.Jobs {
		for k, v := range j.Env {
			env[k] = v
		}
		for _, st := range j.Steps {
			if strings.Contains(st.Run, "auth login") {
				login = st
			}
		}
	}
	for _, tc := range []struct{ name, value, want string }{
		{"REGISTRY", env["REGISTRY"], "${{ vars.RELEASE_REGISTRY || 'ghcr.io' }}"},
		{"RELEASE_IMAGE", env["RELEASE_IMAGE"], "${{ vars.RELEASE_IMAGE || format('{0}/{1}/sandbox-fence-webhook', vars.RELEASE_REGISTRY || 'ghcr.io', github.repository_owner) }}"},
		{"REGISTRY_USERNAME", env["REGISTRY_USERNAME"], "${{ vars.RELEASE_REGISTRY_USERNAME || github.actor }}"},
		{"the login's REGISTRY_PASSWORD", login.Env["REGISTRY_PASSWORD"], "${{ secrets.RELEASE_REGISTRY_TOKEN || secrets.GITHUB_TOKEN }}"},
	} {
		if tc.value != tc.want {
			t.Errorf("release.yml %s = %q, want %q", tc.name, tc.value, tc.want)
		}
	}
	for _, want := range []string{
		`make release VERSION="${GITHUB_REF_NAME}" RELEASE_IMAGE="${RELEASE_IMAGE}"`,
		`auth login "${REGISTRY}" -u "${REGISTRY_USERNAME}" --password-stdin`,
		`crane push --index "${layout}" "${RELEASE_IMAGE}:${GITHUB_REF_NAME}"`,
		`"${REGISTRY}"/*) ;;`, // the image is on the registry logged in to
	} {
		if !strings.Contains(strings.ReplaceAll(all, "$crane ", "crane "), want) {
			t.Errorf("release.yml runs no %q", want)
		}
	}
	if strings.Contains(all, "secrets.") {
		t.Error("release.yml puts a secret into a script's text; pass it through env")
	}

	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "\nrelease:") {
		t.Error("Makefile has no target release that the workflow calls")
	}
	if !strings.Contains(string(mk), "-image $(RELEASE_IMAGE)") {
		t.Error("Makefile's release does not pass RELEASE_IMAGE to hack/release's -image")
	}
}
