//go:build cilium

package ciliumproof

import (
	"strings"
	"testing"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// An all-digit last label is the one the generator rewrites; the rewrite
// must leave a host pkg/fence accepts at every label length, 63 included
// (the generator once appended a letter there and panicked under make fuzz).
func TestTheGeneratorsLastLabelIsAHostPkgFenceAccepts(t *testing.T) {
	for _, label := range []string{"7", "42", strings.Repeat("6", 62), strings.Repeat("6", 63), "a1", "x"} {
		got := notAllDigits(label)
		if len(got) != len(label) {
			t.Errorf("notAllDigits(%q) = %q: length %d, want %d", label, got, len(got), len(label))
		}
		if _, err := fence.NormalizeHost("example." + got); err != nil {
			t.Errorf("notAllDigits(%q) = %q, which pkg/fence refuses: %v", label, got, err)
		}
	}
}
