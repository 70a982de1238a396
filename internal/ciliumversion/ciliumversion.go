// Package ciliumversion reads the one pin of the Cilium release the project
// is proven against, the one docs/contract.md states: the require line of
// e2e/go.mod, the harness's module, whose e2e/ciliumproof builds Cilium's
// own code.
// Everything else that needs the version (the real CiliumNetworkPolicy CRD
// the end-to-end suite installs, the policies' type check) reads it here, so
// moving to another Cilium release is one edit of that go.mod.
package ciliumversion

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Module is Cilium's module path.
const Module = "github.com/cilium/cilium"

// GoMod is the file holding the pin, relative to the repository root.
const GoMod = "e2e/go.mod"

// Read returns the pinned version, e.g. "v1.20.2".
func Read(repoRoot string) (string, error) {
	path := filepath.Join(repoRoot, filepath.FromSlash(GoMod))
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	v, err := Required(b, Module)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// Required finds the version go.mod requires of module, in a require block
// or a single-line require.
func Required(gomod []byte, module string) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	inBlock := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "require" && f[1] == "(":
			inBlock = true
			continue
		case inBlock && len(f) == 1 && f[0] == ")":
			inBlock = false
			continue
		case len(f) == 3 && f[0] == "require":
			f = f[1:]
		case !inBlock:
			continue
		}
		if len(f) == 2 && f[0] == module && strings.HasPrefix(f[1], "v") {
			return f[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no require of %s", module)
}
