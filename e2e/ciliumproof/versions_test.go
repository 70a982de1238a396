//go:build cilium

package ciliumproof

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheReachModuleBuildsThisCilium: ciliumreach, whose repository computes
// what the pods reach, is a module of its own (package doc), so it names
// the Cilium release a second time. It must name the e2e module's: the
// property is about one release. (That the e2e module evaluates the policies
// with the product's own versions, TestNestedModulesCompileTheRootsVersions
// in hack/tools holds.)
func TestTheReachModuleBuildsThisCilium(t *testing.T) {
	version := func(dir string) string {
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/cilium/cilium")
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -m in %s: %v", dir, err)
		}
		return strings.TrimSpace(string(out))
	}
	if here, there := version("."), version(reachDir); here != there {
		t.Errorf("Cilium %s here, %s in %s/go.mod: require the same release in both", here, there, reachDir)
	}
}
