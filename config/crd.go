// Package config carries what offline evaluation needs of the install into
// the binaries (kubectl fence test): the FenceConfig CRD, whose defaults
// fill in a configuration as the API server serves it.
package config

import "embed"

// CRDs holds crd/bases, the CRDs sandbox-fence installs.
//
//go:embed crd/bases/*.yaml
var CRDs embed.FS

// FenceConfigCRD is the FenceConfig CRD's file in CRDs.
const FenceConfigCRD = "crd/bases/fence.sandbox.namzu.ai_fenceconfigs.yaml"
