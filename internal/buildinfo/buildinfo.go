// Package buildinfo reads the version Go stamped on the running binary, for
// the webhook's sandbox_fence_build_info metric and `kubectl fence version`.
package buildinfo

import "runtime/debug"

// version is set by make release (-ldflags -X), which builds from a
// checkout, where Go stamps no module version.
var version string

// Version is the release the binary was built from: the one make release
// set, else the version Go stamped on the main module (go install
// ...@v0.1.0), else "(devel)".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
