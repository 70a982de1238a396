// Command mkimage packs one static binary into a single-layer image and
// writes it as a docker-archive tarball that `ctr images import` reads, the
// way hack/image packs the webhook: no Docker daemon, no registry.
//
// Usage: go run ./hack/node/mkimage -bin bin/pause -tag registry.k8s.io/pause:3.10 -out bin/pause-image.tar
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	bin := flag.String("bin", "", "static binary to pack (required)")
	tag := flag.String("tag", "", "image reference to record in the tarball (required)")
	out := flag.String("out", "", "tarball to write (required)")
	flag.Parse()
	if *bin == "" || *tag == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "mkimage: -bin, -tag and -out are required")
		os.Exit(2)
	}
	if err := run(*bin, *tag, *out); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

func run(bin, tag, out string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", tag, err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	target := "/" + path.Base(bin)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(fileTar(target, data))), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	// A fixed creation time keeps the image ID stable across rebuilds, so a
	// warm run re-imports nothing new.
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Entrypoint = []string{target}
	cfg.Config.User = "65535:65535"
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// fileTar is a tar stream holding one executable at name.
func fileTar(name string, data []byte) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: name[1:], Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)})
	_, _ = tw.Write(data)
	_ = tw.Close()
	return buf.Bytes()
}
