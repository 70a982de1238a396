package testing

import (
	"encoding/json"
	"os/exec"
	"testing"
)

// PrometheusOperatorVersion is the prometheus-operator release whose CRD
// schemas the monitoring component (config/components/monitoring) is
// validated against, offline and by the e2e suite's server-side dry run.
const PrometheusOperatorVersion = "v0.85.0"

// ModuleDir returns the directory of module@version in the Go module cache,
// downloading it through the module proxy (in a scratch module, so the
// project's go.mod never depends on it). It fails the test when the module
// cannot be had: a check against an upstream schema must not turn into a
// skip.
func ModuleDir(t testing.TB, module, version string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = t.TempDir()
	cmd.Env = append(cmd.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); err != nil || jerr != nil || mod.Error != "" || mod.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v %s %s", module, version, err, mod.Error, out)
	}
	return mod.Dir
}
