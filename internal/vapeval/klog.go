package vapeval

import (
	"flag"
	"io"

	"k8s.io/klog/v2"
)

// QuietKlog silences klog, which the plugin's informers write to on every
// start and stop; call it from TestMain. Test failures carry everything
// needed.
func QuietKlog() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}
