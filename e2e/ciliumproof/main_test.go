package ciliumproof

import (
	"os"
	"testing"

	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
)

// TestMain silences the informers' klog chatter; failures carry everything
// needed.
func TestMain(m *testing.M) {
	vapeval.QuietKlog()
	os.Exit(m.Run())
}
