// Command image builds an OCI image without a container daemon: a static
// binary (of one Go package, or prebuilt with -bin) on an empty base,
// optionally with a tree of files beside it (-tree), written as a
// docker-loadable tarball (`kind load image-archive`, `ctr images import`,
// `docker load`). It builds the webhook's image and the Kubernetes images
// of the offline kind node image (hack/kind/node-image.sh).
//
// It builds -pkg in the working directory's module, so it runs from the
// repository's root for the webhook (make image builds it into bin/harness/
// and runs it there) and from hack/ for the pause program:
//
//	bin/harness/image -tag sandbox-fence/webhook:dev -out bin/webhook-image.tar
//	(cd hack && ../bin/harness/image -pkg ./kind/pause -entrypoint /pause -user 65535:65535 \
//	    -title pause -version 3.10.2 -tag registry.k8s.io/pause:3.10.2 -out pause.tar)
//	bin/harness/image -bin bin/kube-proxy -entrypoint /usr/local/bin/kube-proxy -user "" \
//	    -tree STAGE -env PATH=/usr/local/bin:/usr/sbin:/usr/bin ... -out kube-proxy.tar
//
// With -oci it builds one image per -platforms entry (cross-compiled with
// GOARCH, CGO_ENABLED=0) and writes them under one OCI image index as an
// OCI image-layout tarball whose index.json is that index, so its digest is
// the one `crane push --index` publishes (make release, docs/install.md):
//
//	bin/harness/image -oci dist/webhook-image.oci.tar -platforms linux/amd64,linux/arm64 \
//	    -version v0.1.0 -bin-dir bin/release -digest-file bin/release/digest
//
// The webhook's image has no shell, no libc and no /etc/passwd: the process
// runs as the numeric user 65532:65532 (non-root), which Kubernetes'
// runAsNonRoot can verify without a passwd file. `-user ""` leaves the user
// unset (root), as the upstream control-plane images do.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
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

const source = "https://github.com/sandbox-fence/sandbox-fence"

// spec is what the image says about its one binary.
type spec struct {
	Entrypoint string // absolute path of the binary in the image
	User       string // numeric uid:gid, so runAsNonRoot can verify it without /etc/passwd; "" is root
	Arch       string // GOARCH of linux/<arch>
	Labels     map[string]string
	Env        []string // KEY=VALUE
	// Tree is a directory whose files, links and directories go into the
	// image under / (owned by root, modes kept), beside the binary.
	Tree string
	// LDFlags are added to the build's -ldflags (kubectl fence's version).
	LDFlags string
}

// webhook is the image the product ships: the binary at /webhook, run as the
// non-root 65532:65532 that config/webhook's securityContext names.
var webhook = spec{Entrypoint: "/webhook", User: "65532:65532", Arch: "amd64"}

func main() {
	tag := flag.String("tag", "sandbox-fence/webhook:dev", "Image reference written into the tarball.")
	out := flag.String("out", "bin/webhook-image.tar", "Tarball to write.")
	arch := flag.String("arch", webhook.Arch, "Target architecture (GOARCH) of linux/<arch>.")
	pkg := flag.String("pkg", "./cmd/webhook", "Go package of the binary.")
	version := flag.String("version", "", "Version label; defaults to `git describe --always --dirty`, else \"dev\".")
	entrypoint := flag.String("entrypoint", webhook.Entrypoint, "Absolute path of the binary in the image, and the entrypoint.")
	user := flag.String("user", webhook.User, "Numeric uid:gid the process runs as (non-root).")
	title := flag.String("title", "sandbox-fence webhook", "org.opencontainers.image.title label.")
	prebuilt := flag.String("bin", "", "A prebuilt static binary to pack instead of building -pkg.")
	tree := flag.String("tree", "", "A directory whose contents also go into the image under /.")
	ociOut := flag.String("oci", "", "Write a multi-platform OCI image-layout tarball here instead of -out.")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "With -oci: the linux/<arch> platforms of the index, comma-separated.")
	binDir := flag.String("bin-dir", "", "With -oci: keep each platform's binary here as <entrypoint's name>-linux-<arch>.")
	ldflags := flag.String("ldflags", "", "Added to the build's -ldflags=-s -w (e.g. -X pkg.version=v0.1.0).")
	digestFile := flag.String("digest-file", "", "With -oci: write the index digest (sha256:...) to this file.")
	var env []string
	flag.Func("env", "KEY=VALUE in the image's environment (repeatable).", func(v string) error {
		if !strings.Contains(v, "=") {
			return fmt.Errorf("%q: want KEY=VALUE", v)
		}
		env = append(env, v)
		return nil
	})
	flag.Parse()
	sp := spec{Entrypoint: *entrypoint, User: *user, Arch: *arch, Env: env, Tree: *tree, LDFlags: *ldflags}
	if *ociOut != "" {
		if err := runIndex(context.Background(), *ociOut, *platforms, *pkg, *binDir, *digestFile, *version, *title, sp); err != nil {
			fmt.Fprintln(os.Stderr, "image:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(context.Background(), *tag, *out, *pkg, *prebuilt, *version, *title, sp); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, tag, out, pkg, prebuilt, version, title string, sp spec) error {
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
	bin := prebuilt
	if bin == "" {
		bin = filepath.Join(tmp, "webhook")
		if err := buildBinary(ctx, pkg, sp.Arch, sp.LDFlags, bin); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	sp.Labels = map[string]string{
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.title":    title,
	}
	img, err := newImage(b, sp)
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
	fmt.Printf("wrote %s: %s linux/%s %s (%s)\n", out, ref, sp.Arch, digest, version)
	return nil
}

// buildBinary compiles a static, reproducible binary: no cgo (the base has no
// libc), -trimpath (no build paths in the binary), no VCS stamping noise.
func buildBinary(ctx context.Context, pkg, arch, ldflags, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", strings.TrimSpace("-ldflags=-s -w "+ldflags), "-o", out, pkg)
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

// newImage puts bin at sp.Entrypoint (mode 0755, owned by root so the
// non-root process cannot rewrite it) on an empty base.
func newImage(bin []byte, sp spec) (v1.Image, error) {
	if !strings.HasPrefix(sp.Entrypoint, "/") {
		return nil, fmt.Errorf("-entrypoint %q: must be an absolute path", sp.Entrypoint)
	}
	layerTar, err := layerTar(sp.Entrypoint, bin, sp.Tree)
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
	cf.OS, cf.Architecture = "linux", sp.Arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       sp.User,
		Entrypoint: []string{sp.Entrypoint},
		WorkingDir: "/",
		Labels:     sp.Labels,
		Env:        sp.Env,
	}
	return mutate.ConfigFile(img, cf)
}

func layerTar(path string, bin []byte, tree string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if tree != "" {
		if err := addTree(tw, tree); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{
		Name: strings.TrimPrefix(path, "/"), Typeflag: tar.TypeReg, Mode: 0o755,
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

// addTree writes the contents of dir into tw: directories, regular files
// and symbolic links (kept as links), owned by root, modes as on disk,
// timestamps fixed so the digest depends only on the contents.
func addTree(tw *tar.Writer, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), ModTime: epoch, Format: tar.FormatPAX}
		var content []byte
		switch {
		case fi.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		case fi.Mode()&fs.ModeSymlink != 0:
			if h.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
			h.Typeflag = tar.TypeSymlink
		case fi.Mode().IsRegular():
			if content, err = os.ReadFile(p); err != nil {
				return err
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(content))
		default:
			return fmt.Errorf("%s: not a file, directory or link", p)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err = tw.Write(content)
		return err
	})
}

func gitOr(ctx context.Context, def string, args ...string) string {
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		return def
	}
	return string(bytes.TrimSpace(out))
}
