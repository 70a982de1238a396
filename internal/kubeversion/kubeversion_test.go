package kubeversion_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
)

func TestCheckRefusesOnlyReleasesBelowTheMinimum(t *testing.T) {
	tests := []struct {
		name       string
		gitVersion string
		wantErr    string
	}{
		{"the minimum itself is supported", "v1.33.0", ""},
		{"the oldest tested patch release is supported", kubeversion.OldestTested, ""},
		{"a provider's build of the minimum minor is supported", "v1.33.5-gke.1200", ""},
		{"a later minor is supported", "v1.37.2", ""},
		{"a release candidate of the minimum minor is supported", "v1.33.0-rc.1", ""},
		{"the last patch of the minor below is refused", "v1.32.13", "Kubernetes v1.32.13 is older than v1.33.0, the oldest release sandbox-fence supports"},
		{"an old major is refused", "v0.99.0", "Kubernetes v0.99.0 is older than v1.33.0"},
		{"an unreadable version is refused", "master", `Kubernetes version "master" cannot be read`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := kubeversion.Check(tt.gitVersion)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && !strings.Contains(got, tt.wantErr) {
				t.Errorf("Check(%q) = %q, want an error containing %q", tt.gitVersion, got, tt.wantErr)
			}
		})
	}
}

func TestOldestTestedIsTheFirstMinorWithoutTheCELRace(t *testing.T) {
	oldest, fixed := version.MustParseSemantic(kubeversion.OldestTested), version.MustParseSemantic(kubeversion.FirstWithoutCELRace)
	if oldest.Major() != fixed.Major() || oldest.Minor() != fixed.Minor() {
		t.Errorf("OldestTested %s is not a release of %s's minor: CI would test a release with the CEL race, or skip the oldest minor without it", oldest, fixed)
	}
	if d := cmp.Diff("1.32", kubeversion.MinimumCompatibility().String()); d != "" {
		t.Errorf("MinimumCompatibility (-want +got):\n%s", d)
	}
}

// The build script reads Minimum from this package's source and refuses
// to build an older release before building anything, with a message that
// says why (the harness refuses to install on one: e2e/framework).
func TestBuildScriptRefusesAReleaseBelowTheMinimum(t *testing.T) {
	root := repoRoot(t)
	bin := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "tools", "build.sh"))
	cmd.Env = append(os.Environ(), "KUBERNETES_VERSION=v1.32.13", "BIN="+bin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("build.sh with v1.32.13: %v, want exit status 1\n%s", err, out.String())
	}
	want := "tools: KUBERNETES_VERSION=v1.32.13 is older than v1.33.0, the oldest release sandbox-fence supports (internal/kubeversion.Minimum, docs/install.md); not building it\n"
	if d := cmp.Diff(want, out.String()); d != "" {
		t.Errorf("build.sh output (-want +got):\n%s", d)
	}
	if entries, _ := os.ReadDir(bin); len(entries) != 0 {
		t.Errorf("build.sh wrote %d entries into BIN before refusing", len(entries))
	}
}

// What the docs promise follows the constant: README.md and docs/install.md
// state the minimum.
func TestTheDocsStateTheMinimum(t *testing.T) {
	root := repoRoot(t)
	m := version.MustParseSemantic(kubeversion.Minimum)
	claim := "Kubernetes " + m.String()[:strings.LastIndex(m.String(), ".")] + " or later"
	for _, doc := range []string{"README.md", "docs/install.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), claim) {
			t.Errorf("%s does not say %q", doc, claim)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}
