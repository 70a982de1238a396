package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Two releases of the same commit into two directories are identical, byte
// for byte (SHA256SUMS equal), and hold every file the workflow attaches.
// Cross-compiles the webhook for amd64 and arm64 twice (cached after the
// first run).
func TestReleaseIsReproducible(t *testing.T) {
	os.Unsetenv("SOURCE_DATE_EPOCH") // from the commit, as make release does
	var sums []string
	for i := range 2 {
		out := filepath.Join(t.TempDir(), "dist")
		if err := run(context.Background(), options{Version: "v0.0.1-test", Image: DefaultImage, Out: out, Root: "../.."}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, string(b))
		if i == 0 {
			var names []string
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				names = append(names, strings.Fields(line)[1])
			}
			want := []string{"fenceconfig.yaml", "install.yaml", "sandbox-fence-0.0.1-test.tgz", "webhook-image.oci.tar", "webhook.spdx.json"}
			if !slices.Equal(names, want) {
				t.Errorf("release files %v, want %v", names, want)
			}
			inst, _ := os.ReadFile(filepath.Join(out, "install.yaml"))
			if !strings.Contains(string(inst), "image: "+DefaultImage+"@sha256:") {
				t.Errorf("install.yaml does not pin %s by digest", DefaultImage)
			}
			// One kubectl apply cannot create a CRD and an object of it:
			// install.yaml holds no FenceConfig, fenceconfig.yaml only it.
			cfg, _ := os.ReadFile(filepath.Join(out, "fenceconfig.yaml"))
			if n := strings.Count(string(inst), "\nkind: FenceConfig\n"); n != 0 {
				t.Errorf("install.yaml holds %d FenceConfig objects; one kubectl apply of it would fail to map them", n)
			}
			if n := strings.Count(string(cfg), "\nkind: FenceConfig\n"); n != 1 || strings.Count(string(cfg), "\nkind: ") != 1 {
				t.Errorf("fenceconfig.yaml holds %d FenceConfig objects of %d, want the one and nothing else:\n%s", n, strings.Count(string(cfg), "\nkind: "), cfg)
			}
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("two releases of one commit differ:\n%s\n%s", sums[0], sums[1])
	}
}
