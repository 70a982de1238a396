package framework

import (
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Builder is the project's one object builder (internal/testing), shared
// with the webhook's unit tests.
type Builder = tst.ObjectWrapper

// MakeSandbox is the host's Sandbox named name in ns, ready to
// create: the shared fixture without a uid (the API server assigns one) and
// without the per-sandbox pod label, which a test adds with PodLabel when
// the Sandbox is to own an egress policy.
func MakeSandbox(ns, name string) *Builder {
	return tst.MakeSandbox(name).Namespace(ns).UID("").NoPodLabel(fence.DefaultPerSandboxLabelKey)
}

// MakeClaim is the host's SandboxClaim named name in ns, ready to create, on
// the same terms as MakeSandbox.
func MakeClaim(ns, name string) *Builder {
	return tst.MakeClaim(name).Namespace(ns).UID("").NoPodLabel(fence.DefaultPerSandboxLabelKey)
}
