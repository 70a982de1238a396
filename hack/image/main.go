// Command image builds the webhook's OCI image without a container daemon:
// a static binary of ./cmd/webhook on an empty base, written as a
// docker-loadable tarball (`kind load image-archive`, `ctr images import`,
// `docker load`).
//
//	go run ./hack/image -tag sandbox-fence/webhook:dev -out bin/webhook-image.tar
//
// The image has no shell, no libc and no /etc/passwd: the process runs as
// the numeric user 65532:65532 (non-root), which Kubernetes' runAsNonRoot
// can verify without a passwd file.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const (
	binaryPath = "/webhook"
	nonRoot    = "65532:65532"
	source     = "https://github.com/sandbox-fence/sandbox-fence"
)

func main() {
	tag := flag.String("tag", "sandbox-fence/webhook:dev", "Image reference written into the tarball.")
	out := flag.String("out", "bin/webhook-image.tar", "Tarball to write.")
	arch := flag.String("arch", "amd64", "Target architecture (GOARCH) of linux/<arch>.")
	pkg := flag.String("pkg", "./cmd/webhook", "Go package of the binary.")
	version := flag.String("version", "", "Version label; defaults to `git describe --always --dirty`, else \"dev\".")
	flag.Parse()
	if err := run(context.Background(), *tag, *out, *arch, *pkg, *version); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, tag, out, arch, pkg, version string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", tag, err)
	}
	if version == "" {
		version = gitOr(ctx, "dev", "describe", "--always", "--dirty")
	}
	revision := gitOr(ctx, "", "rev-parse", "HEAD")

	tmp, err := os.MkdirTemp("", "webhook-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "webhook")
	if err := buildBinary(ctx, pkg, arch, bin); err != nil {
		return err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	img, err := newImage(b, arch, map[string]string{
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.title":    "sandbox-fence webhook",
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s linux/%s %s (%s)\n", out, ref, arch, digest, version)
	return nil
}

// buildBinary compiles a static, reproducible binary: no cgo (the base has no
// libc), -trimpath (no build paths in the binary), no VCS stamping noise.
func buildBinary(ctx context.Context, pkg, arch, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for linux/%s: %w", pkg, arch, err)
	}
	return nil
}

// epoch is the timestamp of the layer's files and the image: fixed, so the
// same binary always gives the same image digest.
var epoch = time.Unix(0, 0).UTC()

// newImage puts bin at /webhook (mode 0755, owned by root so the non-root
// process cannot rewrite it) on an empty base.
func newImage(bin []byte, arch string, labels map[string]string) (v1.Image, error) {
	layerTar, err := layerTar(bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       nonRoot,
		Entrypoint: []string{binaryPath},
		WorkingDir: "/",
		Labels:     labels,
	}
	return mutate.ConfigFile(img, cf)
}

func layerTar(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{
		Name: strings.TrimPrefix(binaryPath, "/"), Typeflag: tar.TypeReg, Mode: 0o755,
		Size: int64(len(bin)), ModTime: epoch, Uid: 0, Gid: 0, Format: tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func gitOr(ctx context.Context, def string, args ...string) string {
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		return def
	}
	return string(bytes.TrimSpace(out))
}
