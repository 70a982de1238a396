package policies_test

import (
	"os"
	"testing"

	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
)

// TestMain silences the informers' klog chatter; test failures carry
// everything needed.
func TestMain(m *testing.M) {
	vapeval.QuietKlog()
	os.Exit(m.Run())
}
