// Package kustomize renders a kustomization an admin would write beside a
// checkout's config/ (linked as config/), with kustomize's own API: what the
// chart generator (hack/chart) and the release (hack/release) build from.
package kustomize

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Build runs kustomize build on k, a kustomization whose paths start at
// config/, with configDir linked there.
func Build(configDir string, k map[string]any) (resmap.ResMap, error) {
	abs, err := filepath.Abs(configDir)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "sandbox-fence-kustomize-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Symlink(abs, filepath.Join(tmp, "config")); err != nil {
		return nil, err
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), b, 0o644); err != nil {
		return nil, err
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), tmp)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", b, err)
	}
	return m, nil
}
