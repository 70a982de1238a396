// Package policies carries the shipped ValidatingAdmissionPolicies and
// their bindings into the binaries that evaluate them offline
// (kubectl fence test), with the example FenceConfig and namespaces the
// cases of this directory run under (README.md, Cases).
package policies

import "embed"

// FS holds <name>/policy.yaml, its binding (<name>/binding.yaml, or
// <name>/binding/binding.yaml for an opt-in policy), and
// testdata/fenceconfig.yaml and testdata/namespaces.yaml.
//
//go:embed */policy.yaml */binding.yaml */binding/binding.yaml testdata/fenceconfig.yaml testdata/namespaces.yaml
var FS embed.FS
