// Package reporoot finds the checkout a test or a tool runs in. Tests run in
// their package's directory, in whichever of the repository's Go modules
// (docs/modules.md), and builds are -trimpath, so a source file's own path
// cannot say where the checkout is; the root module's go.mod can.
package reporoot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// Module is the root (product) module's path. The harness modules' paths
// are below it.
const Module = "github.com/sandbox-fence/sandbox-fence"

// Find returns the directory of the root module's go.mod at or above the
// working directory.
func Find() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && declares(string(b)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root not found: no go.mod declaring module " + Module + " at or above the working directory; run from inside the sandbox-fence checkout")
		}
		dir = parent
	}
}

// declares reports whether gomod's module line is Module's.
func declares(gomod string) bool {
	for l := range strings.Lines(gomod) {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == Module
		}
	}
	return false
}
