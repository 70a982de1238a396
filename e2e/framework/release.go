package framework

// A release as an admin receives it (docs/install.md, "Install from a
// release"): what `make release` writes, its image index pushed to a
// registry the cluster pulls from, and what of its objects a cluster still
// holds after an uninstall.

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Release is one directory `make release` wrote (hack/release).
type Release struct {
	Version string
	Dir     string
	// Image is the webhook image install.yaml names: repository@digest.
	Image string
	// ReportsImage is kubectl fence's, which policyreports.yaml and the
	// chart name: repository@digest.
	ReportsImage string
}

// ReportsRepository is where a release's kubectl fence image goes beside
// its webhook image repository: the same registry and owner.
func ReportsRepository(imageRepo string) string { return path.Dir(imageRepo) + "/kubectl-fence" }

// InstallYAML is the path of the release's install.yaml.
func (r *Release) InstallYAML() string { return filepath.Join(r.Dir, "install.yaml") }

// Chart is the path of the release's Helm chart package.
func (r *Release) Chart() string {
	return filepath.Join(r.Dir, "sandbox-fence-"+strings.TrimPrefix(r.Version, "v")+".tgz")
}

// FenceConfigYAML is the path of the release's default FenceConfig.
func (r *Release) FenceConfigYAML() string { return filepath.Join(r.Dir, "fenceconfig.yaml") }

// BaselineYAML is the release's Cilium baseline.
func (r *Release) BaselineYAML() string { return filepath.Join(r.Dir, "baseline.yaml") }

// Objects are the objects install.yaml creates, in its order, then the
// FenceConfig of fenceconfig.yaml.
func (r *Release) Objects() ([]*unstructured.Unstructured, error) {
	objs, err := ReadYAMLFile(r.InstallYAML())
	if err != nil {
		return nil, err
	}
	cfg, err := ReadYAMLFile(r.FenceConfigYAML())
	if err != nil {
		return nil, err
	}
	return append(objs, cfg...), nil
}

// BuildRelease runs hack/release as `make release VERSION=version
// RELEASE_IMAGE=imageRepo` does, into out, for this machine's platform
// only: the webhook image the cluster's nodes run, and kubectl fence.
func BuildRelease(ctx context.Context, repoRoot, version, imageRepo, out string, logf Logf) (*Release, error) {
	cmd := exec.CommandContext(ctx, "go", "-C", filepath.Join(repoRoot, "hack"), "run", "./release",
		"-root", repoRoot, "-version", version, "-image", imageRepo, "-reports-image", ReportsRepository(imageRepo), "-out", out,
		"-platforms", runtime.GOOS+"/"+runtime.GOARCH)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("make release VERSION=%s (hack/release): %w\n%s", version, err, b)
	}
	logf("release %s built into %s", version, out)
	r := &Release{Version: version, Dir: out}
	objs, err := r.Objects()
	if err != nil {
		return nil, err
	}
	reports, err := ReadYAMLFile(filepath.Join(out, "policyreports.yaml"))
	if err != nil {
		return nil, err
	}
	r.Image = pinnedImage(objs, "Deployment", imageRepo, "spec", "template", "spec", "containers")
	r.ReportsImage = pinnedImage(reports, "CronJob", ReportsRepository(imageRepo), "spec", "jobTemplate", "spec", "template", "spec", "containers")
	switch {
	case r.Image == "":
		return nil, fmt.Errorf("release %s: install.yaml has no Deployment whose image is %s@sha256:...", version, imageRepo)
	case r.ReportsImage == "":
		return nil, fmt.Errorf("release %s: policyreports.yaml has no CronJob whose image is %s@sha256:...", version, ReportsRepository(imageRepo))
	}
	return r, nil
}

// pinnedImage is the image of repo, pinned by digest, that a container at
// containers (a pod template's) of an object of kind among objs runs; ""
// if none does.
func pinnedImage(objs []*unstructured.Unstructured, kind, repo string, containers ...string) string {
	for _, o := range objs {
		if o.GetKind() != kind {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, containers...)
		for _, c := range cs {
			if img, _ := c.(map[string]any)["image"].(string); strings.HasPrefix(img, repo+"@sha256:") {
				return img
			}
		}
	}
	return ""
}

// Registry is an OCI registry served over plain HTTP on every interface of
// this machine (go-containerregistry's in-memory one), for the cluster's
// nodes to pull from.
type Registry struct {
	Port int
	srv  *http.Server
}

// StartRegistry serves a registry on a free port until Stop.
func StartRegistry() (*Registry, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, err
	}
	r := &Registry{Port: ln.Addr().(*net.TCPAddr).Port}
	r.srv = &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Stop ends the server.
func (r *Registry) Stop() { _ = r.srv.Close() }

// Push publishes the release's image indexes as repository:version, the
// way .github/workflows/release.yml's `crane push --index` does, and checks
// that each digest pushed is the one the release pins: webhook-image.oci.tar
// (install.yaml's) to repository, kubectl-fence-image.oci.tar
// (policyreports.yaml's) beside it (ReportsRepository). repository is the
// release's image repository with its host replaced by this registry.
func (r *Registry) Push(ctx context.Context, rel *Release, repository string) error {
	for _, x := range []struct{ file, repo, pinned string }{
		{"webhook-image.oci.tar", repository, rel.Image},
		{"kubectl-fence-image.oci.tar", ReportsRepository(repository), rel.ReportsImage},
	} {
		if err := r.push(ctx, rel, x.file, x.repo, x.pinned); err != nil {
			return err
		}
	}
	return nil
}

func (r *Registry) push(ctx context.Context, rel *Release, file, repository, pinned string) error {
	dir, err := os.MkdirTemp("", "sandbox-fence-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if b, err := exec.CommandContext(ctx, "tar", "-xf", filepath.Join(rel.Dir, file), "-C", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("unpacking %s's %s: %w\n%s", rel.Version, file, err, b)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	if want := pinned[strings.Index(pinned, "@")+1:]; d.String() != want {
		return fmt.Errorf("release %s: %s's index is %s, the release pins %s", rel.Version, file, d, want)
	}
	ref, err := name.ParseReference(fmt.Sprintf("127.0.0.1:%d/%s:%s", r.Port, repository, rel.Version), name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("pushing %s's %s to %s: %w", rel.Version, file, ref, err)
	}
	return nil
}

// Leftovers names every object of objs that the cluster still has: after an
// uninstall, nothing. Objects of a kind the cluster no longer serves (their
// CRD is gone) are gone.
func (e *Env) Leftovers(ctx context.Context, objs []*unstructured.Unstructured) ([]string, error) {
	mapper, err := e.Mapper()
	if err != nil {
		return nil, err
	}
	mapper.Reset()
	var left []string
	for _, o := range objs {
		ri, err := ResourceFor(mapper, e.Admin.Dynamic, o)
		if err != nil {
			if meta.IsNoMatchError(err) {
				continue
			}
			return nil, err
		}
		switch _, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{}); {
		case err == nil:
			left = append(left, describe(o))
		case apierrors.IsNotFound(err):
		default:
			return nil, fmt.Errorf("reading %s: %w", describe(o), err)
		}
	}
	return left, nil
}

func describe(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), ns, o.GetName())
	}
	return o.GetKind() + " " + o.GetName()
}
