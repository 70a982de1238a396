package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// file is one entry of the image's flattened filesystem.
type file struct {
	Mode     int64
	Uid, Gid int
	Content  []byte
}

// summary is what a runtime and Kubernetes read from the image.
type summary struct {
	OS, Arch, User, WorkingDir string
	Entrypoint, Cmd, Env       []string
	Labels                     map[string]string
	Files                      map[string]file
}

func TestImageTarball(t *testing.T) {
	bin := []byte("\x7fELF fake webhook binary")
	labels := map[string]string{"org.opencontainers.image.source": source, "org.opencontainers.image.version": "v0.1.0"}
	sp := webhook
	sp.Arch, sp.Labels = "arm64", labels
	img, err := newImage(bin, sp)
	if err != nil {
		t.Fatal(err)
	}
	// Through the tarball, as kind and ctr read it.
	path := filepath.Join(t.TempDir(), "image.tar")
	tag, err := name.NewTag("sandbox-fence/webhook:dev")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
	loaded, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := loaded.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	got := summary{OS: cf.OS, Arch: cf.Architecture, User: cf.Config.User, WorkingDir: cf.Config.WorkingDir,
		Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, Labels: cf.Config.Labels, Files: files(t, loaded)}
	want := summary{OS: "linux", Arch: "arm64", User: "65532:65532", WorkingDir: "/", Entrypoint: []string{"/webhook"},
		Labels: labels, Files: map[string]file{"webhook": {Mode: 0o755, Content: bin}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("image (-want +got):\n%s", diff)
	}

	// The same binary gives the same digest: nothing time- or host-dependent
	// is baked in.
	again, err := newImage(bin, sp)
	if err != nil {
		t.Fatal(err)
	}
	d1, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := again.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Errorf("digest not reproducible: %s != %s", d1, d2)
	}
}

func files(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if _, err := io.Copy(&b, tr); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeSymlink {
			b.WriteString("-> " + h.Linkname)
		}
		out[h.Name] = file{Mode: h.Mode, Uid: h.Uid, Gid: h.Gid, Content: b.Bytes()}
	}
}

func TestImageRefusesARelativeEntrypoint(t *testing.T) {
	sp := webhook
	sp.Entrypoint = "pause"
	if _, err := newImage([]byte("bin"), sp); err == nil {
		t.Fatal("newImage accepted the relative entrypoint \"pause\"; want an error")
	}
}

// A system image (kube-proxy) needs files beside its binary, links kept as
// links, an environment, and root as its user.
func TestImageWithATreeAnEnvironmentAndRoot(t *testing.T) {
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, "usr", "sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "usr", "sbin", "xtables-nft-multi"), []byte("multi"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("xtables-nft-multi", filepath.Join(tree, "usr", "sbin", "iptables")); err != nil {
		t.Fatal(err)
	}
	bin := []byte("\x7fELF kube-proxy")
	sp := spec{Entrypoint: "/usr/local/bin/kube-proxy", Arch: "amd64", Env: []string{"PATH=/usr/local/bin:/usr/sbin"}, Tree: tree}
	img, err := newImage(bin, sp)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	got := summary{OS: cf.OS, Arch: cf.Architecture, User: cf.Config.User, WorkingDir: cf.Config.WorkingDir,
		Entrypoint: cf.Config.Entrypoint, Env: cf.Config.Env, Files: files(t, img)}
	want := summary{OS: "linux", Arch: "amd64", WorkingDir: "/", Entrypoint: []string{"/usr/local/bin/kube-proxy"},
		Env: []string{"PATH=/usr/local/bin:/usr/sbin"},
		Files: map[string]file{
			"usr":                        {Mode: 0o755, Content: []byte{}},
			"usr/sbin":                   {Mode: 0o755, Content: []byte{}},
			"usr/sbin/xtables-nft-multi": {Mode: 0o755, Content: []byte("multi")},
			"usr/sbin/iptables":          {Mode: 0o777, Content: []byte("-> xtables-nft-multi")},
			"usr/local/bin/kube-proxy":   {Mode: 0o755, Content: bin},
		}}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("image (-want +got):\n%s", diff)
	}
}
