// Package buildinfo reads the version Go stamped on the running binary, for
// the webhook's sandbox_fence_build_info metric and `kubectl fence version`.
package buildinfo

import "runtime/debug"

// Version is the version Go stamped on the binary's main module: the
// release tag when built from one (go install ...@v0.1.0, make release),
// "(devel)" from an untagged tree. Nothing here sets a linker flag.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
