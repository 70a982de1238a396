package ciliumproof

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEvaluatorMatchesTheProductBuild: this module runs the shipped policies
// with the product's own evaluator, but its module graph also holds Cilium,
// whose requirements could raise the version of what evaluates CEL. Then the
// verdicts here would be those of another API server than the product's
// tests and users run. The modules that decide a verdict must resolve to the
// same versions in both graphs.
func TestEvaluatorMatchesTheProductBuild(t *testing.T) {
	mods := []string{"k8s.io/apiserver", "k8s.io/apimachinery", "k8s.io/api", "k8s.io/client-go", "github.com/google/cel-go"}
	versions := func(dir string) []string {
		cmd := exec.Command("go", append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}, mods...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -m in %s: %v: %s", dir, err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	here, product := versions("."), versions("../..")
	for i := range mods {
		if here[i] != product[i] {
			t.Errorf("%s here, %s in the product module: pin it in this go.mod to the product's version", here[i], product[i])
		}
	}
}

// TestTheReachModuleBuildsThisCilium: ciliumreach, whose repository computes
// what the pods reach, is a module of its own (package doc), so it names
// the Cilium release a second time. It must name this module's: the
// property is about one release.
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
